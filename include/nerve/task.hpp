// task.hpp — task handles, options, and how a callable becomes a task.
//
// A task is a callable plus the buffer accesses it declares. Its dependencies are inferred from the
// accesses in submission order (read-after-write, write-after-read, write-after-write; disjoint
// slices never conflict), plus explicit `after` edges. The callable receives one std::span per
// access — std::span<const T> for read(), std::span<T> for write() and read_write() — or nothing if
// it takes no arguments.
//
// write() promises that the task writes every element of its range: the range's contents on entry
// are undefined (a task on a device gets memory nothing was copied into, which may hold another
// buffer's old bytes; on the CPU it happens to see the old data). A task that updates only part of
// a range, or reads before it writes, declares read_write().
//
// Errors: an exception thrown by a task is captured. Tasks that consume a failed task's result — read
// what it wrote (even in part, whatever else they declare), or are declared `after` it — are not
// run: they are cancelled with that cause (recursively). Tasks that only overwrite its data or write
// what it read (write-after-write, write-after-read) still run after it: their data does not come
// from it. wait() on a failed task rethrows its exception;
// on a cancelled task it throws TaskCancelled whose cause() is the original exception, and whose
// message names the task that failed when it had a name ("task 'b' was cancelled because task 'a',
// which it depends on, failed: ...").
// What a task captures is destroyed after it ran (or when it is cancelled) on a noexcept path: a
// destructor that throws ends the program (std::terminate), as it would in a std::thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <exception>
#include <functional>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

#include "nerve/buffer.hpp"
#include "nerve/detail/runtime_api.hpp"
#include "nerve/error.hpp"
#include "nerve/kernel.hpp"

namespace nerve {

enum class TaskStatus {
  pending = 0,  // waiting for predecessors
  ready = 1,    // queued on a device
  running = 2,
  succeeded = 3,
  failed = 4,     // threw; error() holds the exception
  cancelled = 5,  // a predecessor failed or was cancelled, or cancellation was requested
};

// A reference-counted handle to a submitted task. Handles never keep a task from running; dropping
// the last handle of a running task is fine.
class Task {
 public:
  Task() noexcept = default;
  Task(const Task& other) noexcept : record_(other.record_) {
    if (record_ != nullptr) detail::retain_handle(record_);
  }
  Task(Task&& other) noexcept : record_(std::exchange(other.record_, nullptr)) {}
  Task& operator=(Task other) noexcept {
    std::swap(record_, other.record_);
    return *this;
  }
  ~Task() {
    if (record_ != nullptr) detail::release_handle(record_);
  }

  explicit operator bool() const noexcept { return record_ != nullptr; }

  // status(), done(), wait() and error() on an empty handle throw Error(invalid_argument).
  TaskStatus status() const { return static_cast<TaskStatus>(detail::task_status(checked())); }
  // done() is true once the task succeeded, failed or was cancelled.
  bool done() const { return status() >= TaskStatus::succeeded; }

  // wait() blocks until the task is done, then rethrows its failure (which Context::wait_all() then
  // does not report again), or throws TaskCancelled. Meanwhile the calling thread runs other ready
  // tasks (in slot 0, or its own worker slot: context.hpp), so it returns once the task is done and
  // the task it is running then has ended — a long unrelated task picked up while waiting delays the
  // return by its length (wait_for() runs none, except with a single slot). Waiting while this thread
  // holds a mapping that the task waits for (directly or through others) is Error(buffer_misuse).
  // Called by the task's own body, or inside a task that the waited-for task is ordered after (its
  // accesses or `after` make it wait for the running task, directly or through others), it would
  // never return: Error(invalid_argument) naming both. So is a cycle of waits (task A's body waits
  // for B while B's body waits for A, or for work ordered after it): once both have nothing left to
  // run, one of the waits throws it (see Context: waits on several threads). The same holds when the
  // task comes to wait for the running one only after the wait began (a coroutine it launched that
  // then awaits work ordered after the running task): the wait looks again whenever it has nothing
  // left to run, and throws then. A coroutine's stretch counts as its coroutine's Task here.
  void wait() const { detail::task_wait(checked(), -1); }
  // wait_for() returns false if the task is not done within `timeout`; once it is done, it returns
  // true or, like wait(), rethrows its failure (which then counts as reported). It runs no other task
  // meanwhile (one could outlast the timeout) — except in a context with a single worker slot,
  // where nobody else would run them: there it helps, and may return late by the task it ran.
  // A zero or negative timeout only polls (with a single slot: after running one task at most, so
  // that a polling loop still gets the work done); one longer than int64 nanoseconds (or past the
  // clock's range) is no limit: that wait_for() is wait(), which it refuses too. Where wait() would
  // be refused (its own task, or one ordered after the running task) a finite wait_for() is not: it
  // cannot deadlock, and returns false at the timeout.
  template <class Rep, class Period>
  bool wait_for(std::chrono::duration<Rep, Period> timeout) const {
    return detail::task_wait(checked(), detail::timeout_ns(timeout));
  }
  std::exception_ptr error() const { return detail::task_error(checked()); }

