#include "sched/ready_queue.hpp"

#include "nerve/config.hpp"

namespace nerve {

ReadyQueue::ReadyQueue(QueueType type, std::size_t capacity)
    : lock_free_(type == QueueType::lock_free_mpsc), capacity_(capacity == 0 ? 1 : capacity) {}

bool ReadyQueue::try_push(QueueLink* node) noexcept {
  const std::uint64_t position = pushed_.fetch_add(1, std::memory_order_acq_rel);
  if (position - popped_.load(std::memory_order_acquire) >= capacity_) {
    // Full: only the pop side can make room. Undo the reservation.
    pushed_.fetch_sub(1, std::memory_order_acq_rel);
    return false;
  }
  link(node);
  return true;
}

void ReadyQueue::push_unbounded(QueueLink* node) noexcept {
  pushed_.fetch_add(1, std::memory_order_acq_rel);
  link(node);
}

QueueLink* ReadyQueue::try_pop() noexcept {
  if (!maybe_nonempty()) return nullptr;
  if (consumer_busy_.exchange(true, std::memory_order_acquire)) return nullptr;
  QueueLink* node = unlink();
  if (node != nullptr) popped_.fetch_add(1, std::memory_order_acq_rel);
  consumer_busy_.store(false, std::memory_order_release);
  return node;
}

void ReadyQueue::link(QueueLink* node) noexcept {
  if (!lock_free_) {
    std::lock_guard lock(mutex_);
    items_.push_back(node);
    return;
  }
  node->next.store(nullptr, std::memory_order_relaxed);
  QueueLink* previous = head_.exchange(node, std::memory_order_acq_rel);
  previous->next.store(node, std::memory_order_release);
}

// Vyukov's intrusive MPSC pop: the stub node keeps head_ non-null; between a producer's exchange and
// its link store the queue is briefly inconsistent and we report empty (the producer's wake-up check
// comes after the link, so a sleeping consumer is still woken).
QueueLink* ReadyQueue::unlink() noexcept {
  if (!lock_free_) {
    std::lock_guard lock(mutex_);
    if (items_.empty()) return nullptr;
    QueueLink* node = items_.front();
    items_.pop_front();
    return node;
  }
  QueueLink* tail = tail_;
  QueueLink* next = tail->next.load(std::memory_order_acquire);
  if (tail == &stub_) {
    if (next == nullptr) return nullptr;
    tail_ = next;
    tail = next;
    next = next->next.load(std::memory_order_acquire);
  }
  if (next != nullptr) {
    tail_ = next;
    return tail;
  }
  if (tail != head_.load(std::memory_order_acquire)) return nullptr;  // a push is half done
  stub_.next.store(nullptr, std::memory_order_relaxed);
  QueueLink* previous = head_.exchange(&stub_, std::memory_order_acq_rel);
  previous->next.store(&stub_, std::memory_order_release);
  next = tail->next.load(std::memory_order_acquire);
  if (next != nullptr) {
    tail_ = next;
    return tail;
  }
  return nullptr;
}

}  // namespace nerve
