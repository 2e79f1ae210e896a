// context.hpp — the runtime instance: workers, configuration, topology, and task submission.
//
// A Context owns `worker_count()` CPU worker slots. Slots 1.. have dedicated threads bound per
// parallel.thread_affinity. Slot 0 (the "master", as in OpenMP and oneTBB) has no thread of its own
// and belongs to no application thread: any application thread borrows it, if no other thread holds
// it at that moment, while it waits inside nerve (Task::wait, TaskGroup::wait, wait_all, ...) or is
// back-pressured by submit() (task_queue.max_in_flight, full queues), and runs ready tasks there
// (current_worker() returns 0 inside them); it gives slot 0 back when the wait ends (a
// back-pressured submitter: after each task it ran; past task_queue.per_device_queue_depth its next
// spawns of plain closures run at once there, inside spawn(), see CONFIG.md). Under locality_aware_stealing
// and heft a submission also takes it for an instant, to push the task into slot 0's deque. An application
// thread that waits while another holds slot 0 blocks instead of running tasks, retrying slot 0
// about every millisecond, so it takes over once the holder leaves; a back-pressured one sleeps
// briefly and retries. A timed wait (wait_for) takes slot 0 only in a context with a single slot.
// Outside such a wait, current_worker() is -1 on an application thread.
//
// Thread safety: every member may be called from any thread, including from inside tasks (nested
// submission is how fork-join works). Waiting inside a task runs other ready tasks until the target
// is done, so the pool never deadlocks on its own waits. The tasks such a wait runs sit on top of the
// waiting task, on its thread's stack: one of them that in turn waits (Task::wait(), TaskGroup::wait(),
// TaskPool::wait_all()) for the task below it, for its group or pool, or for work ordered after it,
// could never return, as the task below resumes only after it does. That wait throws
// Error(invalid_argument) naming both tasks once it has nothing left to run, rather than hang (a
// ~TaskGroup that would wait so is a reported fatal error; a ~TaskPool detaches the pool); so does,
// at once, a buffer map (or try_map) of data the task below or work ordered after it writes. A
// pool's task counts as its pool: work ordered after the pool is ordered after it. Whether it
// happens depends on which thread took the task: to wait inside a task for work that is not its own,
// order the task after that work (TaskOptions::after, or its accesses) instead. Waits on several
// threads may so wait for each other — each for work behind a task on the next one's stack (its
// waiting task, or one suspended below it): once each has nothing left to run, one of them throws
// the same error, naming the task on the other thread, and the others go on (a cycle closed by a
// later submission is found within about 50 ms); a ~TaskGroup's wait leaves that to another wait of
// the cycle, and is the fatal error above only if none does within about a second. A blocking map
// counts as suspended below the tasks it runs while it waits, and its wait may be one of such a
// cycle: if it is the one that throws, the mapping it asked for ends by itself once granted. Such
// cycles are found among the tasks and waits of one context: one through tasks of two contexts
// (each waiting for the other's work) is not, and hangs. Nor can nerve run anything while every slot
// runs a body blocked outside nerve (on a future, a barrier, a lock: an OpenMP team's barrier whose
// other threads wait on nerve): the pool is fixed, as OpenMP's team and oneTBB's arena are, so if
// those bodies wait for a thread without a slot that waits on nerve, or for the tasks it waits for,
// nothing ends. Such a thread, parked 5 s while every slot's thread was blocked and none began a
// task (slots that compute are not stalled), logs one warning saying so.
// Destroying the context waits for every submitted task, then frees buffers still alive (reporting
// them as a warning). The destructor, as for any C++ object, must not overlap a call of a member of the same
// Context on another thread (wait_all(), submit(), stats(), ...): end those calls first (the C API's
// rule for nerve_shutdown()).
// Threads blocked in a wait on a handle — Task::wait(), TaskGroup::wait(), TaskPool::wait_all() — may
// stay there: the destruction finishes their tasks and they return. Buffers are not members: other
// threads may drop their handles meanwhile (each buffer is freed once, by whichever comes last), and
// a map of one made meanwhile either maps its data, which then stays until the unmap (which reports
// buffer_misuse), or throws buffer_misuse, once the context has freed that buffer. Destroying it inside
// one of its own tasks would wait for that task: a reported fatal error. Those waits run tasks on
// the waiting thread's stack, so blocking waits nested inside tasks thousands deep could overflow
// it: with under 256 KiB of the thread's stack left (a quarter of a smaller stack), a wait inside a
// task (Task::wait(), TaskGroup::wait() and wait_for(), TaskPool::wait_all()) or a submission there
// throws Error(out_of_memory) naming the depth instead (a sequential cutoff avoids it; coroutines'
// co_await holds no stack). A main thread without a stack size limit (ulimit -s unlimited) is not
// checked.
//
// fork(): the child of a process with a live context has none of its worker threads, and locks they
// held stay held, so the child must not use that context or anything made from it (as with oneTBB
// and OpenMP): exec, or make a context of its own. Destroying the parent's context in the child (a
// return from main) only logs a warning and leaves it as it is; nerve objects made in the child work,
// in a task body that forked too. Such a child must exec or _exit before the body returns: when it
// would wait in the parent's runtime (the body returned, or used the parent's context), where no
// thread of the parent runs, it says so and exits with status 1 instead of waiting for ever.
#pragma once

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <memory>

