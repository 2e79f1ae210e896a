// context_impl.hpp — the runtime behind nerve::Context: configuration, topology, workers, task
// records, buffers, and the task life cycle (commit → ready → execute → finish).
//
// Lifetime: the Context object holds one "external" reference; every BufferState and every Task
// handle holds another. ~Context() shuts the runtime down (drains tasks, joins workers, frees live
// buffers' data) and drops its reference; the memory goes when the last reference does, so a handle
// that outlives its Context fails cleanly instead of touching freed memory.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <unistd.h>

#include "nerve/config.hpp"
#include "nerve/detail/runtime_api.hpp"
#include "nerve/device.hpp"
#include "nerve/topology.hpp"

#include "backend/device.hpp"
#include "backend/selection.hpp"
#include "backend/test_device.hpp"
#include "memory/coherence.hpp"
#include "memory/host_memory_node.hpp"
#include "memory/memory_node.hpp"
#include "perf/bus_model.hpp"
#include "perf/decision_log.hpp"
#include "perf/monitor.hpp"
#include "runtime/submitter_waits.hpp"
#include "sched/heft.hpp"
#include "sched/scheduler.hpp"
#include "task/record_allocator.hpp"
#include "util/fork_generation.hpp"
#include "util/slot_arena.hpp"
#include "util/spin_lock.hpp"

namespace nerve::detail {

struct PoolState;

// A one-entry cache from context to the calling thread's state. Initial-exec TLS: the library is
// position independent, and the default model would call __tls_get_addr on every task.
struct ThreadCacheEntry {
  std::uint64_t context_id = 0;
  ThreadState* state = nullptr;
};
extern thread_local constinit ThreadCacheEntry thread_cache __attribute__((tls_model("initial-exec")));

// running_task_record(): the task whose body the calling thread is running (the innermost, when
// waits nest), else null.
TaskRecord* running_task_record() noexcept;
// thread_forked_inside_a_task(): the calling thread forked this process inside a task body (known
// from a pthread_atfork handler that watch_forks_inside_tasks() installs, once, before any fork).
bool thread_forked_inside_a_task() noexcept;
void watch_forks_inside_tasks() noexcept;
// refuse_map_behind_running_task(): throws Error(invalid_argument), as a map inside a task does, when
// a mapping of the range in `mode` would wait for the task the calling thread runs (or one ordered
// after it, or one this thread suspended to run it); outside a task it returns. For callers that
// must report that before anything else (the C API's checks of the handle's own mapping).
void refuse_map_behind_running_task(BufferState* buffer, std::size_t offset, std::size_t size, Access mode);
// running_task_unfinished(): the same, unless its body deferred its completion (the record may then
// be finished, even recycled, before the body returns).
TaskRecord* running_task_unfinished() noexcept;
// A task body on the calling thread's stack (ContextImpl::invoke_closure, launch_closure), innermost
// first. The frames below the innermost are tasks suspended in a wait (or in a submission that ran a
// task at once): they resume only after every frame above them returns, which a wait of an upper
// frame for one of them would never allow.
struct RunningFrame {
  TaskRecord* task;
  RunningFrame* outer;
  bool deferred;  // its body deferred its completion: another thread may finish (and recycle) its task
};
// note_gate_reads(): a task registering notes, for each of its reads of a buffer a pool's gate wrote
// (DependencyTracker::pool_written()), in each gate that last wrote part of it and has not succeeded,
// the part it reads — or, once that gate's fate is settled, is cancelled now if the part met a
// cancelled task's output (runtime/pool_state.cpp). Called with the task's trackers locked, before any
// of its accesses registers (one may replace what another reads). Never throws: out of memory, the
// gate falls back to deciding by the dependents' accesses alone.
void note_gate_reads(TaskRecord* consumer) noexcept;
const RunningFrame* innermost_frame() noexcept;
// A blocking map on the calling thread's stack waiting for its mapping to be granted, innermost
// first. The tasks it runs meanwhile run on top of it: the map returns, and the mapping can end,
// only after they do, so a wait of theirs for a task ordered after the mapping never ends.
struct WaitedMapping {
  TaskRecord* mapping;
  WaitedMapping* outer;
};
const WaitedMapping* innermost_waited_mapping() noexcept;
// An untimed wait inside a task parked for want of work (Scheduler::run_until), listed in its
// context's stuck_waits while it sleeps: its thread's frames and waited mappings stay as they are
// until it withdraws (which it does before it runs anything or returns), so other threads' waits may
// read them under stuck_waits_mutex. `blocked` selects the tasks it waits for.
struct StuckWait {
  const RunningFrame* frames = nullptr;  // innermost first
  const WaitedMapping* mappings = nullptr;
  const std::function<bool(const TaskRecord*)>* blocked = nullptr;
  // targets_may_be_ordered() of what `blocked` selects, asked each time (members come and go).
  const std::function<bool()>* ordered = nullptr;
};
[[noreturn]] void throw_waits_for_itself(const TaskRecord& running, const char* what);
[[noreturn]] void throw_wait_too_deep(const ThreadState& thread, const char* what);
// A blocking wait inside a task runs other tasks on the same stack, which may wait in turn: past
// this much stack left, another is refused (throw_wait_too_deep) rather than overflow the stack.
inline constexpr std::uintptr_t wait_stack_reserve = std::uintptr_t{256} * 1024;
// coroutine_root_of(): for a task that runs a stretch of a launched coroutine (not yet finished),
// that coroutine's Task record; else null. A group's or Task's coroutine is its record, not its
// stretches: the wait checks look through a stretch to it.
const TaskRecord* coroutine_root_of(const TaskRecord& task) noexcept;
// is_launched_coroutine(): `task` is a launched coroutine's Task record (coroutine_task_create()).
bool is_launched_coroutine(const TaskRecord& task) noexcept;
// may_be_ordered(): for a member of a group, whether ContextImpl::first_waiting_for(), walking
// without stuck waits, may reach it from a task outside the group. Everything such a walk reaches
// waits for an unfinished task through an edge, or is a launched coroutine (its stretches are
// ordered), a pool's task or gate, or a mapping; a member whose predecessors are all members of its
// group not so ordered themselves (a fork-join's own little graph) is reached only from them. Fixed
// from the end of its submission (edges are only made while a task is submitted) to its end:
// GroupState::ordered_members counts the members for which it holds.
inline bool may_be_ordered(const TaskRecord& task) noexcept {
  return task.ordered_from_outside() || task.kind != TaskKind::function || task.pool != nullptr ||
         is_launched_coroutine(task);
}
// may_be_ordered_now(): whether such a walk, from any task, may reach `task` now: a plain task whose
// predecessors have all finished is never ordered behind another again.
inline bool may_be_ordered_now(const TaskRecord& task) noexcept {
  return task.kind != TaskKind::function || task.pool != nullptr ||
         task.pending.load(std::memory_order_acquire) != 0 || is_launched_coroutine(task);
}
// The tasks a wait waits for, for its checks (`blocked`): a predicate, and optionally
// `may_be_ordered()`, false when none of them can be reached by a walk of first_waiting_for() from
// another task (without stuck waits): that walk then finds nothing and is skipped.
template <class Blocked>
bool targets_may_be_ordered(const Blocked& blocked) noexcept {
  if constexpr (requires { blocked.may_be_ordered(); }) {
    return blocked.may_be_ordered();
  } else {
    return true;
  }
}
// The coroutine stretch the calling thread runs (coroutines.cpp): `step` is the stretch's task record
// and `root` the Task record of the launched coroutine it runs for; {null, null} outside stretches.
// Valid while running_task_record() == step (tasks run nested under a stretch's wait are not it).
struct CoroutineStretch {
  const TaskRecord* step = nullptr;
  const TaskRecord* root = nullptr;
};
extern thread_local constinit CoroutineStretch running_stretch __attribute__((tls_model("initial-exec")));
// throw_waits_for_dependent(): `running` waits for `waited`, which waits for `running` to finish.
[[noreturn]] void throw_waits_for_dependent(const TaskRecord& running, const TaskRecord& waited,
                                            const char* what);
// throw_waits_for_awaiter(): a wait inside `running` for `waited`, which came to wait for `running`
// after the wait began (a coroutine awaiting it, or work ordered after it), would never return.
[[noreturn]] void throw_waits_for_awaiter(const TaskRecord& running, const TaskRecord& waited,
                                          const char* what);

struct ContextImpl final : TaskExecutor, DataListener, DeviceHost {
  explicit ContextImpl(const Settings& settings);
  ~ContextImpl();
  ContextImpl(const ContextImpl&) = delete;
  ContextImpl& operator=(const ContextImpl&) = delete;

