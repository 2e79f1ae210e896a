// worker_slot.hpp — one CPU execution slot: its queues, its thread, its idle state and statistics.
//
// Slot 0 is the master slot, run by the application thread that first used the context whenever it
// is inside a nerve wait; slots 1.. each have a dedicated thread. `occupant` is the thread running the
// slot right now (nullptr while the master is outside nerve). The deque is pushed and popped by the
// occupant only; anyone may steal from it or take the inbox's consumer role.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "sched/chase_lev_deque.hpp"
#include "sched/ready_queue.hpp"
#include "sched/thread_state.hpp"
#include "task/task_record.hpp"
#include "util/cpu.hpp"

namespace nerve::detail {

struct SlotCounters {
  std::atomic<std::uint64_t> tasks_run{0};
  std::atomic<std::uint64_t> steals{0};
  std::atomic<std::uint64_t> sleeps{0};
  // Time accounting (monotonic_ns), written by the occupant at idle transitions and at the start
  // and end of its outermost wait: run = active_ns (+ now − active_since while running), of which
  // idle = idle_ns (+ now − idle_since while idle).
  std::atomic<std::uint64_t> active_ns{0};
  std::atomic<std::int64_t> active_since{0};
  std::atomic<std::uint64_t> idle_ns{0};
  std::atomic<std::int64_t> idle_since{0};
};

struct alignas(cache_line_size) WorkerSlot {
  WorkerSlot(unsigned slot_index, QueueType queue_type, std::size_t queue_depth)
      : index(slot_index), inbox(queue_type, queue_depth) {}

  const unsigned index;
  int core = 0;
  int numa_node = 0;
  bool bound = false;  // the slot's thread is pinned to its core
  ChaseLevDeque<TaskRecord*> deque;
  ReadyQueue inbox;
  std::atomic<ThreadState*> occupant{nullptr};
  alignas(cache_line_size) std::atomic<bool> sleeping{false};
  std::vector<unsigned> victims;  // slots to steal from, in order (topology distance or random)
  SlotCounters stats;
  std::thread thread;

  // Owner-only relaxed counter bump.
  static void bump(std::atomic<std::uint64_t>& counter, std::uint64_t by = 1) noexcept {
    counter.store(counter.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
  }
};

}  // namespace nerve::detail
