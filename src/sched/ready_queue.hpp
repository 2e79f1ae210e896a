// ready_queue.hpp — a device's queue of ready tasks (the "per-device queue" of task_queue.*).
//
// Producers are any threads; the consumer is normally the device's worker, but an idle thief may
// take the consumer role while the owner is busy (one consumer at a time, arbitrated by a flag), so
// tasks never sit behind a long-running task. The capacity (task_queue.per_device_queue_depth) is a
// bound for try_push(): a full queue makes the *submitter* wait or help — the runtime's own
// internal releases use push_unbounded() and never drop work.
//
// Two implementations, chosen by task_queue.type:
//  - lock_free_mpsc: Vyukov's intrusive MPSC queue (one XCHG per push, no CAS loop); the link lives
//    in the queued object, so queueing allocates nothing.
//  - mutex: a std::mutex-guarded ring — the simple reference the lock-free one is measured against.
// Memory ordering: a push happens-before the pop that returns the item.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>

#include "util/cpu.hpp"

namespace nerve {

// The intrusive link every queueable object starts with.
struct QueueLink {
  std::atomic<QueueLink*> next{nullptr};
};

enum class QueueType;

class ReadyQueue {
 public:
  ReadyQueue(QueueType type, std::size_t capacity);
  ReadyQueue(const ReadyQueue&) = delete;
  ReadyQueue& operator=(const ReadyQueue&) = delete;

  // try_push() appends `node` unless the queue holds `capacity` items already.
  bool try_push(QueueLink* node) noexcept;
  // push_unbounded() appends even past capacity (internal releases must not block or drop).
  void push_unbounded(QueueLink* node) noexcept;
  // try_pop() takes the oldest item; nullptr when empty, momentarily inconsistent, or when another
  // thread holds the consumer role.
  QueueLink* try_pop() noexcept;

  // size() is an estimate (exact when quiescent).
  std::size_t size() const noexcept {
    const auto pushed = pushed_.load(std::memory_order_acquire);
    const auto popped = popped_.load(std::memory_order_acquire);
    return pushed > popped ? static_cast<std::size_t>(pushed - popped) : 0;
  }
  bool maybe_nonempty() const noexcept { return size() != 0; }
  std::size_t capacity() const noexcept { return capacity_; }
  bool lock_free() const noexcept { return lock_free_; }

 private:
  void link(QueueLink* node) noexcept;
  QueueLink* unlink() noexcept;  // consumer role held

  const bool lock_free_;
  const std::size_t capacity_;
  // Producer side.
  alignas(cache_line_size) std::atomic<std::uint64_t> pushed_{0};
  std::atomic<QueueLink*> head_{&stub_};
  // Consumer side.
  alignas(cache_line_size) std::atomic<std::uint64_t> popped_{0};
  std::atomic<bool> consumer_busy_{false};
  QueueLink* tail_ = &stub_;
  QueueLink stub_;
  // mutex implementation
  std::mutex mutex_;
  std::deque<QueueLink*> items_;
};

}  // namespace nerve