  // shutdown() drains every task, stops the workers and frees the data of buffers still alive.
  void shutdown() noexcept;
  void add_external_reference() noexcept { external_references.fetch_add(1, std::memory_order_relaxed); }
  // drop_external_reference() deletes the context when the last reference goes.
  void drop_external_reference() noexcept;
  // detach_pool(): a pool destroyed while a wait for its tasks could never end; it is freed once its
  // gate is done (free_detached_pools(): at the next pool_create(), wait_all() and shutdown).
  void detach_pool(PoolState* pool);
  void free_detached_pools() noexcept;
  // release_owner(): the Context object goes: drain and stop (shutdown()), close the reference
  // shards, drop the object's own reference.
  void release_owner() noexcept;

  // Sharded references, for TaskGroups: fork-join code makes a group per task, and one shared counter
  // bounced its cache line between the workers on every group (a quarter of fib(30)'s time); even an
  // uncontended atomic add and subtract per group cost more than the rest of its bookkeeping. A group
  // counts its reference in the shard of the thread that made it (ThreadState). Inside a task of this
  // context, the thread counts in its `owned_references` with a plain load and store: the shards stay
  // open until every task has ended (release_owner()), so nobody else reads that counter meanwhile.
  // Elsewhere, and for a group released on another thread, `shared_references` counts atomically. An
  // open shard holds one central reference; closing folds `owned` into `shared` and takes the bias
  // off, and whoever brings `shared` to zero drops the central reference.
  // retain_sharded() gives the shard counted in, or null when it counted centrally (no thread state
  // could be made, or the shards are closed); release_sharded() undoes it.
  static constexpr std::int64_t shard_open_bias = std::int64_t{1} << 62;
  ThreadState* retain_sharded() noexcept;
  void release_sharded(ThreadState* shard) noexcept;

  // registered_thread(): the calling thread's state if it has one (never makes one).
  const ThreadState* registered_thread() noexcept;
  // current_thread() is the calling thread's state in this context (created on first use).
  ThreadState& current_thread() {
    if (thread_cache.context_id == id) [[likely]]
      return *thread_cache.state;
    return register_current_thread();
  }
  ThreadState& register_current_thread();
  // take_back_thread_state(): `state`'s thread is exiting (thread_exit.hpp): the next thread to
  // register takes it over.
  void take_back_thread_state(ThreadState* state) noexcept;
  // make_thread_state(): a new state for the thread of `entry` (threads_mutex held); on failure the
  // entry is erased and the error thrown.
  ThreadState* make_thread_state(std::unordered_map<std::thread::id, ThreadState*>::iterator entry);
  // calling_worker_numa() is the NUMA node of the worker slot the calling thread runs, or -1.
  int calling_worker_numa() const noexcept {
    if (thread_cache.context_id != id || thread_cache.state->slot == nullptr) return -1;
    return thread_cache.state->slot->numa_node;
  }

