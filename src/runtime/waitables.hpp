// waitables.hpp — the things a thread can wait for, in the shape Scheduler::wait() expects:
// done(), before_park() (make the completer notice a parked waiter), after_park(), address()
// (the waiter-registry key) and `expensive` (done() scans shared state: check it less often).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>

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

// A wait's entry in its context's stuck_waits (ContextImpl::list_stuck_wait) while its thread parks.
class StuckWaitListing {
 public:
  StuckWaitListing() = default;
  StuckWaitListing(const StuckWaitListing&) = delete;  // listed by address
  StuckWaitListing& operator=(const StuckWaitListing&) = delete;
  ~StuckWaitListing() { withdraw(); }
  // list(): lists the calling thread's wait for the tasks `blocked` selects; returns what it waits
  // for on another thread's stack in a cycle of waits (the wait is then not listed, unless not
  // `leave_when_found`), or nothing (also out of memory: the wait then goes unchecked).
  template <class Blocked>
  std::string list(ContextImpl& owner, const Blocked& blocked, bool leave_when_found = true) {
    context = &owner;
    std::string elsewhere;
    try {
      erased_blocked = blocked;
      erased_ordered = [targets = blocked] { return targets_may_be_ordered(targets); };
      stuck = {innermost_frame(), innermost_waited_mapping(), &erased_blocked, &erased_ordered};
      elsewhere = owner.list_stuck_wait(stuck, leave_when_found);
    } catch (...) {
    }
    if (!elsewhere.empty() && leave_when_found) context = nullptr;  // list_stuck_wait() unlisted it
    return elsewhere;
  }
  bool listed() const noexcept { return context != nullptr; }
  void withdraw() noexcept {
    if (context != nullptr) std::exchange(context, nullptr)->unlist_stuck_wait(stuck);
  }

 private:
  std::function<bool(const TaskRecord*)> erased_blocked;
  std::function<bool()> erased_ordered;
  StuckWait stuck;
  ContextImpl* context = nullptr;  // while listed
};

// A blocking map's wait for its grant, listed while it parks (inside a task, or below tasks its wait
// ran): what it waits for is part of the other waits' graph. Found in a cycle, it gives up its
// mapping (ContextImpl::abandon_mapping) and the wait returns not done; throw_hopeless() then says why.
struct ListedMapWait {
  MappingGranted granted;
  StuckWaitListing listing;
  std::string elsewhere;
  static constexpr bool expensive = false;
  static constexpr bool may_be_hopeless = true;
  bool done() const noexcept { return granted.done(); }
  void before_park() noexcept { granted.before_park(); }
  void after_park() noexcept { granted.after_park(); }
  const void* address() const noexcept { return granted.address(); }
  bool parking(ThreadState& thread) {
    const TaskRecord* mapping = granted.task;
    elsewhere = listing.list(*thread.context, [mapping](const TaskRecord* task) { return task == mapping; });
    // Granted meanwhile (a cycle broken by a cancellation): the wait is done, not hopeless.
    return !elsewhere.empty() && ContextImpl::abandon_mapping(granted.task);
  }
  bool listed() const noexcept { return listing.listed(); }
  void resumed() noexcept { listing.withdraw(); }
  [[noreturn]] void throw_hopeless(const char* what) const {
    ContextImpl::throw_waits_across(elsewhere, what);
  }
};

// `Target`, for a wait that may be waiting for a task suspended below it on the waiting thread's
// stack, or, through the waits of other threads, on theirs: `blocked` selects the tasks the wait
// waits for (ContextImpl::suspended_blocker, list_stuck_wait). After a false return of
// Scheduler::wait, throw_hopeless() throws the error that says why the wait could never end.
template <class Target, class Blocked>
class UnlessSuspended {
 public:
  UnlessSuspended(Target waited, Blocked selects) : target(waited), blocked(selects) {}

  static constexpr bool expensive = Target::expensive;
  static constexpr bool may_be_hopeless = true;
  bool done() const noexcept { return target.done(); }
  void before_park() noexcept { target.before_park(); }
  void after_park() noexcept { target.after_park(); }
  const void* address() const noexcept { return target.address(); }
  // hopeless(): whether a task suspended on this thread's stack blocks the wait.
  bool hopeless() {
    blocker = ContextImpl::suspended_blocker(blocked, targets_may_be_ordered(blocked));
    return blocker != nullptr;
  }
  // found_hopeless(): the last parking() found the wait hopeless (a suspended blocker or a cycle).
  bool found_hopeless() const noexcept {
    return blocker != nullptr || !elsewhere.empty() || dependent != nullptr;
  }
  // parking(): before this thread parks for want of work, hopeless() or a cycle of waits through
  // other threads (then true); else the wait is listed until resumed().
  bool parking(ThreadState& thread) {
    if (waits_behind_running_task()) return true;
    if (thread.nesting + thread.map_waits > 1 && hopeless()) return true;
    // A wait that cannot fail without ending the program (~TaskGroup) stays listed while it finds
    // the cycle, for another wait of it, which can fail, to find it too and refuse; only a cycle
    // still there after stuck_cycle_patience of its looks (about a second) is its own to report.
    elsewhere = listing.list(*thread.context, blocked, !last_resort);
    if (elsewhere.empty()) {
      cycles_seen = 0;
      return false;
    }
    if (last_resort && ++cycles_seen < stuck_cycle_patience) {
      elsewhere.clear();
      return false;
    }
    listing.withdraw();  // still listed only as a last resort
    return true;
  }
  // give_up_last(): this wait cannot fail without ending the program (see parking()).
  void give_up_last() noexcept { last_resort = true; }
  bool listed() const noexcept { return listing.listed(); }
  void resumed() noexcept { listing.withdraw(); }
  [[noreturn]] void throw_hopeless(const char* what) const {
    if (dependent != nullptr) throw_waits_for_awaiter(*running_task_record(), *dependent, what);
    if (!elsewhere.empty()) ContextImpl::throw_waits_across(elsewhere, what);
    ContextImpl::throw_waits_behind(blocker, what);
  }

 private:
  // waits_behind_running_task(): what the wait waits for has come, since the checks before it, to
  // wait for the running task itself (a coroutine, run by this wait or on another thread, that awaits
  // it or work ordered after it): the check refuse_endless_wait() made at the start, made again. A
  // parked wait is listed and looks again every stuck_wait_recheck, so an await after it parked is
  // found too. For a coroutine's stretch, what waits for its coroutine's Task.
  bool waits_behind_running_task() {
    const TaskRecord* running = running_task_unfinished();
    if (running == nullptr) return false;
    const TaskRecord* root = coroutine_root_of(*running);
    const TaskRecord* self = root != nullptr ? root : running;
    if (blocked(self)) return false;  // refused before the wait
    if (!targets_may_be_ordered(blocked)) return false;
    dependent = ContextImpl::first_waiting_for(self, blocked);
    return dependent != nullptr;
  }

  Target target;
  Blocked blocked;
  static constexpr int stuck_cycle_patience = 20;
  const TaskRecord* blocker = nullptr;    // on this thread's stack (hopeless())
  const TaskRecord* dependent = nullptr;  // waits for the running task (waits_behind_running_task())
  std::string elsewhere;                  // on another's (parking())
  StuckWaitListing listing;
  bool last_resort = false;
  int cycles_seen = 0;
};
template <class Target, class Blocked>
UnlessSuspended(Target, Blocked) -> UnlessSuspended<Target, Blocked>;

}  // namespace nerve::detail
