// priority_queue.hpp — PriorityQueue: the ready tasks that carry a priority other than normal.
//
// Tasks with TaskOptions::priority != 0 bypass the deques and inboxes and wait here, ordered by
// priority (higher first), then by arrival (FIFO among equals). Workers take positive priorities
// before looking anywhere else and negative ones only when they found nothing else to do, so a
// high-priority task overtakes every normal one that has not started, and a low-priority one waits
// for all of them. NUMA placement applies to them under strict affinity only: the scheduler then
// keeps one queue per NUMA node besides the global one (Scheduler::node_prioritized_).
//
// Thread safety: any thread may push or pop (one mutex; these tasks are the exception, not the
// bulk). `size()` is a relaxed hint for the workers' fast check: a pusher increments it before it
// notifies sleepers, so a worker that re-checks after announcing sleep sees the task (the
// scheduler's seq_cst announce/publish protocol covers it like any queue).
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <vector>

#include "task/task_record.hpp"

namespace nerve::detail {

class PriorityQueue {
 public:
  void push(TaskRecord* task);
  // pop(): the highest-priority task whose priority is at least `minimum`, or nullptr.
  TaskRecord* pop(std::int32_t minimum);
  bool maybe_nonempty() const noexcept { return size_.load(std::memory_order_seq_cst) != 0; }
  // has_at_least(): a task of priority >= `minimum` is queued (a hint, read under the lock).
  bool has_at_least(std::int32_t minimum);
  // top_priority(): the highest queued priority (a hint, read under the lock); false if empty.
  bool top_priority(std::int32_t& priority);

 private:
  struct Entry {
    std::int32_t priority;
    std::uint64_t sequence;
    TaskRecord* task;
  };
  static bool before(const Entry& a, const Entry& b) noexcept;  // heap order: a below b

  std::mutex mutex_;
  std::vector<Entry> heap_;
  std::uint64_t next_sequence_ = 0;
  std::atomic<std::size_t> size_{0};
};

}  // namespace nerve::detail