  // --- task life cycle (task_lifecycle.cpp)
  // `guard_depth`: refuse a submission inside a task nested too deep (refuse_deep_nesting); off for
  // nerve's own continuations, which only queue work (refused, a coroutine would resume inline).
  TaskDraft begin_task(std::size_t closure_size, std::size_t closure_align, bool guard_depth = true);
  void abandon_task(TaskDraft draft) noexcept;
  // begin_spawn(): begin_task() for a spawn of a plain closure with no accesses, options, group or
  // pool. Under back-pressure (an application thread whose queue is past its depth) it returns
  // {nullptr, nullptr} instead, with slot 0 taken: the caller runs the closure at once through
  // run_spawn_inline(), or gives the slot back with abandon_spawn() if making it throws.
  TaskDraft begin_spawn(std::size_t closure_size, std::size_t closure_align);
  void run_spawn_inline(void (*body)(void*), void* closure) noexcept;
  void abandon_spawn() noexcept;
  TaskDraft allocate_draft(ThreadState& thread, std::size_t closure_size, std::size_t closure_align);
  void refuse_submission_after_shutdown() const;
  // What the frame of a spawn run at once names as its task (running_task_record()): a record that is
  // never queued, finished or recycled, with no accesses, successors, group or handle — what such a
  // spawn would have had — so that the body's submissions, waits and maps are checked as a task's.
  // Only slot 0 runs such spawns, so one serves the context.
  TaskRecord inline_spawn_record;
  // spawns_may_run_inline(): nothing a queued fork-join task would get (placement on a device,
  // recording, timing) is lost by running it at once on the calling thread.
  // Nor while the calling thread holds a mapping: a body that maps the same data would be refused
  // (this thread's mapping), where a queued task waits for the unmap.
  bool spawns_may_run_inline() { return lean_runs_on_host() && !times_tasks && !holds_mapping(); }
  // discard_task(): a draft whose closure is built and accesses are counted goes back unsubmitted.
  void discard_task(TaskDraft draft, const ClosureOps* ops) noexcept;
  TaskRecord* commit_task(TaskDraft draft, const SubmitInfo& info);
  void make_ready(TaskRecord* task, ThreadState& thread, bool submission);
  void finish(TaskRecord* task, ThreadState& thread, std::uint32_t outcome);
  // finish_group_member(): a task of `group` ended (wakes the group's waiter at the last one).
  void finish_group_member(GroupState* group) noexcept;
  void wake_root_waiters() noexcept;
  // lean_runs_on_host(): a task of the fork-join fast path (TaskRecord::lean == lean_pristine) runs
  // on the CPU workers with nothing to place, fetch or record: make_ready() would only enqueue it,
  // finish() only count it.
  bool lean_runs_on_host() const noexcept {
    return recorder == nullptr && (coherence == nullptr || closure_devices == 0);
  }
  void release_task(TaskRecord* task) noexcept { release_task(task, current_thread()); }
  void release_task(TaskRecord* task, ThreadState& thread) noexcept;
  TaskRecord* allocate_record(ThreadState& thread);
  // copy_accesses() validates and stores accesses in `task`, and each keeps its buffer alive until
  // the task finishes (begin_task_access); a pool gate's, already validated, do neither.
  void validate_access(const AccessSpec& access) const;
  [[noreturn]] __attribute__((cold, noinline)) void reject_access(const AccessSpec& access) const;
  void copy_accesses(TaskRecord* task, const AccessSpec* accesses, std::size_t count);
  // register_dependencies() infers `task`'s predecessors from its accesses and adds the edges, under
  // the task's submission guard (task_graph.hpp); returns how many it added, for the guard's release.
  std::size_t register_dependencies(TaskRecord* task, ThreadState& thread, TaskRecord* const* after,
                                    std::size_t after_count, bool after_consumes = true);
  int preferred_numa_node(const TaskRecord* task) const noexcept;

  // TaskExecutor
  void execute(TaskRecord* task, ThreadState& thread) override;
  void fill_views(const TaskRecord* task, const ThreadState& thread, AccessView* views) noexcept;
  std::uint32_t invoke_closure(TaskRecord* task, ThreadState& thread, const AccessView* views) noexcept;
  ThreadState& create_worker_state(unsigned slot) override;
  void on_slot_idle() noexcept override;
  bool may_help(ThreadState& /*thread*/) override { return !holds_mapping(); }
  bool forked_inside_a_task() noexcept override { return thread_forked_inside_a_task(); }