#include "nerve/buffer.hpp"
#include "nerve/config.hpp"
#include "nerve/device.hpp"
#include "nerve/export.hpp"
#include "nerve/stats.hpp"
#include "nerve/task.hpp"
#include "nerve/topology.hpp"

namespace nerve {

class NERVE_API Context {
 public:
  // Configuration from defaults, NERVE_CONFIG and the NERVE_* environment.
  Context();
  // ... plus API settings, which take precedence. Throws ConfigError for an invalid configuration.
  explicit Context(const Settings& settings);
  ~Context();
  Context(Context&& other) noexcept;
  Context& operator=(Context&& other) noexcept;
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // submit() schedules `fn` with the given accesses and returns a handle to it. An access to a
  // buffer of another context, or to a freed one, is Error(buffer_misuse). A task has at most 65535
  // accesses (NERVE_TASK_MAX_ACCESSES in the C API); more is Error(invalid_argument).
  template <NotKernel F, class... A>
  requires(BufferAccessor<A>&&...) Task submit(F&& fn, const A&... accesses) {
    return Task::adopt(
        detail::submit(impl_, nullptr, nullptr, nullptr, true, std::forward<F>(fn), accesses...));
  }
  template <NotKernel F, class... A>
  requires(BufferAccessor<A>&&...) Task submit(const TaskOptions& options, F&& fn, const A&... accesses) {
    return Task::adopt(
        detail::submit(impl_, &options, nullptr, nullptr, true, std::forward<F>(fn), accesses...));
  }
  // spawn() is submit() without a handle: the cheapest way to launch work (wait with wait_all()).
  // Under back-pressure (the queue the calling application thread submits to past
  // task_queue.per_device_queue_depth; application threads other than the first share one: see
  // CONFIG.md) a plain closure without accesses or options may run at once, inside spawn(), as a task
  // of slot 0: a task must not wait for what its submitter does only after spawn() returns.
  template <NotKernel F, class... A>
  requires(BufferAccessor<A>&&...) void spawn(F&& fn, const A&... accesses) {
    detail::submit(impl_, nullptr, nullptr, nullptr, false, std::forward<F>(fn), accesses...);
  }
  template <NotKernel F, class... A>
  requires(BufferAccessor<A>&&...) void spawn(const TaskOptions& options, F&& fn, const A&... accesses) {
    detail::submit(impl_, &options, nullptr, nullptr, false, std::forward<F>(fn), accesses...);
  }

  // Kernel calls: submit(kernel, accesses and nerve::value(x)...). Throws Error(invalid_argument)
  // if no enabled device (or not the one TaskOptions::device names) implements the kernel.
  template <KernelArgument... A>
  Task submit(const Kernel& kernel, const A&... args) {
    return Task::adopt(detail::submit_kernel_call(impl_, nullptr, nullptr, nullptr, true, kernel, args...));
  }
  template <KernelArgument... A>
  Task submit(const TaskOptions& options, const Kernel& kernel, const A&... args) {
    return Task::adopt(detail::submit_kernel_call(impl_, &options, nullptr, nullptr, true, kernel, args...));
  }
  template <KernelArgument... A>
  void spawn(const Kernel& kernel, const A&... args) {
    detail::submit_kernel_call(impl_, nullptr, nullptr, nullptr, false, kernel, args...);
  }
  template <KernelArgument... A>
  void spawn(const TaskOptions& options, const Kernel& kernel, const A&... args) {
    detail::submit_kernel_call(impl_, &options, nullptr, nullptr, false, kernel, args...);
  }

