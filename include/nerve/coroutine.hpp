// coroutine.hpp — C++20 coroutines as nerve tasks.
//
//   nerve::CoTask<> stream(nerve::Context& ctx, nerve::Buffer<float>& data, std::size_t chunk) {
//     for (std::size_t at = 0; at < data.size(); at += chunk) {
//       auto part = data.slice(at, std::min(chunk, data.size() - at));
//       co_await ctx.submit(scale, nerve::read_write(part));  // suspends: no worker is held
//       co_await ctx.submit(sum, nerve::read(part), nerve::read_write(total));
//     }
//   }
//   nerve::Task task = nerve::launch(ctx, stream(ctx, data, 1 << 20));
//   task.wait();  // or ctx.wait_all(), or co_await task from another coroutine
//
// A launched coroutine runs as tasks on the workers: from its start to its first suspension is one
// task, and each resumption is another, scheduled like any task when what it awaits is done. While
// suspended it holds no worker and no thread, so any number of coroutines may wait at once (a
// suspended coroutine does not count against task_queue.max_in_flight). Its
// Task (from launch()) finishes when the coroutine returns, or fails with the exception that
// escaped it — exactly as a task body that throws: Task::wait() rethrows it, and wait_all() reports
// it when nobody else did. Its status() is TaskStatus::running from launch() until then, suspended
// or not: a coroutine is under way from its launch, never `pending` or `ready`.
//
// What a coroutine can co_await:
//   Task             resumes once the task has finished, whatever its outcome; then rethrows its
//                    failure (or TaskCancelled). A task's data is valid where it ran when it has
//                    finished, so awaiting a task placed on a device awaits that device's data and
//                    transfers; awaiting a read-only task on a device brings data there (prefetch).
//   TaskGroup&       resumes once every task of the group has finished; rethrows the first failure
//                    (as TaskGroup::wait()). One coroutine at a time may await a given group.
//   CoTask<T>        runs the child coroutine at once on the same thread and gives its co_return
//                    value (or rethrows what escaped it); the child's own suspensions suspend both.
//
// Cancellation: a coroutine launched into a TaskGroup is one of its tasks; if the group is cancelled
// (TaskGroup::cancel()) before the coroutine's first stretch starts, the coroutine is destroyed unrun
// and its Task finishes cancelled. A coroutine that has started runs on; it sees the cancellation
// as TaskCancelled from what it awaits, if that was cancelled.
//
// Errors: launch() or co_await of an empty CoTask (moved from, launched, or already awaited: a
// CoTask runs once) throws Error(invalid_argument); so does co_await, inside a launched coroutine
// (or a child it awaits), of its own Task, of the TaskGroup it was launched into, or of work ordered
// after its Task (by accesses or `after`) — none could finish while it waits. The blocking waits
// (Task::wait(), TaskGroup::wait(), ...) refuse the same inside a coroutine, as inside a task.
// So does a co_await that closes a cycle of coroutines awaiting each other: A awaits B's Task (or a
// task ordered after it, or a TaskGroup B belongs to) while B awaits A's, directly or through more
// coroutines and tasks. The await that closes the cycle throws Error(invalid_argument) in its
// coroutine ("... the awaits wait for each other"); the others stay suspended until that coroutine
// goes on (it may catch the error) and ends. Two awaits that close one cycle at the same moment on
// two threads see each other when both coroutines belong to one context; across contexts, or when
// the closing step is a blocking wait inside a coroutine racing with an await, only a cycle closed
// after the others suspended is found.
//
// Lifetime: as with any coroutine, arguments taken by reference must outlive it; the context must
// outlive every coroutine launched in it (~Context waits for their Tasks like any others). A
// coroutine of one context that awaits work of another needs that other context alive until the
// work is done and submits nothing to it once its destruction has begun: ~Context waits for every
// task, including ones submitted meanwhile, so a coroutine that keeps submitting delays it, and
// work submitted too late to be waited for is never run (its awaiter never resumes).
// GCC 12 destroys the captures of a lambda written inside a coroutine body one time too many in some
// expressions (a compiler bug: a lambda capturing a shared_ptr by value inside a coroutine frees it
// early; Clang 14 gets it right). With GCC 12, capture only references, pointers and plain
// values in lambdas inside coroutines, or build such lambdas in an ordinary function.
// Deep chains of CoTask awaiting CoTask rely on symmetric transfer being a tail call, which
// compilers only guarantee with optimisation (-O2); unoptimised builds may exhaust the stack after
// some ten thousand nested levels.
#pragma once