  // --- devices and data placement (devices.cpp)
  // add_test_device() adds a simulated device with separate memory (tests); only before the first
  // buffer is created. Returns its device index.
  int add_test_device(const TestDeviceOptions& options);
  // add_device(): a device from a backend (numbered device_count(), owning memory node of that index).
  int add_device(std::unique_ptr<Device> device);
  DeviceLaunch prepare_launch(TaskRecord* task, Device& device) override;
  void complete(TaskRecord* task, Device& device, std::exception_ptr error,
                std::int64_t end_ns) noexcept override;
  std::exception_ptr launch_closure(TaskRecord* task, Device& device, void* stream) noexcept override;
  bool place_elsewhere(TaskRecord* task, Device& device) noexcept override;
  // device_views(): the task's accesses in `device`'s memory (their replicas there must be valid).
  std::vector<AccessView> device_views(const TaskRecord& task, const Device& device) const;
  unsigned device_count() const noexcept { return static_cast<unsigned>(devices.size()) + 1; }
  std::vector<DeviceInfo> device_infos() const;
  bool has_devices() const noexcept { return !devices.empty(); }
  // PlacementNeeds: what nerve's own placement asks of a device for one task, worked out once per
  // decision. `replica_bytes` is CoherenceEngine::replica_footprint(): a device whose memory limit is
  // below it can never hold the task's data (it would fail there with out_of_memory), whereas one
  // that is only full now makes the task wait, so the limit counts, not what is free.
  struct PlacementNeeds {
    bool strict = true;
    std::size_t replica_bytes = 0;
  };
  int choose_device(TaskRecord* task);
  // place_heft(): scheduler.policy heft's choice for a kernel call (heft_placement.cpp);
  // `locality` is the locality-aware choice, its fallback while models calibrate; `needs`: see
  // placeable_on().
  int place_heft(TaskRecord* task, int locality, const PlacementNeeds& needs);
  // heft_finished(): a task placed by heft finished (or failed before running): its device frees up.
  void heft_finished(const TaskRecord* task) noexcept;
  // memory_nodes(): every memory node, by index (host first).
  std::vector<MemoryNode*> memory_nodes();
  // place_with_data(): pick the task's device, make its data valid there, then run it there.
  void place_with_data(TaskRecord* task, ThreadState& thread, bool submission);
  // host_bound_in_place(): the task can only run on the CPU workers and its data has never left the
  // host, so placement has nothing to choose and coherence nothing to move.
  bool host_bound_in_place(const TaskRecord& task) const noexcept {
    return task.device_hint <= 0 && task.kernel == nullptr && closure_devices == 0 &&
           !task.stream_launcher() && CoherenceEngine::host_holds_all(task);
  }
  // dispatch(): `waited` when the task waited for copies or memory (its data_valid_ns is now).
  void dispatch(TaskRecord* task, ThreadState& thread, bool submission, bool waited);
  void data_ready(TaskRecord* task) override;
  void memory_freed(unsigned node) noexcept override;
  void acquire_and_dispatch(TaskRecord* task, ThreadState& thread, bool submission, bool retried = false);
  void run_on_device(TaskRecord* task, Device& device) override;
  void validate_device_hint(int device, const char* name) const;
  // check_closure_device(): a plain function (no Kernel) may be forced onto `device` only if that
  // device runs it (the CPU workers, test devices; CUDA devices a C kernel in the launcher form),
  // and one for CUDA only needs such a device (`device` -1: any); else Error(invalid_argument).
  void check_closure_device(const TaskRecord& task, int device, const char* name) const;
  bool can_run_on(const TaskRecord& task, int device) const noexcept;
  // cpu_may_run(): the CPU workers may run `task`: it has a CPU body and TaskOptions::device did not
  // send it to another device. A cancelled task that fails this never reached a device it could run
  // on: it is cancelled on a worker, but that is no CPU run (not recorded, not counted as the CPU's).
  bool cpu_may_run(const TaskRecord& task) const noexcept {
    return task.device_hint <= 0 && can_run_on(task, 0);
  }
  // placeable_on(): nerve's own placement may choose `device` for `task`: it runs the task and, when
  // `needs.strict`, takes its accesses as they are (Device::takes_accesses) and has the room for its
  // replicas. placement_needs(): strict when some device does all of that — the CPU workers do
  // whenever they run the task — else placement falls back to any device that runs it, where it fails
  // saying why.
  bool placeable_on(const TaskRecord& task, int device, const PlacementNeeds& needs) const noexcept;
  // why_left_out(): in words, why placeable_on() is false for a device that runs the task: an
  // accelerator (device >= 1; the CPU workers that run a task always take it).
  std::string why_left_out(const TaskRecord& task, int device, const PlacementNeeds& needs) const;
  PlacementNeeds placement_needs(const TaskRecord& task) const;
  // write_trace(): perf.trace at shutdown (a failure is logged, not thrown).
  void write_trace() noexcept;
  // perf.trace made absolute, or this context's own file when that one is another output's
  // (claim_output_path: `trace_taken_by` then says whose).
  std::string trace_path;
  std::string trace_taken_by;
  void check_placeable(const TaskRecord& task) const;
  // why_no_device_of(): why this context has no device of `kind` ("the backend 'cuda' found no
  // device: ...", or that gpu.devices is none); empty when it does not know.
  std::string why_no_device_of(DeviceKind kind) const;
  void grant_mapping(TaskRecord* task, ThreadState& thread);
  // A try_map() whose data must first come back from a device asks for it with a prefetch mapping,
  // which nobody holds: granted, it ends itself (buffers.cpp).
  static bool is_prefetch_mapping(const TaskRecord* task) noexcept;
  // end_mapping(): an unmap, or a granted prefetch: out of the tracker, finished.
  void end_mapping(TaskRecord* task, ThreadState& thread) noexcept;
  void destroy_closure(TaskRecord* task) noexcept;

  // --- coroutines (coroutines.cpp)
  // resume_group_continuation() resumes a coroutine that awaited a group that just emptied.
  void resume_group_continuation(void* coroutine, const TaskRecord* root) noexcept;