  // wait_all() waits until no task is in flight — every task submitted so far, and those that other
  // threads submit meanwhile (a thread that never stops submitting keeps it waiting: wait for a Task
  // or a TaskGroup to wait for a fixed set) — then rethrows the first failure among tasks
  // submitted outside groups and pools since the last wait_all() that Task::wait() has not already
  // rethrown (each failure is reported once: the others of the same wait are logged on stderr, not
  // rethrown later). A task cancelled because a predecessor failed is not a failure of its own: once
  // that cause was reported (by Task::wait() or an earlier wait_all()), wait_all() is quiet about
  // the tasks it cancelled. Inside a task it throws
  // Error(invalid_argument): it would wait for that very task (use a TaskGroup there); inside a task
  // of another context too, as this context's work may wait for that task (a map of a buffer it
  // writes), a cycle across two contexts that no wait could find. While this
  // thread holds a mapping that a pending task waits for, it throws Error(buffer_misuse) (the wait
  // would never end; unmap first).
  void wait_all();

  unsigned worker_count() const noexcept;
  // devices() lists where tasks can run: [0] is the CPU workers, then accelerators.
  std::vector<DeviceInfo> devices() const;
  // current_worker() is the calling thread's worker slot in this context, or -1.
  int current_worker() const noexcept;
  // A moved-from Context has no runtime: every member then throws Error(invalid_argument), except
  // worker_count() (0) and current_worker() (-1), which cannot throw.
  const Config& config() const;
  const Topology& topology() const;

  // stats() is a snapshot of the runtime's counters; dump_perf_stats() writes it as JSON
  // (docs/PERF_STATS.md). Throws Error(invalid_argument) if the file cannot be written.
  ContextStats stats() const;
  void dump_perf_stats(const std::filesystem::path& path) const;

  // memory_compact() gives free pool memory back to the system: empty slabs and cached blocks of
  // every host pool, free pinned staging buffers, the calling thread's cached chunks (other threads
  // hand theirs back at their next refill), and every device's wholly free memory blocks. Returns the
  // bytes given back. Safe while tasks run. Task records are not pool memory: they come in slabs of
  // 512 records of 448 bytes, kept for reuse until the context goes, as many as the most records
  // ever alive at once needed (plus fewer than 128 free ones cached by each thread). A task's record is
  // alive while the task is in flight, while a Task handle names it (a TaskPool keeps one of its own),
  // and after it finished for as long as a live buffer's dependency tracker names it: as the last
  // writer of some byte range of the buffer, or as a reader of it since that write — until a later
  // access replaces it there or the buffer is destroyed (a mapping's record goes at unmap). So 250,000
  // live buffers written once each keep 250,000 records (~110 MB), however few tasks were ever in
  // flight at once; that memory is reused by later tasks, not leaked.
  std::size_t memory_compact();

  detail::ContextImpl* impl() const noexcept { return impl_; }

 private:
  detail::ContextImpl* impl_;
};

// TaskGroup: fork-join over a set of tasks. wait() waits for exactly the group's tasks — though, as
// every wait, it runs other ready tasks on the calling thread meanwhile, and returns once the one it
// is running has ended (Task::wait()).
class TaskGroup {
 public:
  // A group may outlive its Context object (it keeps the runtime's memory alive); submitting to it
  // then throws Error(invalid_argument), as it does for a moved-from Context.
  explicit TaskGroup(Context& context) noexcept
      : context_(context.impl()), reference_(detail::context_retain(context_)) {}
  TaskGroup(const TaskGroup&) = delete;
  TaskGroup& operator=(const TaskGroup&) = delete;
  // The destructor waits for unfinished tasks; a failure no wait() rethrew is logged on stderr, not
  // thrown (call wait() to see it). Where that wait could never end (the cases wait() refuses), it
  // cannot return either: the group lives in the caller's frame and its tasks will use it. That is
  // a fatal error, reported.
  ~TaskGroup() {
    if ((state_.pending.load(std::memory_order_acquire) & detail::GroupState::count_mask) != 0 ||
        state_.first_error.present())
      detail::group_destroy(context_, &state_);
    detail::context_release(context_, reference_);
  }

