#include "sched/priority_queue.hpp"

#include <algorithm>

namespace nerve::detail {

// std::push_heap keeps the *largest* element first: "a before b" means a ranks lower than b.
bool PriorityQueue::before(const Entry& a, const Entry& b) noexcept {
  if (a.priority != b.priority) return a.priority < b.priority;
  return a.sequence > b.sequence;  // older first among equals
}

void PriorityQueue::push(TaskRecord* task) {
  std::lock_guard lock(mutex_);
  heap_.push_back(Entry{task->priority, next_sequence_++, task});
  std::push_heap(heap_.begin(), heap_.end(), before);
  size_.store(heap_.size(), std::memory_order_seq_cst);
}

TaskRecord* PriorityQueue::pop(std::int32_t minimum) {
  std::lock_guard lock(mutex_);
  if (heap_.empty() || heap_.front().priority < minimum) return nullptr;
  std::pop_heap(heap_.begin(), heap_.end(), before);
  TaskRecord* task = heap_.back().task;
  heap_.pop_back();
  size_.store(heap_.size(), std::memory_order_relaxed);
  return task;
}

bool PriorityQueue::top_priority(std::int32_t& priority) {
  std::lock_guard lock(mutex_);
  if (heap_.empty()) return false;
  priority = heap_.front().priority;
  return true;
}

bool PriorityQueue::has_at_least(std::int32_t minimum) {
  std::lock_guard lock(mutex_);
  return !heap_.empty() && heap_.front().priority >= minimum;
}

}  // namespace nerve::detail