  // --- waiting (waiting.cpp)
  std::int64_t in_flight() const noexcept;
  // wait_all() = wait_for_all_tasks() (the wait; Error(buffer_misuse) when it could never end: see
  // wait_rechecking()), then report_root_errors() (rethrows the first failure not reported yet). The C
  // API calls them apart: a refused wait is the caller's misuse, a rethrown failure a task's.
  void wait_all() {
    refuse_wait_all_inside_a_task();
    wait_for_all_tasks();
    report_root_errors();
  }
  // refuse_wait_all_inside_a_task(): Error(invalid_argument) when inside_a_task() (the public
  // wait_all()s; a destruction inside another context's task still waits).
  void refuse_wait_all_inside_a_task();
  // inside_a_task(): the calling thread runs a task's body: one of this context's (nested in its
  // waits, or a call on a device's launcher thread) or another context's, whose task this context's
  // work may wait for (a mapping of its buffer, a pool reading what it writes).
  // A task of the parent process on a forked child's stack (fork() in a body) is none: nothing in
  // the child waits for it, and the child's own contexts work (nerve/context.hpp: fork).
  bool inside_a_task() {
    if (current_thread().nesting > 0) return true;
    const TaskRecord* running = running_task_record();
    return running != nullptr && !running->context->forked_child();
  }
  void wait_for_all_tasks();
  // settle_device_memory(): shutdown waits until no copy is in flight on any device's memory node at
  // once (MemoryNode::wait_idle()) before it drains them one by one.
  void settle_device_memory() noexcept;
  void report_root_errors();
  // refuse_endless_destruction(): shutdown()'s own-mapping check (context_impl.cpp).
  void refuse_endless_destruction() noexcept;
  // throttle_submission() runs throttle_slow() every few submissions of a thread (a decrement and a
  // branch on the fast path): an application thread then checks the master deque's depth, and every
  // thread, less often, the number of tasks in flight (throttle_intervals()).
  // `submitted` is the task just submitted (it may have run and been recycled already: compared only).
  void throttle_submission(ThreadState& thread, const TaskRecord* submitted) {
    if (thread.submissions_until_check-- == 0) [[unlikely]]
      throttle_slow(thread, submitted);
  }
  void throttle_slow(ThreadState& thread, const TaskRecord* submitted);
  // A submitter that has waited this long for the tasks in flight, with nothing to help with, logs
  // warn_stalled_submission(), once in the context's life (tests shorten the wait).
  std::chrono::milliseconds stalled_submission_warning{5000};
  std::atomic<bool> stalled_submission_warned{false};
  void warn_stalled_submission(std::int64_t in_flight, std::int64_t limit) const noexcept;
  // throttle_intervals(): submissions between two checks of `thread`, as {depth, in flight}.
  // - The depth (an application thread's deque): per_device_queue_depth / 8, at most 31, so a small
  //   depth is honoured to within an eighth.
  // - The count in flight: an eighth of max_in_flight shared among the threads that use the context,
  //   so that all of them together overshoot the bound by at most about an eighth — but never more
  //   often than an eighth of it alone, at most 31 (the interval before), and never less often than
  //   every 1024. Counting reads every thread's counters, lines their owners write at every task:
  //   checked every 32 submissions, a fork-join worker missed on the other's lines at each check and
  //   fib(30) on two workers ran 83 ms instead of 71 (two cores that share no cache; alternated runs).
  struct ThrottleIntervals {
    std::uint32_t depth;
    std::uint32_t in_flight;
  };
  ThrottleIntervals throttle_intervals() const noexcept {
    const std::uint32_t depth = std::min<std::uint32_t>(config.task_queue.per_device_queue_depth / 8, 31);
    const std::size_t threads = std::max<std::size_t>(thread_count.load(std::memory_order_relaxed), 1);
    const std::size_t eighth = config.task_queue.max_in_flight / 8;
    const std::size_t share = std::max(eighth / threads, std::min<std::size_t>(eighth, 31));
    return {depth, static_cast<std::uint32_t>(std::min<std::size_t>(share, 1023))};
  }
  // record_root_error(): `task` failed outside groups and pools; wait_all() reports it unless
  // Task::wait() does first (forget_root_error()): then wait_all() does not report it again.
  void record_root_error(TaskRecord& task) noexcept;
  // keep_root_error(): adds `error` to those wait_all() reports (nobody can take it off); 0 if kept,
  // else the report in which it was dropped (over the cap, or out of memory). _locked(): the same
  // under root_error_lock, for an entry under `ticket` (0: none).
  std::uint32_t keep_root_error(const std::exception_ptr& error) noexcept;
  std::uint32_t keep_root_error_locked(const std::exception_ptr& error, std::uint32_t ticket) noexcept;
  // forget_root_error() takes off what record_root_error() added for `task`, and nothing else: two
  // tasks that threw the same exception object have equal errors (a wait for one took the other's).
  void forget_root_error(TaskRecord& task) noexcept;

  // --- buffers (buffers.cpp)
  void register_buffer(BufferState* buffer);
  void unregister_buffer(BufferState* buffer) noexcept;
  std::uint64_t next_buffer_id() noexcept { return buffer_ids.fetch_add(1, std::memory_order_relaxed) + 1; }

  Config config;
  Topology topology;
  RecordAllocator records;
  HostMemoryNode host_memory;
  // Where BufferStates live (buffer_create()): in creation order, whatever the heap went through.
  SlotArena buffer_slots;
  std::vector<std::unique_ptr<Device>> devices;  // device i + 1
  // The backends that found no device when the context was built, and why; set once, before any
  // submit (read without a lock). why_no_device_of() explains a kind no device has from it.
  std::vector<BackendWithoutDevices> backends_without_devices;
  std::unique_ptr<CoherenceEngine> coherence;  // once there is more than one memory node
  // How many devices run plain closures (test devices), probed once when added: none means a closure
  // can only run on the CPU workers (the fast path's test). Forced placements ask Device::can_run.
  unsigned closure_devices = 0;
  // scheduler.policy heft with devices: the placer and the bus model it reads (else null);
  // perf.decision_log or perf.trace under heft: the explanations (else null).
  std::unique_ptr<HeftPlacer> heft;
  std::unique_ptr<BusModel> bus;
  std::unique_ptr<DecisionLog> decisions;
  // perf.record_tasks / perf.trace: the monitor, else null — the one test on the task path.
  PerfMonitor* recorder = nullptr;
  // perf.record_tasks or perf.models (MonitoredExecutor runs the CPU tasks): finish() ends the
  // thread's MonitoredRun (its time, outcome and record) before the task's completion is published.
  bool times_tasks = false;
  // Tasks waiting for room on a memory node (MemoryBusy), and a count of frees per node so a task
  // queued just after a free notices it.
  std::mutex memory_waiters_mutex;
  std::vector<std::vector<TaskRecord*>> memory_waiters{max_memory_nodes};
  std::unique_ptr<std::atomic<std::uint64_t>[]> memory_frees {
    new std::atomic<std::uint64_t>[max_memory_nodes] {}
  };
  std::unique_ptr<PerfMonitor> perf;     // device activity, records, counters (perf/)
  MonitoredExecutor monitored_executor;  // the scheduler's executor while recording
  Scheduler scheduler;
  const std::uint64_t id;
  const pid_t creator_pid = getpid();  // for the message of a forked child that lets it go
  const std::uint64_t creator_fork_generation = fork_generation();
  // forked_child(): this process is a child of the one that made the context (fork()): it has none of
  // its threads, and locks they held stay held, so buffers, groups and pools made from it are left
  // as they are when the child lets them go, like the context itself. One load, no system call:
  // every buffer's end asks.
  bool forked_child() const noexcept { return fork_generation() != creator_fork_generation; }
  std::atomic<std::int64_t> external_references{1};
  std::mutex detached_pools_mutex;
  std::vector<PoolState*> detached_pools;  // each holds an external reference
  bool reference_shards_closed = false;    // guarded by threads_mutex
  // Set once destruction has waited for every task: later submissions are refused, and a task that
  // slipped in meanwhile (another thread's TaskGroup) is cancelled when picked, never run.
  std::atomic<bool> shut_down{false};

