// thread_state.hpp — what the runtime keeps per thread that uses a context.
//
// Every thread that submits to or waits on a context gets one ThreadState, owned by the context
// (so it outlives the thread's use of it) and found through a one-entry thread-local cache keyed by
// the context's unique id. Workers own theirs for the context's lifetime.
//
// Counters are written only by the owning thread (relaxed load + store, no read-modify-write) and
// read by others; the sum of `submitted` minus the sum of `completed` over all thread states is the
// number of tasks in flight.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <vector>

#include "task/dependency_tracker.hpp"
#include "task/record_allocator.hpp"
#include "util/cpu.hpp"
#include "util/parker.hpp"
#include "util/stack_bounds.hpp"

namespace nerve::detail {

struct ContextImpl;
struct WorkerSlot;
struct BufferState;
struct TaskLog;
struct MonitoredRun;

struct alignas(cache_line_size) ThreadState {
  ContextImpl* context = nullptr;
  WorkerSlot* slot = nullptr;  // the worker slot this thread runs, if any
  bool is_worker_thread = false;
  // Whether this application thread owns the scheduler's submitter deque (decided at its first
  // submission outside a slot; see Scheduler::owns_submitter_deque).
  enum class SubmitterRole : std::uint8_t { undecided, owner, other };
  SubmitterRole submitter_role = SubmitterRole::undecided;
  int nesting = 0;  // tasks currently executing on this thread's stack
  // Blocking maps on this thread's stack waiting to be granted (WaitedMapping): the tasks they run
  // meanwhile are nested in a wait as much as those a task's wait runs.
  int map_waits = 0;
  StackBounds stack;  // that stack (set when a thread takes this state)
  // Of those, bodies that deferred their completion (defer_current_task()): such a task may be
  // finished, and the context shut down, while its body still runs.
  int deferred_bodies = 0;
  bool bypass_enabled = false;   // finishing a task on a worker slot: a released successor may...
  TaskRecord* bypass = nullptr;  // ...be kept here to run next, skipping the deque
  RecordAllocator::Cache records;
  Parker parker;
  std::atomic<std::uint64_t> submitted{0};
  std::atomic<std::uint64_t> completed{0};
  // Submission throttling (ContextImpl::throttle_slow): submissions until its next call, and the
  // `submitted` count at which it next counts the tasks in flight.
  std::uint32_t submissions_until_check = 0;
  std::uint64_t count_in_flight_at = 0;
  // Fork-join spawns of an application thread under back-pressure (ContextImpl::begin_spawn): the
  // last submission was such a spawn, and whether they now run at once instead of being queued.
  bool spawned_last = false;
  bool spawns_inline = false;
  std::uint32_t placement_cursor = 0;
  std::uint64_t random_state = 0x9E3779B97F4A7C15ull;
  std::vector<const TaskRecord*> scratch_finished_sources;  // recording: arrows from finished tasks
  std::vector<BufferState*> scratch_buffers;
  TaskLog* perf_log = nullptr;  // perf recording: this thread's records (owned by the PerfMonitor)
  // perf recording / models: the CPU task MonitoredExecutor runs on this thread (innermost, when a
  // task helps while waiting), which finish() ends before publishing the task's completion.
  MonitoredRun* perf_run = nullptr;
  // The kernel's id of the thread that holds this state: Scheduler::check_stall() reads whether a
  // slot's thread is running or blocked (/proc/self/task/<tid>/stat).
  std::atomic<int> tid{0};
  // The watch of this thread's waits without a slot (Scheduler::park_until): a wait that begins
  // right after another ended (a wait_for polled in a loop) continues it.
  std::chrono::steady_clock::time_point stall_since{};
  std::chrono::steady_clock::time_point stall_seen{};  // the last wait's end
  std::uint64_t stall_begun = 0;
  // This thread's shard of the groups' references to the context (ContextImpl::retain_sharded):
  // `owned_references` changes only on this thread inside a task (relaxed load + store, no
  // read-modify-write); `shared_references`, on a line of its own, by any thread, atomically, and
  // holds shard_open_bias while the shard is open.
  std::atomic<std::int64_t> owned_references{0};
  alignas(cache_line_size) std::atomic<std::int64_t> shared_references{0};

  void count_submitted() noexcept {
    submitted.store(submitted.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  }
  void count_completed() noexcept {
    completed.store(completed.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  }
  // xorshift64*: victim selection needs speed, not quality.
  std::uint64_t next_random() noexcept {
    random_state ^= random_state >> 12;
    random_state ^= random_state << 25;
    random_state ^= random_state >> 27;
    return random_state * 0x2545F4914F6CDD1Dull;
  }
};

}  // namespace nerve::detail
