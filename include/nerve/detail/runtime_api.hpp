// detail/runtime_api.hpp — the non-template entry points the public templates call. Not API.
//
// The C++ API's templates (submit, Buffer<T>, parallel_for) type-erase the user's callable and
// accesses, then cross into the library through these functions. Everything here may change
// between versions; use nerve.hpp.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <limits>
#include <memory>
#include <ratio>
#include <string>
#include <type_traits>

#include "nerve/export.hpp"

namespace nerve {

enum class Access : std::uint8_t {
  read = 1,
  write = 2,
  read_write = 3,
};

class Context;
class Kernel;
struct BufferOptions;
struct TaskOptions;

namespace detail {

struct ContextImpl;
struct TaskRecord;
struct BufferState;
struct PoolState;
struct ThreadState;

constexpr bool reads(Access mode) noexcept {
  return (static_cast<unsigned>(mode) & static_cast<unsigned>(Access::read)) != 0;
}
constexpr bool writes(Access mode) noexcept {
  return (static_cast<unsigned>(mode) & static_cast<unsigned>(Access::write)) != 0;
}

// One declared access of a task: a byte range of a buffer and the mode.
struct AccessSpec {
  BufferState* buffer;
  std::size_t offset;  // bytes
  std::size_t size;    // bytes
  Access mode;
};

// What a task's closure sees for each access on the device it runs on.
struct AccessView {
  void* data;
  std::size_t size;  // bytes
};

using InvokeFn = void (*)(void* closure, const AccessView* views);
using DestroyFn = void (*)(void* closure) noexcept;

// How to call and destroy one closure type (one static instance per type).
struct ClosureOps {
  InvokeFn invoke;
  DestroyFn destroy;
  // A C kernel (nerve_task_create): its task's name is its kernel identity, under which performance
  // models learn its run times (C++ closures have none; Kernel calls have their Kernel's name).
  bool named_kernel = false;
};

// The first failure of a group or a pool: recorded by the thread that finishes the failed task,
// taken by one wait — several threads may wait at once, and only one of them gets it (two once
// both rethrew it and released it twice).
class KeptFailure {
 public:
  // record() keeps `error` unless one is kept already (it waits out a take in progress); returns
  // whether it kept it.
  bool record(const std::exception_ptr& error) noexcept {
    while (true) {
      std::uint8_t expected = empty;
      if (state_.compare_exchange_weak(expected, writing, std::memory_order_acquire,
                                       std::memory_order_relaxed)) {
        error_ = error;
        state_.store(ready, std::memory_order_release);
        return true;
      }
      if (expected == writing || expected == ready) return false;  // the first one is kept
      // `taking`: a wait is emptying it; this failure is the next one.
    }
  }
  // count_other() counts a failure that was not kept (the runtime logs the first few) and returns
  // how many were counted before it; take_others() returns the count and restarts it.
  std::uint32_t count_other() noexcept { return others_.fetch_add(1, std::memory_order_relaxed); }
  std::uint32_t take_others() noexcept { return others_.exchange(0, std::memory_order_relaxed); }
  // take() returns the kept error and empties it, to exactly one caller; null if none.
  std::exception_ptr take() noexcept {
    std::uint8_t expected = ready;
    if (state_.load(std::memory_order_acquire) != ready ||
        !state_.compare_exchange_strong(expected, taking, std::memory_order_acquire,
                                        std::memory_order_relaxed))
      return nullptr;
    std::exception_ptr error = std::move(error_);
    error_ = nullptr;
    state_.store(empty, std::memory_order_release);
    return error;
  }
  // present() / kept(): whether one is kept, and it (only while nobody can take it: the pool's
  // last member reads it for the gate before any wait for the pool can end).
  bool present() const noexcept { return state_.load(std::memory_order_acquire) == ready; }
  const std::exception_ptr& kept() const noexcept { return error_; }