  // Thread states, append-only; readers scan [0, thread_count) without the lock.
  // Room for every worker and this many application threads using the context at once (exited
  // threads' states are reused), whatever parallel.thread_pool_size is.
  static constexpr std::size_t max_application_threads = 4096;
  // Slot 0 is no worker's: the application thread that waits takes it, counted among the 4096.
  const std::size_t max_threads = scheduler.slot_count() - 1 + max_application_threads;
  std::mutex threads_mutex;
  std::unordered_map<std::thread::id, ThreadState*> threads_by_id;
  std::vector<std::unique_ptr<ThreadState>> thread_storage;
  std::vector<ThreadState*> released_states;  // of exited threads; room for all of thread_storage
  std::unique_ptr<std::atomic<ThreadState*>[]> thread_list { new std::atomic<ThreadState*>[ max_threads ] };
  std::atomic<std::size_t> thread_count{0};
  // Task pools' gates, counted in the threads' submitted/completed counters (so in_flight() covers
  // them) but not tasks the user submitted: the statistics subtract them.
  std::atomic<std::uint64_t> pool_gates_submitted{0};
  std::atomic<std::uint64_t> pool_gates_completed{0};
  // A pool's gate has registered a write (ever): until then no registration looks for the gates'
  // readers to note (note_gate_reads). Set by the gate with its buffers' trackers locked, and read by
  // a registration with its own locked, so that one seeing the gate in a tracker sees the flag too.
  std::atomic<bool> pool_gate_wrote{false};
  // note_reads_of_gates(): note_gate_reads() for `task`, once any gate wrote (one load for a program
  // without pools). With its accesses' trackers locked, before any of them registers.
  void note_reads_of_gates(TaskRecord* task) noexcept {
    if (pool_gate_wrote.load(std::memory_order_relaxed)) [[unlikely]]
      note_gate_reads(task);
  }
  // Tasks the CPU workers cannot run (a kernel without a CPU body), cancelled before placement: a
  // worker finishes them (place_with_data), which is no CPU run — the CPU's stats leave them out.
  std::atomic<std::uint64_t> cancelled_unplaced{0};

  std::mutex buffers_mutex;
  std::unordered_set<BufferState*> buffers;
  BufferState* last_created = nullptr;  // whose created_next the next buffer sets (buffers_mutex)
  std::atomic<std::uint64_t> buffer_ids{0};