  // The same overloads as Context's: plain callables and Kernel calls, with or without TaskOptions.
  template <NotKernel F, class... A>
  requires(BufferAccessor<A>&&...) void spawn(F&& fn, const A&... accesses) {
    detail::submit(context_, nullptr, &state_, nullptr, false, std::forward<F>(fn), accesses...);
  }
  template <NotKernel F, class... A>
  requires(BufferAccessor<A>&&...) void spawn(const TaskOptions& options, F&& fn, const A&... accesses) {
    detail::submit(context_, &options, &state_, nullptr, false, std::forward<F>(fn), accesses...);
  }
  template <NotKernel F, class... A>
  requires(BufferAccessor<A>&&...) Task submit(F&& fn, const A&... accesses) {
    return Task::adopt(
        detail::submit(context_, nullptr, &state_, nullptr, true, std::forward<F>(fn), accesses...));
  }
  template <NotKernel F, class... A>
  requires(BufferAccessor<A>&&...) Task submit(const TaskOptions& options, F&& fn, const A&... accesses) {
    return Task::adopt(
        detail::submit(context_, &options, &state_, nullptr, true, std::forward<F>(fn), accesses...));
  }

  template <KernelArgument... A>
  void spawn(const Kernel& kernel, const A&... args) {
    detail::submit_kernel_call(context_, nullptr, &state_, nullptr, false, kernel, args...);
  }
  template <KernelArgument... A>
  void spawn(const TaskOptions& options, const Kernel& kernel, const A&... args) {
    detail::submit_kernel_call(context_, &options, &state_, nullptr, false, kernel, args...);
  }
  template <KernelArgument... A>
  Task submit(const Kernel& kernel, const A&... args) {
    return Task::adopt(
        detail::submit_kernel_call(context_, nullptr, &state_, nullptr, true, kernel, args...));
  }
  template <KernelArgument... A>
  Task submit(const TaskOptions& options, const Kernel& kernel, const A&... args) {
    return Task::adopt(
        detail::submit_kernel_call(context_, &options, &state_, nullptr, true, kernel, args...));
  }

  // wait() waits for the group's tasks; rethrows the first failure (once: of several threads waiting at once,
  // one). The group's other failures are logged on stderr as they happen (16, then a count at the wait).
  // Waiting while this thread holds a mapping that one of them waits for is Error(buffer_misuse), and waiting
  // from inside one of the group's own tasks, or inside a task one of them is ordered after (by its accesses
  // or `after`), is Error(invalid_argument) (either would never end; wait for a nested group of independent
  // work instead). That error cannot be recovered from while the group still has such tasks: its
  // destructor cannot wait for them either, and aborts (see above). Where the ordering is wanted, use
  // a TaskPool, whose state outlives the object (~TaskPool detaches a pool it cannot wait for).
  // Tasks the group cancelled (cancel()) are not failures: wait() returns quietly for them, and
  // their handles' wait() throws TaskCancelled without a cause.
  void wait() { detail::group_wait(context_, &state_); }
  // wait_for(): false if the group is not done within `timeout`; when it is, it rethrows the first
  // failure as wait() does, else returns true (the failure is thrown once: a later wait() returns
  // quietly, and a later wait_for() true). Like
  // Task::wait_for(), it runs no other task meanwhile unless the context has a single worker slot,
  // and a timeout longer than int64 nanoseconds is no limit: that wait_for() is wait(), refusals
  // included.
  template <class Rep, class Period>
  bool wait_for(std::chrono::duration<Rep, Period> timeout) {
    return detail::group_wait_for(context_, &state_, detail::timeout_ns(timeout));
  }
  // cancel() cancels the group's tasks that have not started yet (TaskCancelled without a cause),
  // and those submitted before the next wait() returns (or wait_for() returns true: the group is
  // done then too); after that the group runs tasks again. A
  // task still waiting for predecessors is cancelled when they end (it keeps its place in the graph,
  // so what is ordered after it still waits for them): wait() waits for those predecessors too.
  // A cancelled task's writes count as lost, though it never ran (task.hpp): later work that reads
  // what it was to write — in the group or not, a map_read() included — is cancelled (TaskCancelled
  // without a cause) until a write replaces that data.
  void cancel() noexcept { state_.cancel_requested.store(true, std::memory_order_release); }

  detail::ContextImpl* impl() const noexcept { return context_; }
  detail::GroupState* state() noexcept { return &state_; }