 private:
  static constexpr std::uint8_t empty = 0;
  static constexpr std::uint8_t writing = 1;
  static constexpr std::uint8_t ready = 2;
  static constexpr std::uint8_t taking = 3;
  std::atomic<std::uint8_t> state_{empty};
  std::atomic<std::uint32_t> others_{0};
  std::exception_ptr error_;
};

// Completion counting for a TaskGroup / TaskPool, embedded in the user-visible object so that
// creating a group allocates nothing.
struct GroupState {
  // Bits 0..39: tasks submitted to the group and not finished; bits 40..61: threads parked in wait()
  // (a completer that brings the count to zero wakes them through the waiter registry); bit 62: a
  // coroutine awaits the group (the completer takes `continuation`, clears the bit and resumes it).
  // Only that bit entitles the completer to touch the group after its decrement: a parked thread may
  // return and destroy it.
  static constexpr std::int64_t count_mask = (std::int64_t{1} << 40) - 1;
  static constexpr std::int64_t parked_one = std::int64_t{1} << 40;
  static constexpr std::int64_t coroutine_parked = std::int64_t{1} << 62;
  std::atomic<std::int64_t> pending{0};
  // Of those, the ones a wait's check for a cycle can meet behind a task outside the group: with a
  // predecessor outside the group's own graph, or launched coroutines (may_be_ordered() in
  // src/runtime/context_impl.hpp). While none is unfinished, a wait for the group cannot wait behind
  // the task it runs in, and that check walks nothing: a fork-join inside a task with a long chain of
  // work after it cost a walk of that chain per wait.
  std::atomic<std::int64_t> ordered_members{0};
  KeptFailure first_error;
  std::atomic<bool> cancel_requested{false};
  // A parallel loop's group: failures past the first are not logged one by one (parallel_for and
  // parallel_reduce count the exceptions of their body themselves and log one line at the end).
  bool quiet_failures = false;
  // A coroutine suspended in `co_await group` (its handle's address), resumed as a new task by the
  // completer that brings the count to zero (see coroutine.hpp). At most one at a time.
  std::atomic<void*> continuation{nullptr};
  // Its launched coroutine's Task record (null: none): names the resumed stretch and tells the
  // wait checks which coroutine that stretch runs for, and which coroutine waits for the group's
  // tasks (the cycle checks read it from other threads while the coroutine is parked).
  std::atomic<const TaskRecord*> continuation_root{nullptr};
};

// Two pointers, so that begin_task() returns it and commit_task() takes it in registers: a larger
// draft goes through memory, and reading it back as one 16-byte copy of two 8-byte stores misses
// store forwarding (W2 on AMD Zen spent 7% of its time there).
struct TaskDraft {
  TaskRecord* record;
  void* closure;  // storage for the closure, at least the requested size and alignment
};

struct SubmitInfo {
  const ClosureOps* ops;
  const AccessSpec* accesses;
  std::size_t access_count;
  const char* name;          // must outlive the task (string literal, kernel name)
  TaskRecord* const* after;  // explicit predecessors
  std::size_t after_count;
  GroupState* group;       // or nullptr
  bool keep_handle;        // the caller takes a reference for a Task handle
  PoolState* pool;         // add to this (unlaunched) task pool instead of scheduling
  bool compute_intensive;  // TaskOptions::compute_intensive
  int device = -1;         // TaskOptions::device
  // false: the `after` edges only order (a failed predecessor does not cancel this task); a
  // coroutine's continuation uses it to resume and observe the failure itself.
  bool after_consumes = true;
  int priority = 0;  // TaskOptions::priority
  // A C kernel in the launcher form fn(desc, device, stream): besides the CPU workers, CUDA devices
  // may run it, calling it on their launcher thread with their stream (running_stream()).
  bool stream_launcher = false;
  bool stream_only = false;  // ... and only they: not the CPU workers
};

// Task submission: begin_task() reserves a record with closure storage, the template constructs the
// closure in place, commit_task() declares accesses and edges and schedules. If constructing the
// closure throws, abandon_task() returns the record.
NERVE_API TaskDraft begin_task(ContextImpl* context, std::size_t closure_size, std::size_t closure_align);
NERVE_API void abandon_task(ContextImpl* context, TaskDraft draft) noexcept;
NERVE_API TaskRecord* commit_task(ContextImpl* context, TaskDraft draft, const SubmitInfo& info);
// A spawn of a plain closure (no accesses, options, group or pool) begins with begin_spawn(): under
// back-pressure it returns a draft without a record, and the closure runs at once on the calling
// thread through run_spawn_inline(), which calls body(closure) (body also destroys it) and reports
// what it throws to wait_all(); abandon_spawn() if making the closure throws.
NERVE_API TaskDraft begin_spawn(ContextImpl* context, std::size_t closure_size, std::size_t closure_align);
NERVE_API void run_spawn_inline(ContextImpl* context, void (*body)(void*), void* closure) noexcept;
NERVE_API void abandon_spawn(ContextImpl* context) noexcept;

// Coroutine tasks (coroutine.hpp, src/runtime/coroutines.cpp).
// coroutine_task_create() makes the record a launched coroutine's Task stands for: it counts as a
// submitted task (of `group`, if any) from now until coroutine_task_finish(), which fails it with
// `error` (or succeeds it when null) and releases the runtime's reference. The caller owns the
// other reference (the Task handle).
NERVE_API TaskRecord* coroutine_task_create(ContextImpl* context, const char* name, GroupState* group);
NERVE_API void coroutine_task_finish(TaskRecord* record, std::exception_ptr error) noexcept;
// resume_coroutine() resumes the coroutine whose handle address is `coroutine` as a new task, once
// `after` (if not null) has finished, whatever its outcome. The task carries the name of `root`, the
// launched coroutine it runs for (if any). With a root, refuses first (Error(invalid_argument)) an
// await that could never resume (coroutine.hpp, "Errors").
NERVE_API void resume_coroutine(ContextImpl* context, void* coroutine, TaskRecord* after,
                                const TaskRecord* root);
// start_coroutine() runs a launched coroutine's first stretch as a new task; if `launched` (its Task)
// or its group is cancelled by then, the coroutine is destroyed unrun and `launched` finishes cancelled.
NERVE_API void start_coroutine(ContextImpl* context, void* coroutine, TaskRecord* launched);
// group_suspend() parks the coroutine in `group`: true when it will be resumed once the group is
// empty, false when the group already is (resume now). Error(invalid_argument) if another coroutine
// already waits for the group, or (with a root) if the await could never resume
// (coroutine.hpp, "Errors"). group_resumed() does nothing (the completer that resumes the coroutine
// clears its parked bit); kept for programs built against a header that called it.
NERVE_API bool group_suspend(GroupState* group, void* coroutine, const TaskRecord* root);
NERVE_API void group_resumed(GroupState* group) noexcept;
NERVE_API ContextImpl* task_context(const TaskRecord* record) noexcept;

// Kernel calls: the accesses and values of one call of `kernel` (see kernel.hpp).
struct KernelValue;
struct KernelSubmission {
  const Kernel* kernel;
  const AccessSpec* accesses;
  std::size_t access_count;
  const KernelValue* values;
  std::size_t value_count;
};
NERVE_API TaskRecord* submit_kernel(ContextImpl* context, const TaskOptions* options, GroupState* group,
                                    PoolState* pool, bool keep_handle, const KernelSubmission& call);

NERVE_API void retain(TaskRecord* record) noexcept;
NERVE_API void release(TaskRecord* record) noexcept;
// Task handles also keep the context's memory alive (a handle may outlive its Context object).
NERVE_API void retain_handle(TaskRecord* record) noexcept;
NERVE_API void release_handle(TaskRecord* record) noexcept;
NERVE_API void retain(BufferState* buffer) noexcept;
NERVE_API void release(BufferState* buffer) noexcept;

// Task handles.
NERVE_API int task_status(const TaskRecord* record) noexcept;  // a TaskStatus value
// A timed wait's timeout in nanoseconds for task_wait / group_wait_for, whose -1 means "no limit":
// a negative (or NaN) timeout is 0, an immediate poll, and one too long for int64 nanoseconds
// (hours::max()) saturates instead of overflowing in the conversion. duration_cast multiplies the
// count by the ratio's numerator before dividing: for a tick like 1/3 s that overflows long before
// the result would, so such a count is converted through double (exact enough for a wait that long).
template <class Rep, class Period>
constexpr std::int64_t timeout_ns(std::chrono::duration<Rep, Period> timeout) noexcept {
  constexpr std::int64_t longest = std::numeric_limits<std::int64_t>::max();
  const double ns = std::chrono::duration<double, std::nano>(timeout).count();
  if (!(ns > 0)) return 0;
  if (ns >= static_cast<double>(longest)) return longest;
  if constexpr (std::is_integral_v<Rep>) {
    using PerTick = std::ratio_divide<Period, std::nano>;  // nanoseconds per tick, num / den
    if (static_cast<std::uintmax_t>(timeout.count()) > static_cast<std::uintmax_t>(longest) / PerTick::num)
      return static_cast<std::int64_t>(ns);
  }
  return std::chrono::duration_cast<std::chrono::nanoseconds>(timeout).count();
}
NERVE_API bool task_wait(TaskRecord* record, std::int64_t timeout_ns);  // false on timeout; rethrows
NERVE_API std::exception_ptr task_error(const TaskRecord* record) noexcept;

// Groups keep the context's runtime alive like task handles (they may outlive the Context object).
// context_retain() counts the reference in the calling thread's shard, which it returns (null when
// it counted centrally); context_release() takes it back. Both accept nullptr (a moved-from Context).
NERVE_API ThreadState* context_retain(ContextImpl* context) noexcept;
NERVE_API void context_release(ContextImpl* context, ThreadState* shard) noexcept;
// require_context(): Error(invalid_argument) for nullptr (a moved-from Context).
NERVE_API void require_context(const ContextImpl* context);

// Groups.
NERVE_API void group_wait(ContextImpl* context, GroupState* group);  // rethrows the first error
NERVE_API bool group_wait_for(ContextImpl* context, GroupState* group, std::int64_t timeout_ns);
// group_destroy(): the destructor's wait, when tasks are pending or a failure is kept; a kept failure
// is logged. A wait that could never end (the cases wait() refuses) is a fatal error, reported.
NERVE_API void group_destroy(ContextImpl* context, GroupState* group) noexcept;

// Task pools: tasks added to a pool are mutually independent and start together at launch, once
// the pool's predecessors (inferred from the union of its tasks' accesses) have finished.
NERVE_API PoolState* pool_create(ContextImpl* context, std::size_t expected_tasks);
NERVE_API void pool_launch(PoolState* pool);
// pool_wait() = pool_wait_ended() for TaskPool::wait_all(), then pool_report().
NERVE_API void pool_wait(PoolState* pool);
// pool_wait_ended(): launches `pool` and waits until its tasks have ended. A wait that could never
// end throws Error, naming the wait `what`: from inside one of its own tasks or one ordered after it,
// or behind a task this thread suspended to run the caller (Error(invalid_argument)); while this thread
// holds a mapping one of them needs (Error(buffer_misuse)). pool_report() then rethrows the failure
// (else the cancellation) the pool's tasks ended with, once. (The C API reports the two apart.)
NERVE_API void pool_wait_ended(PoolState* pool, const char* what);
NERVE_API void pool_report(PoolState* pool);
// pool_check_wait(): the errors pool_wait_ended() raises before it waits.
NERVE_API void pool_check_wait(PoolState* pool, const char* what);
// pool_destroy_checked(): waits for a launched pool's tasks (discards an unlaunched one's), then frees
// the pool. A wait that could never end (pool_check_wait's cases) is not done: the pool is detached
// (its tasks still run when they can; the context frees it after them) and Error says why.
// pool_destroy(): the same for a destructor: the error is logged.
NERVE_API void pool_destroy_checked(PoolState* pool);
NERVE_API void pool_destroy(PoolState* pool) noexcept;
NERVE_API std::size_t pool_size(const PoolState* pool) noexcept;
NERVE_API bool pool_launched(const PoolState* pool) noexcept;

// Buffers.
NERVE_API BufferState* buffer_create(ContextImpl* context, std::size_t bytes, std::size_t element_size,
                                     const BufferOptions& options);
NERVE_API std::size_t buffer_bytes(const BufferState* buffer) noexcept;
// copy_into_new_buffer(): a new buffer's initial contents, copied by the context's workers when large.
NERVE_API void copy_into_new_buffer(ContextImpl* context, void* destination, const void* source,
                                    std::size_t bytes);
NERVE_API std::uint64_t buffer_id(const BufferState* buffer) noexcept;
// Throws Error(buffer_misuse) for a slice of `count` elements at `offset` outside a view of
// `view_count` elements starting at element `view_offset` of `buffer`, naming the buffer.
[[noreturn]] NERVE_API void throw_slice_outside(const BufferState* buffer, std::size_t offset,
                                                std::size_t count, std::size_t view_offset,
                                                std::size_t view_count);
// Checks that [offset, offset+size) lies in the buffer and the buffer is alive; throws BufferMisuse
// naming `operation` with its preposition ("slice of", "a read map of") and the range.
NERVE_API void buffer_check_range(const BufferState* buffer, std::size_t offset, std::size_t size,
                                  const char* operation);
NERVE_API void buffer_free(BufferState* buffer);  // explicit free (C API); later use is an error

struct Mapping {
  TaskRecord* record;  // the host access; finished by unmap
  void* data;
};
// map: waits for conflicting tasks; try_map returns {nullptr, nullptr} when it would have to wait.
NERVE_API Mapping buffer_map(BufferState* buffer, std::size_t offset, std::size_t size, Access mode,
                             bool wait);
NERVE_API void buffer_unmap(Mapping mapping);

// What messages name a buffer by where no handle may reach it any more (a Mapped<T> after unmap():
// its mapping no longer holds the buffer). The name is shared with the buffer, not copied: null when
// it has none, so that mapping an unnamed buffer costs nothing more.
struct BufferLabel {
  std::uint64_t id = 0;  // 0: no buffer (a Mapped<T> never mapped)
  std::size_t bytes = 0;
  std::shared_ptr<const std::string> name;
};
NERVE_API BufferLabel buffer_label(const BufferState* buffer) noexcept;
// Throws Error(buffer_misuse) for an unmap of elements [first, end) of the buffer `label` names,
// which are not mapped (unmapped already, moved from, or never mapped when label.id is 0).
[[noreturn]] NERVE_API void throw_unmap_without_map(const BufferLabel& label, std::size_t first,
                                                    std::size_t end);

// running_device() is the device index the calling thread's current task runs on (0 = CPU workers),
// or -1 outside tasks.
NERVE_API int running_device() noexcept;
// running_stream() is the queue the calling thread's current task launches on (a CUDA stream for a
// C kernel a CUDA device runs), or nullptr (CPU workers, outside tasks).
NERVE_API void* running_stream() noexcept;

// Deferred completion, for communication tasks (the distributed runtime's sends and receives): a
// task body running on a CPU worker calls defer_current_task() just before it returns; the task then
// stays running — its accesses held, its successors waiting — until some thread calls
// complete_deferred() on it, exactly once (a null `error` = success). The body must not throw after
// deferring. Throws Error(invalid_argument) outside a task or in a task on a device.
NERVE_API TaskRecord* defer_current_task();
NERVE_API void complete_deferred(TaskRecord* task, std::exception_ptr error) noexcept;

// parallel_for/reduce worker count and the calling thread's worker index (or -1).
inline constexpr std::size_t deterministic_pieces = 64;
// log_dropped_exceptions(): one warning for the `count` exceptions a parallel loop's body threw
// after the first (which the loop rethrows).
NERVE_API void log_dropped_exceptions(const char* loop, std::uint64_t count) noexcept;
NERVE_API unsigned context_worker_count(const ContextImpl* context) noexcept;
// How many pieces a grain-0 loop is split into: 4 per worker, or a fixed count in deterministic mode.
NERVE_API std::size_t context_auto_pieces(const ContextImpl* context) noexcept;

}  // namespace detail
}  // namespace nerve