  // Host mappings granted and not unmapped yet, of every thread (few: map() and wait_all() look
  // for waits on the calling thread's own mappings, which would never end).
  std::mutex mappings_mutex;
  std::vector<TaskRecord*> held_mappings;
  // Waits inside tasks parked for want of work (StuckWait, list_stuck_wait()); few, and touched
  // only by waits about to park or just woken.
  std::mutex stuck_waits_mutex;
  std::vector<const StuckWait*> stuck_waits;
  // Maps in progress, each with room reserved in held_mappings: a granted mapping is recorded
  // without allocating (it cannot be given back once granted). Guarded by mappings_mutex.
  std::size_t mapping_rooms_reserved = 0;
  std::atomic<std::size_t> held_mapping_count{0};  // held_mappings.size(), read without the mutex
  // The records first_waiting_for()'s walks have visited: the wait checks must not walk long chains
  // in which they cannot find what they look for (a test counts them).
  std::atomic<std::uint64_t> cycle_walk_visits{0};
  // own_mapping_blocking(): the calling thread's mapping that a task for which `blocked` is true
  // waits for, directly or through other tasks (or that is itself such a task); nullptr if none.
  // `targets_ordered`: targets_may_be_ordered(blocked); when false, only a stuck wait leads there.
  const TaskRecord* own_mapping_blocking(const std::function<bool(const TaskRecord*)>& blocked,
                                         bool targets_ordered = true);
  // A coroutine's co_await between its check for a cycle of awaits and the registration of its
  // continuation (coroutines.cpp): listed under coroutine_awaits_mutex meanwhile, so that two awaits
  // that close one cycle at the same time see each other.
  struct AnnouncedAwait {
    const TaskRecord* root;    // the awaiting coroutine's Task
    const TaskRecord* target;  // the Task it awaits
  };
  std::mutex coroutine_awaits_mutex;
  std::vector<AnnouncedAwait> announced_awaits;
  // Of in_flight(), the records suspended coroutines hold: their Tasks, and the continuations that
  // wait for what they await (coroutines.cpp). task_queue.max_in_flight leaves them out: suspended,
  // a coroutine holds no worker and no thread, and any number may wait (coroutine.hpp) — counted,
  // an application thread launching coroutines that await what it does later blocked for ever.
  std::atomic<std::int64_t> suspended_coroutine_records{0};
  // first_waiting_for(): a task for which `blocked` is true among `unfinished` and the tasks that wait
  // for it, directly or through others; nullptr if none (within a bounded walk). Besides the tasks
  // ordered after a task, a coroutine waits for it: one whose next stretch is ordered after it (its
  // Task cannot end before that stretch starts), one parked on its TaskGroup, and one of `announced`
  // awaiting it; and the tasks and maps on the stack of a `stuck` wait for it (the caller holds
  // stuck_waits_mutex). `*through_coroutine` (if given) tells whether the task found was reached
  // through a coroutine's Task.
  static const TaskRecord* first_waiting_for(const TaskRecord* unfinished,
                                             const std::function<bool(const TaskRecord*)>& blocked,
                                             std::span<const AnnouncedAwait> announced = {},
                                             bool* through_coroutine = nullptr,
                                             std::span<const StuckWait* const> stuck = {});
  // may_be_waited_for(): something other than `task` itself may wait for it (first_waiting_for()
  // would look further): successors, a pool, a coroutine parked on its group or announced on it.
  static bool may_be_waited_for(const TaskRecord& task, std::span<const AnnouncedAwait> announced) noexcept;
  // holds_mapping(): the calling thread holds a mapping of this context (one load while none is held
  // anywhere; else a scan under mappings_mutex, out of line).
  bool holds_mapping() {
    return held_mapping_count.load(std::memory_order_acquire) != 0 && holds_one_of_the_mappings();
  }
  bool holds_one_of_the_mappings();
  // refuse_own_mapping_wait(): Error(buffer_misuse) if a wait for the tasks `blocked` selects would
  // wait for a mapping the calling thread holds. `what` names the wait (and `task`, the task waited
  // for, if any). Nothing is done while no mapping is held anywhere: one atomic load.
  template <class Blocked>
  void refuse_own_mapping_wait(Blocked&& blocked, const char* what, const char* task = nullptr) {
    if (held_mapping_count.load(std::memory_order_acquire) == 0) [[likely]]
      return;
    if (const TaskRecord* mapping = own_mapping_blocking(blocked, targets_may_be_ordered(blocked)))
      throw_waits_for_own_mapping(*mapping, what, task);
  }
  // refuse_endless_wait(): a blocking wait for the tasks `blocked` selects that could never end is
  // an error: the calling thread runs one of them, or one that waits for the running task (its
  // accesses or `after` order it behind it) (Error(invalid_argument)), or holds a mapping one of
  // them waits for (Error(buffer_misuse)). `what` names the wait (and `task`, the task waited for).
  // refuse_deep_nesting(): inside a task, with the stack nearly used up, a blocking wait (which runs
  // other tasks on it) or a submission (which nests the recursion further) is an error. Not for the
  // waits of destructors: those must wait whatever the depth (and the tasks they run fail fast here).
  void refuse_deep_nesting(const ThreadState& thread, const char* what) const {
    if (thread.nesting > 0 && thread.stack.nearly_full(stack_position())) [[unlikely]]
      throw_wait_too_deep(thread, what);
  }
  template <class Blocked>
  void refuse_endless_wait(Blocked&& blocked, const char* what, const char* task = nullptr) {
    refuse_wait_behind_running_task(blocked, what);
    refuse_own_mapping_wait(blocked, what, task);
  }
  // refuse_wait_behind_running_task(): refuse_endless_wait()'s checks for the running task alone (a
  // wait for it, or for a task its accesses or `after` order behind it), which never end while it runs.
  template <class Blocked>
  void refuse_wait_behind_running_task(Blocked&& blocked, const char* what) {
    if (const TaskRecord* running = running_task_record(); running != nullptr) {
      // A body that deferred its completion may wait for its own task: another thread completes it
      // (and may already have, recycling the record).
      if (running_task_unfinished() != nullptr && blocked(running)) [[unlikely]]
        throw_waits_for_itself(*running, what);
      // A coroutine's stretch is a task of its own; what the coroutine is (its Task, its group's
      // member, what is ordered after it) is its launched record's.
      if (running_stretch.step == running && targets_may_be_ordered(blocked)) [[unlikely]]
        refuse_coroutine_endless_wait(*running_stretch.root, blocked, what);
    }
    // Only a running task with successors (or a pool's task: its gate's) can be waited behind
    // (fork-join's have none: one load), and only by tasks ordered behind others.
    if (const TaskRecord* running = running_task_unfinished();
        running != nullptr &&
        ((running->successors.load(std::memory_order_acquire) & ~closed_successors) != 0 ||
         running->pool != nullptr) &&
        targets_may_be_ordered(blocked)) {
      if (const TaskRecord* waited = first_waiting_for(running, blocked)) [[unlikely]]
        throw_waits_for_dependent(*running, *waited, what);
    }
  }
  // suspended_blocker(): among the tasks suspended on the calling thread's stack below its running
  // task (each resumes only after the frames above it return), one for which `blocked` is true, or
  // that such a task waits for (a bounded walk); nullptr if none. A wait by the running task for it
  // never ends. Asked by a wait that found nothing to run (UnlessSuspended), not before every wait: a
  // wait that runs the running task's children on top of it (fork-join) pays nothing.
  // `targets_ordered`: targets_may_be_ordered(blocked); when false, only the tasks themselves count.
  static const TaskRecord* suspended_blocker(const std::function<bool(const TaskRecord*)>& blocked,
                                             bool targets_ordered = true);
  // blocker_among(): among `frames` (outward, deferred ones skipped) and `mappings` (cancelled ones
  // skipped), a task for which `blocked` is true or that such a task waits for (looked for only
  // while `targets_ordered`); nullptr if none.
  static const TaskRecord* blocker_among(const RunningFrame* frames, const WaitedMapping* mappings,
                                         const std::function<bool(const TaskRecord*)>& blocked,
                                         bool targets_ordered = true);
  // Waits inside tasks on different threads may wait for each other: each for work ordered behind a
  // task suspended on the next one's stack. Each parks for good; no stack alone shows it. So a wait
  // about to park lists itself (list_stuck_wait) and looks for a cycle through the waits already
  // listed: it returns what it waits for on another thread's stack, where that thread's wait waits,
  // directly or through others, for something on this thread's stack ("task 'name'" or "the map of
  // ...", described while that stack cannot change; the wait is then no longer listed, unless not
  // `leave_when_found`); empty if none (the wait then stays listed until unlist_stuck_wait()). Every wait of
  // such a cycle is parked and listed, so the last to park finds it, and none of its waits could ever end.
  std::string list_stuck_wait(const StuckWait& wait, bool leave_when_found = true);
  void unlist_stuck_wait(const StuckWait& wait) noexcept;
  void unlist_locked(const StuckWait& wait) noexcept;  // under stuck_waits_mutex
  // throw_waits_behind(): the error of a wait that suspended_blocker() found hopeless.
  [[noreturn]] static void throw_waits_behind(const TaskRecord* suspended, const char* what);
  // throw_waits_across(): the error of a wait that list_stuck_wait() found in a cycle of waits.
  [[noreturn]] static void throw_waits_across(std::string_view elsewhere, const char* what);
  // A blocking map in a cycle of waits gives up its pending mapping (abandon_mapping()): unless it
  // was granted meanwhile (then false), its grant ends it at once (grant_mapping).
  static bool abandon_mapping(TaskRecord* mapping) noexcept;
  // refuse_coroutine_endless_wait(): refuse_endless_wait()'s checks for the launched coroutine `root`
  // whose stretch the calling thread runs (coroutines.cpp).
  static void refuse_coroutine_endless_wait(const TaskRecord& root,
                                            const std::function<bool(const TaskRecord*)>& blocked,
                                            const char* what);
  // wait_rechecking(): scheduler.wait() for `target`, which may gain tasks while it waits (wait_all,
  // a group). The checks before a wait see only the work there then: work submitted meanwhile may
  // come to wait for a mapping this thread holds, and the wait would never end. So a thread holding a
  // mapping waits in slices and calls `recheck` (which throws for such a wait) after each.
  // Returns false when the wait is hopeless (UnlessSuspended), true once `target` is done.
  // Inside a task a slice that finds nothing to run parks listed in stuck_waits as an untimed wait
  // does, so cycles of waits across threads through it are found (Scheduler::run_until, `sliced`);
  // one found ends the wait, not done.
  template <class Target, class Recheck>
  bool wait_rechecking(ThreadState& thread, Target& target, Recheck&& recheck) {
    // No mapping anywhere (the usual case): one load, no call.
    if (!holds_mapping()) [[likely]] {
      return scheduler.wait(thread, target);
    }
    constexpr auto slice = std::chrono::milliseconds(10);
    while (!scheduler.wait(thread, target, Clock::now() + slice, true)) {
      if constexpr (may_be_hopeless<Target>) {
        if (target.found_hopeless()) return false;  // by the slice's parking()
      }
      recheck();
      if constexpr (may_be_hopeless<Target>) {
        if (thread.nesting > 1 && target.hopeless()) return false;
      }
    }
    return true;
  }
  // waits_for_all: the selector of wait_all(), which waits for every task but not for mappings.
  static bool waits_for_all(const TaskRecord* task) noexcept { return task->kind != TaskKind::host_access; }
  [[noreturn]] static void throw_waits_for_own_mapping(const TaskRecord& mapping, std::string_view what,
                                                       const char* task = nullptr);