  detail::TaskRecord* record() const noexcept { return record_; }
  // adopt() wraps a record whose reference the caller transfers to the handle.
  static Task adopt(detail::TaskRecord* record) noexcept {
    Task task;
    task.record_ = record;
    return task;
  }

 private:
  detail::TaskRecord* checked() const {
    if (record_ == nullptr) throw Error(ErrorCode::invalid_argument, "use of an empty nerve::Task handle");
    return record_;
  }
  detail::TaskRecord* record_ = nullptr;
};

// Task priorities (TaskOptions::priority): the order in which ready tasks that wait at the same time
// are started. Any integer works — higher first; the model-based policies use the integer — and
// these are the usual levels.
struct Priority {
  static constexpr int low = -100;
  static constexpr int normal = 0;
  static constexpr int high = 100;
};

struct TaskOptions {
  // A name for error messages, traces and statistics; must outlive the task (a string literal).
  const char* name = nullptr;
  // Tasks that must finish before this one starts, in addition to the inferred dependencies. A task
  // that failed or was cancelled cancels this one (with its cause); one that already finished well is
  // no constraint. Each must be a task of the same Context, and tasks added to a TaskPool cannot have
  // any: both are Error(invalid_argument) at submit.
  std::vector<Task> after{};  // `{}`: designated initializers may leave it out (g++ -Wextra)
  // A hint that the task runs long: it is handed to the next worker round-robin (a per-device
  // queue) instead of the submitting worker's own deque, so a burst of such tasks starts on every
  // worker at once instead of waiting to be stolen one by one.
  bool compute_intensive = false;
  // Run on this device (Context::devices(): 0 = the CPU workers); -1 lets nerve choose, data
  // locality first, among the devices whose memory could hold the whole buffers the task touches (a
  // device replica is the whole buffer, even for a slice). Its data is moved there before it starts;
  // sent to a device too small for it, it fails with out_of_memory.
  int device = -1;
  // The order in which CPU workers start ready tasks (every scheduler.policy):
  // - A non-zero priority puts the task in one shared priority queue: higher first, and among equal
  //   priorities the one that became ready first (FIFO). A worker takes positive priorities before
  //   any normal task it would take from a queue (so does a submitter that back-pressure makes run
  //   tasks: task_queue.per_device_queue_depth), negative ones only when it found no normal task in its own
  //   queues, the shared queue (eager) or, by stealing, other workers' (with
  //   scheduler.work_stealing_threshold, also while it has not yet waited long enough to steal).
  // - Normal (0) tasks keep the lock-free path, and are NOT globally first come first served:
  //   - locality_aware_stealing and heft: a task submitted or released on a worker (an application
  //     thread's submissions: slot 0's) goes to that worker's deque, whose owner runs the newest
  //     first while thieves take the oldest; a successor released by a finishing task may run next
  //     on that thread, ahead of everything queued. The others (compute_intensive submissions,
  //     NUMA-placed tasks, submissions while slot 0 is taken, releases off the workers) go
  //     round-robin to per-worker inboxes, each FIFO.
  //   - eager: tasks submitted from outside a task and tasks released by dependencies wait in one
  //     shared FIFO queue (first come first served); tasks submitted inside a task go to that
  //     worker's deque (newest first for it, oldest first for thieves). Data location places
  //     nothing (scheduler.numa_affinity does not apply).
  int priority = Priority::normal;
};

namespace detail {

// The type-erased closure stored in a task record: the user's callable and how to call it with
// the views of its accesses.
template <class F, class... A>
struct Closure {
  F fn;

  static void invoke(void* self, const AccessView* views) {
    call(self, views, std::index_sequence_for<A...>{});
  }
  static void destroy(void* self) noexcept { static_cast<Closure*>(self)->~Closure(); }
  static constexpr ClosureOps ops{&invoke, &destroy};

  template <std::size_t... I>
  static void call(void* self, [[maybe_unused]] const AccessView* views, std::index_sequence<I...>) {
    F& fn = static_cast<Closure*>(self)->fn;
    if constexpr (std::is_invocable_v<F&, typename is_buffer_access<A>::view...>) {
      std::invoke(fn, is_buffer_access<A>::make(views[I])...);
    } else {
      static_assert(std::is_invocable_v<F&>,
                    "a task body takes one std::span per access (std::span<const T> for read(), "
                    "std::span<T> for write()/read_write()) or no arguments");
      std::invoke(fn);
    }
  }
};

// AfterRecords::apply() copies a task's options into `info`; the `after` records it points at live
// here (inline up to 8) until commit_task() has read them.
class AfterRecords {
 public:
  void apply(const TaskOptions* options, SubmitInfo& info) {
    if (options == nullptr) return;
    info.name = options->name;
    info.compute_intensive = options->compute_intensive;
    info.device = options->device;
    info.priority = options->priority;
    const std::size_t count = options->after.size();
    TaskRecord** after = small_;
    if (count > std::size(small_)) {
      large_.resize(count);
      after = large_.data();
    }
    for (std::size_t i = 0; i < count; ++i) after[i] = options->after[i].record();
    info.after = after;
    info.after_count = count;
  }