#include <coroutine>
#include <exception>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "nerve/context.hpp"
#include "nerve/error.hpp"
#include "nerve/task.hpp"

namespace nerve {

template <class T = void>
class CoTask;

namespace detail {

struct CoPromiseBase {
  std::coroutine_handle<> continuation;  // the coroutine awaiting this one, if any
  TaskRecord* launched = nullptr;        // the Task record, when started by launch()
  const TaskRecord* root = nullptr;      // the launched coroutine this one runs for (itself, a caller)
  std::exception_ptr error;

  std::suspend_always initial_suspend() noexcept { return {}; }

  struct FinalAwaiter {
    bool await_ready() noexcept { return false; }
    template <class P>
    std::coroutine_handle<> await_suspend(std::coroutine_handle<P> handle) noexcept {
      CoPromiseBase& promise = handle.promise();
      if (promise.continuation) return promise.continuation;  // back to the awaiting parent
      if (TaskRecord* record = promise.launched) {
        std::exception_ptr failure = std::move(promise.error);
        handle.destroy();  // before the Task finishes: a waiter may free what the frame refers to
        coroutine_task_finish(record, std::move(failure));
      }
      return std::noop_coroutine();
    }
    void await_resume() noexcept {}
  };
  FinalAwaiter final_suspend() noexcept { return {}; }
  void unhandled_exception() noexcept { error = std::current_exception(); }
};

template <class T>
struct CoPromise : CoPromiseBase {
  std::optional<T> value;
  CoTask<T> get_return_object() noexcept;
  template <class U>
  requires std::is_convertible_v<U&&, T>
  void return_value(U&& result) { value.emplace(std::forward<U>(result)); }
  T take() {
    if (error) std::rethrow_exception(error);
    return std::move(*value);
  }
};

template <>
struct CoPromise<void> : CoPromiseBase {
  CoTask<void> get_return_object() noexcept;
  void return_void() noexcept {}
  void take() {
    if (error) std::rethrow_exception(error);
  }
};

// root_of(): the launched coroutine a nerve coroutine runs for (nullptr for other coroutine types).
template <class P>
const TaskRecord* root_of(std::coroutine_handle<P> coroutine) noexcept {
  if constexpr (std::is_base_of_v<CoPromiseBase, P>) {
    return coroutine.promise().root;
  } else {
    return nullptr;
  }
}

struct TaskAwaiter {
  Task task;
  bool await_ready() const { return task.done(); }
  template <class P>
  void await_suspend(std::coroutine_handle<P> coroutine) {
    // Refuses (Error) an await that could never resume ("Errors" above).
    resume_coroutine(task_context(task.record()), coroutine.address(), task.record(), root_of(coroutine));
  }
  void await_resume() const { task.wait(); }  // done: rethrows its failure, or TaskCancelled
};

struct GroupAwaiter {
  TaskGroup& group;
  bool await_ready() noexcept {
    return (group.state()->pending.load(std::memory_order_acquire) & GroupState::count_mask) == 0;
  }
  template <class P>
  bool await_suspend(std::coroutine_handle<P> coroutine) {
    // Refuses (Error) an await that could never resume ("Errors" above).
    return group_suspend(group.state(), coroutine.address(), root_of(coroutine));
  }
  void await_resume() {
    group.wait();  // empty now: rethrows the first failure, if any
  }
};

}  // namespace detail

// CoTask<T>: a coroutine that nerve runs as tasks. It starts when launched (launch()) or awaited
// by another coroutine; destroying a CoTask that never started destroys the coroutine unrun.
template <class T>
class [[nodiscard]] CoTask {
 public:
  using promise_type = detail::CoPromise<T>;