  // Failures of tasks outside groups and pools that nobody has reported yet (wait_all() rethrows the
  // first), oldest first; at most max_root_errors are kept, later ones counted in root_errors_dropped.
  static constexpr std::size_t max_root_errors = 256;
  static constexpr std::uint32_t kept_root_error = std::uint32_t{1} << 31;  // in TaskRecord::root_error_note
  SpinLock root_error_lock;
  struct RootError {
    std::uint32_t ticket;  // in the root_error_note of the task it came from; 0: none
    std::exception_ptr error;
  };
  std::vector<RootError> root_errors;
  std::uint32_t root_error_tickets = 0;  // the last ticket handed out (below kept_root_error)
  std::uint64_t root_errors_dropped = 0;
  // The generation of wait_all()'s report, counted from 1, below kept_root_error.
  std::uint32_t root_error_report = 1;
  // Which named task recent failures came from, for the messages of the tasks they cancel (whose
  // cause() is the original exception, which does not say): note_failure_origin() when a task fails,
  // failure_origin() when a cancellation is reported. The oldest are forgotten past the bound.
  static constexpr std::size_t max_failure_origins = 64;
  void note_failure_origin(const TaskRecord& failed) noexcept;
  std::string failure_origin(const std::exception_ptr& cause);
  std::mutex failure_origins_mutex;
  std::deque<std::pair<std::exception_ptr, std::string>> failure_origins;
  // Hears of a submitter waiting in throttle_slow() for the tasks in flight (the distributed runtime).
  SubmitterWaits submitter_waits;
  alignas(64) std::atomic<int> root_parked{0};  // threads parked in wait_all()
};

// The exception a cancelled task reports: TaskCancelled carrying the original cause (if any).
std::exception_ptr cancellation_error(const TaskRecord* task);
// ... naming what was cancelled as `subject` (a host mapping names its buffer and range).
std::exception_ptr cancellation_error(const TaskRecord* task, const std::string& subject);

// live(): the context behind a public handle; a moved-from nerve::Context has none, and using one
// is Error(invalid_argument), not a crash.
[[noreturn]] void throw_moved_from_context();
inline ContextImpl& live(ContextImpl* context) {
  if (context == nullptr) [[unlikely]]
    throw_moved_from_context();
  return *context;
}

}  // namespace nerve::detail
