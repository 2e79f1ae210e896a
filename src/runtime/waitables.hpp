// waitables.hpp — the things a thread can wait for, in the shape Scheduler::wait() expects:
// done(), before_park() (make the completer notice a parked waiter), after_park(), address()
// (the waiter-registry key) and `expensive` (done() scans shared state: check it less often).
#pragma once

#include <atomic>
#include <cstdint>

#include "runtime/context_impl.hpp"
#include "task/task_record.hpp"

namespace nerve::detail {

// A task reaching a terminal status.
struct TaskDone {
  TaskRecord* task;
  static constexpr bool expensive = false;
  bool done() const noexcept { return task->finished(); }
  void before_park() noexcept { task->status.fetch_or(status_waiters_bit, std::memory_order_seq_cst); }
  void after_park() noexcept {}
  const void* address() const noexcept { return task; }
};

// A host mapping being granted (its conflicting predecessors are done) or cancelled.
struct MappingGranted {
  TaskRecord* task;
  static constexpr bool expensive = false;
  bool done() const noexcept {
    return task->phase.load(std::memory_order_seq_cst) == status_running || task->finished();
  }
  void before_park() noexcept { task->status.fetch_or(status_waiters_bit, std::memory_order_seq_cst); }
  void after_park() noexcept {}
  const void* address() const noexcept { return task; }
};

// A TaskGroup / parallel-loop group reaching zero unfinished tasks.
struct GroupDone {
  GroupState* group;
  static constexpr bool expensive = false;
  bool done() const noexcept {
    return (group->pending.load(std::memory_order_acquire) & GroupState::count_mask) == 0;
  }
  void before_park() noexcept { group->pending.fetch_add(GroupState::parked_one, std::memory_order_seq_cst); }
  void after_park() noexcept { group->pending.fetch_sub(GroupState::parked_one, std::memory_order_acq_rel); }
  const void* address() const noexcept { return group; }
};

// Every task of the context finished (wait_all). Slots entering idle wake parked waiters.
struct AllDone {
  ContextImpl* context;
  static constexpr bool expensive = true;
  bool done() const noexcept { return context->in_flight() == 0; }
  void before_park() noexcept { context->root_parked.fetch_add(1, std::memory_order_seq_cst); }
  void after_park() noexcept { context->root_parked.fetch_sub(1, std::memory_order_acq_rel); }
  const void* address() const noexcept { return &context->root_parked; }
};

// `Target`, for a wait that may be waiting for a task suspended below it on the waiting thread's
// stack: `blocked` selects the tasks the wait waits for (ContextImpl::suspended_blocker).
template <class Target, class Blocked>
struct UnlessSuspended {
  Target target;
  Blocked blocked;
  static constexpr bool expensive = Target::expensive;
  static constexpr bool may_be_hopeless = true;
  bool done() const noexcept { return target.done(); }
  void before_park() noexcept { target.before_park(); }
  void after_park() noexcept { target.after_park(); }
  const void* address() const noexcept { return target.address(); }
  bool hopeless() const { return ContextImpl::suspended_blocker(blocked) != nullptr; }
};
template <class Target, class Blocked>
UnlessSuspended(Target, Blocked) -> UnlessSuspended<Target, Blocked>;

}  // namespace nerve::detail