 private:
  detail::ContextImpl* context_;
  detail::ThreadState* reference_;  // the shard its reference to the runtime is counted in
  detail::GroupState state_;
};

// TaskPool: a bulk launch of mutually independent tasks (the seed's nerve_task_pool_*). Tasks added
// to a pool never depend on each other, whatever their accesses (so TaskOptions::after is refused
// there: Error(invalid_argument)); the pool as a whole is ordered against everything outside it by
// the union of its tasks' accesses (the ranges they touch, not the span between them: work on a gap
// neither waits for the pool nor is cancelled by it; past 1024 separate ranges in one buffer, or
// 65535 in all, neighbouring ranges are joined across their smallest gaps until the count fits, and
// a pool over more than 65535 buffers is refused at launch with Error(invalid_argument)), at its
// place in the submission order when it is launched (work submitted before launch() does not wait
// for it). Tasks start at launch(). The
// pool fails as a whole: after one of its tasks failed, later work that reads any range the pool's
// tasks wrote — the succeeded tasks' ranges included — is cancelled with that cause until a write
// replaces the data. A cancellation does not: it is per task, as for tasks outside a pool. A task of
// the pool that reads data a failed (or cancelled) task wrote is cancelled with that task's cause
// (TaskCancelled::cause(): the original exception, null when the cancellation was requested), and
// the pool's other tasks still run; in a pool none of whose tasks failed, later work that reads a
// range a cancelled task of the pool was to write (and no later task has written since) is
// cancelled with the same cause, while work reading what the others wrote runs. The expected
// task count is a hint. Destroying a pool that was never launched discards its tasks without running
// them; destroying a launched one waits for its tasks, unless that wait could never end (this thread
// holds a mapping they wait for, or runs one of them): then the error is logged and the pool is
// detached — its tasks run when they can, and the context frees it after them (at the next
// wait_all() or pool). A pool may outlive its Context object; launching it then throws
// Error(invalid_argument).
class TaskPool {
 public:
  explicit TaskPool(Context& context, std::size_t expected_tasks = 0)
      : context_(context.impl()), pool_(detail::pool_create(context_, expected_tasks)) {}
  TaskPool(const TaskPool&) = delete;
  TaskPool& operator=(const TaskPool&) = delete;
  ~TaskPool() { detail::pool_destroy(pool_); }

  // add() adds a task; throws Error(invalid_argument) after launch(). One thread at a time fills a
  // pool: add() calls on several threads, or an add() on one thread while another launches the
  // pool (launch(), wait_all()), must be ordered by the program (a mutex, a join), as for a
  // std::vector's push_back.
  template <NotKernel F, class... A>
  requires(BufferAccessor<A>&&...) void add(F&& fn, const A&... accesses) {
    detail::submit(context_, nullptr, nullptr, pool_, false, std::forward<F>(fn), accesses...);
  }
  template <NotKernel F, class... A>
  requires(BufferAccessor<A>&&...) void add(const TaskOptions& options, F&& fn, const A&... accesses) {
    detail::submit(context_, &options, nullptr, pool_, false, std::forward<F>(fn), accesses...);
  }

  template <KernelArgument... A>
  void add(const Kernel& kernel, const A&... args) {
    detail::submit_kernel_call(context_, nullptr, nullptr, pool_, false, kernel, args...);
  }
  template <KernelArgument... A>
  void add(const TaskOptions& options, const Kernel& kernel, const A&... args) {
    detail::submit_kernel_call(context_, &options, nullptr, pool_, false, kernel, args...);
  }

  void launch() { detail::pool_launch(pool_); }
  // wait_all() launches if needed, waits for every task of the pool and rethrows the first failure
  // (once: a later wait_all() returns quietly): the exception of the first task that failed, or, when
  // none failed, the first cancelled task's TaskCancelled (whose cause() is the original exception,
  // or null); other failures are logged on stderr as they happen (16, then a count at the wait).
  // Several threads may call it at once: the pool is launched once, and one of them rethrows the
  // failure. From inside one of the pool's own tasks, or inside a task the pool is ordered after, it
  // is Error(invalid_argument): it would never return; so is, with Error(buffer_misuse), a wait
  // while this thread holds a mapping one of the pool's tasks waits for.
  void wait_all() { detail::pool_wait(pool_); }
  std::size_t size() const noexcept { return detail::pool_size(pool_); }
  bool launched() const noexcept { return detail::pool_launched(pool_); }

 private:
  detail::ContextImpl* context_;
  detail::PoolState* pool_;
};

}  // namespace nerve