  CoTask(CoTask&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  CoTask& operator=(CoTask other) noexcept {
    std::swap(handle_, other.handle_);
    return *this;
  }
  ~CoTask() {
    if (handle_) handle_.destroy();
  }

  // valid(): it holds a coroutine (false once moved from, launched, or awaited).
  bool valid() const noexcept { return static_cast<bool>(handle_); }

  // Awaiting a CoTask runs it on the awaiting coroutine's thread (symmetric transfer), once: its
  // frame is freed when it returns and the CoTask is empty. Awaiting an empty one throws
  // Error(invalid_argument) in the awaiting coroutine.
  bool await_ready() const {
    if (!handle_)
      throw Error(ErrorCode::invalid_argument,
                  "co_await on an empty CoTask (moved from, launched, or already awaited)");
    return false;
  }
  template <class P>
  std::coroutine_handle<> await_suspend(std::coroutine_handle<P> parent) noexcept {
    handle_.promise().continuation = parent;
    handle_.promise().root = detail::root_of(parent);
    return handle_;
  }
  T await_resume() {
    struct Destroy {
      std::coroutine_handle<promise_type> handle;
      ~Destroy() { handle.destroy(); }  // after take() has moved the result out
    } finished{std::exchange(handle_, nullptr)};
    return finished.handle.promise().take();
  }

  // release() gives up ownership of the coroutine (launch() uses it).
  std::coroutine_handle<promise_type> release() noexcept { return std::exchange(handle_, nullptr); }

 private:
  friend struct detail::CoPromise<T>;
  explicit CoTask(std::coroutine_handle<promise_type> handle) noexcept : handle_(handle) {}
  std::coroutine_handle<promise_type> handle_;
};

namespace detail {

template <class T>
CoTask<T> CoPromise<T>::get_return_object() noexcept {
  return CoTask<T>(std::coroutine_handle<CoPromise<T>>::from_promise(*this));
}
inline CoTask<void> CoPromise<void>::get_return_object() noexcept {
  return CoTask<void>(std::coroutine_handle<CoPromise<void>>::from_promise(*this));
}

inline Task launch_in(ContextImpl* context, GroupState* group, CoTask<> coroutine, const char* name) {
  if (!coroutine.valid()) {
    throw Error(ErrorCode::invalid_argument,
                std::string("launch() of an empty CoTask (moved from, launched, or already awaited)") +
                    (name != nullptr ? std::string(": ") + name : std::string()));
  }
  TaskRecord* record = coroutine_task_create(context, name, group);
  auto handle = coroutine.release();
  handle.promise().launched = record;
  handle.promise().root = record;
  try {
    start_coroutine(context, handle.address(), record);
  } catch (...) {
    handle.destroy();
    coroutine_task_finish(record, std::current_exception());
    release_handle(record);
    throw;
  }
  return Task::adopt(record);
}

}  // namespace detail

// launch() starts `coroutine` as a task of `context` (or of `group`: group.wait() then waits for it
// too) and returns its Task. `name` (a string literal) names it in errors, and each stretch it runs
// between two suspensions (one task each) in traces and statistics.
inline Task launch(Context& context, CoTask<> coroutine, const char* name = nullptr) {
  return detail::launch_in(context.impl(), nullptr, std::move(coroutine), name);
}
inline Task launch(TaskGroup& group, CoTask<> coroutine, const char* name = nullptr) {
  return detail::launch_in(group.impl(), group.state(), std::move(coroutine), name);
}

// co_await on nerve::Task and nerve::TaskGroup (found by argument-dependent lookup).
inline detail::TaskAwaiter operator co_await(Task task) { return {std::move(task)}; }
inline detail::GroupAwaiter operator co_await(TaskGroup& group) { return {group}; }
}  // namespace nerve