 private:
  TaskRecord* small_[8];
  std::vector<TaskRecord*> large_;
};

// run_and_destroy() is the body run_spawn_inline() calls: the closure made on the spawner's stack.
template <class D>
void run_and_destroy(void* storage) {
  D& fn = *static_cast<D*>(storage);
  struct Destroy {
    D& fn;
    ~Destroy() { fn.~D(); }
  } destroy{fn};
  std::invoke(fn);
}

// spawn_inline() runs a spawn at once (begin_spawn() said so): its own copy of the closure, as a
// queued task would run.
template <class D, class F>
void spawn_inline(ContextImpl* context, F&& fn) {
  alignas(D) unsigned char storage[sizeof(D)];
  try {
    ::new (static_cast<void*>(storage)) D(std::forward<F>(fn));
  } catch (...) {
    abandon_spawn(context);
    throw;
  }
  run_spawn_inline(context, &run_and_destroy<D>, storage);
}

// A closure up to this size may run on the spawner's stack (spawn_inline); a larger one is always queued.
inline constexpr std::size_t max_inline_spawn_bytes = 256;

// submit() is the common path of Context::submit/spawn, TaskGroup::submit/spawn.
template <class F, class... A>
TaskRecord* submit(ContextImpl* context, const TaskOptions* options, GroupState* group, PoolState* pool,
                   bool keep_handle, F&& fn, const A&... accesses) {
  using C = Closure<std::decay_t<F>, std::remove_cvref_t<A>...>;
  TaskDraft draft;
  if constexpr (sizeof...(A) == 0 && sizeof(C) <= max_inline_spawn_bytes) {
    if (!keep_handle && options == nullptr && group == nullptr && pool == nullptr) {
      draft = begin_spawn(context, sizeof(C), alignof(C));
      if (draft.record == nullptr) [[unlikely]] {
        spawn_inline<std::decay_t<F>>(context, std::forward<F>(fn));
        return nullptr;
      }
    } else {
      draft = begin_task(context, sizeof(C), alignof(C));
    }
  } else {
    draft = begin_task(context, sizeof(C), alignof(C));
  }
  try {
    ::new (draft.closure) C{std::forward<F>(fn)};
  } catch (...) {
    abandon_task(context, draft);
    throw;
  }
  const AccessSpec specs[sizeof...(A) + 1] = {accesses.spec()..., AccessSpec{}};
  SubmitInfo info{};
  info.ops = &C::ops;
  info.accesses = specs;
  info.access_count = sizeof...(A);
  info.group = group;
  info.keep_handle = keep_handle;
  info.pool = pool;
  AfterRecords after;
  after.apply(options, info);
  return commit_task(context, draft, info);
}

template <class A>
struct is_kernel_value : std::false_type {};
template <class T>
struct is_kernel_value<KernelValueArg<T>> : std::true_type {};

// submit_kernel_call() is the common path of every submit/spawn/add of a Kernel: accesses and values
// in the order given.
template <class... A>
TaskRecord* submit_kernel_call(ContextImpl* context, const TaskOptions* options, GroupState* group,
                               PoolState* pool, bool keep_handle, const Kernel& kernel, const A&... args) {
  constexpr std::size_t access_count =
      (std::size_t{is_buffer_access<std::remove_cvref_t<A>>::value} + ... + 0);
  constexpr std::size_t value_count = sizeof...(A) - access_count;
  AccessSpec specs[access_count + 1] = {};
  KernelValue values[value_count + 1] = {};
  std::size_t next_access = 0;
  std::size_t next_value = 0;
  [[maybe_unused]] auto add = [&](const auto& arg) {  // unused by a kernel without arguments
    if constexpr (is_buffer_access<std::remove_cvref_t<decltype(arg)>>::value) {
      specs[next_access++] = arg.spec();
    } else {
      values[next_value++] = KernelValue{&arg.value, sizeof(arg.value)};
    }
  };
  (add(args), ...);
  return submit_kernel(context, options, group, pool, keep_handle,
                       KernelSubmission{&kernel, specs, access_count, values, value_count});
}

}  // namespace detail

// KernelArgument: what a Kernel call takes — buffer accesses and nerve::value(x).
template <class A>
concept KernelArgument = BufferAccessor<A> || detail::is_kernel_value<std::remove_cvref_t<A>>::value;

// NotKernel: a task body that is a plain callable rather than a Kernel.
template <class F>
concept NotKernel = !std::is_same_v<std::remove_cvref_t<F>, Kernel>;

}  // namespace nerve
