// waiting.cpp — counting tasks in flight, wait_all(), submission throttling, root errors.
#include <algorithm>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "nerve/error.hpp"

#include "memory/buffer_state.hpp"
#include "runtime/context_impl.hpp"
#include "runtime/failure_log.hpp"
#include "runtime/waitables.hpp"
#include "util/exception_text.hpp"
#include "util/log.hpp"

namespace nerve::detail {

namespace {
// How an error names a task another thread's wait holds: a task by name, a mapping by its data.
std::string describe_waited(const TaskRecord& task) {
  if (task.kind == TaskKind::host_access) {
    const AccessRecord& mapped = task.accesses[0];
    return fmt::format("the map of {}", mapped.buffer->describe(mapped.offset, mapped.size));
  }
  return fmt::format("task '{}'", task.name != nullptr ? task.name : "(unnamed)");
}
}  // namespace

// Sum of completions first, then of submissions: a task's submission happens-before its completion
// is counted, so the difference never under-counts the tasks in flight at the time of the reads.
std::int64_t ContextImpl::in_flight() const noexcept {
  const std::size_t count = thread_count.load(std::memory_order_acquire);
  std::uint64_t completed = 0;
  for (std::size_t i = 0; i < count; ++i) {
    completed += thread_list[i].load(std::memory_order_relaxed)->completed.load(std::memory_order_acquire);
  }
  std::uint64_t submitted = 0;
  for (std::size_t i = 0; i < count; ++i) {
    submitted += thread_list[i].load(std::memory_order_relaxed)->submitted.load(std::memory_order_acquire);
  }
  return static_cast<std::int64_t>(submitted - completed);
}

namespace {
constexpr const char* wait_all_inside_own_task =
    "wait_all() called inside a task would wait for that task itself; wait for a TaskGroup instead";
}  // namespace

void ContextImpl::refuse_wait_all_inside_a_task() {
  // A task of another context may be what this context's work waits for (a mapping of its buffer,
  // a pool reading what it writes): waiting for all of this context there could never end, and
  // the cycle, across two contexts, is not found.
  if (!inside_a_task()) return;
  const TaskRecord* running = running_task_record();
  if (running == nullptr || running->context == this)
    throw Error(ErrorCode::invalid_argument, wait_all_inside_own_task);
  throw Error(ErrorCode::invalid_argument,
              fmt::format("wait_all() of context {} called inside a task of another context: it could "
                          "wait for work that waits for that task; wait for a TaskGroup or a Task instead",
                          id));
}

void ContextImpl::wait_for_all_tasks() {
  ThreadState& thread = current_thread();
  if (thread.nesting > 0) {
    throw Error(ErrorCode::invalid_argument, wait_all_inside_own_task);
  }
  AllDone all{this};
  wait_rechecking(thread, all, [this] { refuse_own_mapping_wait(waits_for_all, "wait_all()"); });
  free_detached_pools();  // their tasks have ended
}

const TaskRecord* ContextImpl::suspended_blocker(const std::function<bool(const TaskRecord*)>& blocked,
                                                 bool targets_ordered) {
  const RunningFrame* innermost = innermost_frame();
  if (innermost == nullptr) return nullptr;
  return blocker_among(innermost->outer, innermost_waited_mapping(), blocked, targets_ordered);
}

const TaskRecord* ContextImpl::blocker_among(const RunningFrame* frames, const WaitedMapping* mappings,
                                             const std::function<bool(const TaskRecord*)>& blocked,
                                             bool targets_ordered) {
  // Targets that no walk can reach are only met as themselves (a walk of each frame's successors,
  // a chain of thousands of tasks behind a step, found nothing there).
  const auto holds_up = [&](const TaskRecord* task) {
    return targets_ordered ? first_waiting_for(task, blocked) != nullptr : blocked(task);
  };
  for (const RunningFrame* frame = frames; frame != nullptr; frame = frame->outer) {
    // A body that deferred its completion is not waited for through its frame: another thread may
    // finish its task (and recycle the record) while the body still runs.
    if (frame->deferred) continue;
    // Its task is unfinished while its frame is on the stack: the walk reads live records only.
    if (holds_up(frame->task)) return frame->task;
    // A coroutine's stretch holds up its coroutine, whose Task (finished apart from the stretch's
    // record, and unfinished while a stretch runs) is what waits, groups and `after` name.
    if (const TaskRecord* root = coroutine_root_of(*frame->task); root != nullptr && holds_up(root))
      return frame->task;
  }
  // A blocking map waiting below the running task: its mapping ends (at an unmap) only after that
  // map returns. It is unfinished unless cancelled: its grant finishes a cancelled one, which the
  // context's mappings_mutex holds off until the walk is over (grant_mapping), and the walk skips.
  for (const WaitedMapping* waited = mappings; waited != nullptr; waited = waited->outer) {
    TaskRecord* mapping = waited->mapping;
    std::lock_guard lock(mapping->context->mappings_mutex);
    if (mapping->cancel_pending.load(std::memory_order_acquire)) continue;
    if (holds_up(mapping)) return mapping;
  }
  return nullptr;
}

std::string ContextImpl::list_stuck_wait(const StuckWait& wait, bool leave_when_found) {
  std::lock_guard lock(stuck_waits_mutex);
  stuck_waits.push_back(&wait);
  // The listed waits are a graph: a wait points at another when it waits for a task on that one's
  // thread's stack (the innermost frame too: it is the waiting task). A path from this wait back to
  // itself is a cycle. A breadth-first walk from it, each wait carrying the task its path's first step
  // waits for: few threads wait so at once, and each wait is expanded once.
  const auto waits_for_stack_of = [](const StuckWait& waiting, const StuckWait& holder) {
    return blocker_among(holder.frames, holder.mappings, *waiting.blocked,
                         waiting.ordered == nullptr || (*waiting.ordered)());
  };
  std::vector<std::pair<const StuckWait*, const TaskRecord*>> frontier{{&wait, nullptr}};
  std::vector<const StuckWait*> seen{&wait};
  for (std::size_t next = 0; next < frontier.size(); ++next) {
    const auto [waiting, first_step] = frontier[next];
    for (const StuckWait* holder : stuck_waits) {
      if (holder == waiting) continue;
      const bool back = holder == &wait;
      if (!back && std::find(seen.begin(), seen.end(), holder) != seen.end()) continue;
      const TaskRecord* blocker = waits_for_stack_of(*waiting, *holder);
      if (blocker == nullptr) continue;
      if (back) {
        // Out of the list before anyone else looks: the others of the cycle, looking again, must
        // not find it too once this wait has decided to end it (one refusal per cycle).
        std::string elsewhere = describe_waited(*first_step);
        if (leave_when_found) unlist_locked(wait);
        return elsewhere;
      }
      seen.push_back(holder);
      frontier.emplace_back(holder, first_step != nullptr ? first_step : blocker);
    }
  }
  return {};
}

void ContextImpl::unlist_stuck_wait(const StuckWait& wait) noexcept {
  std::lock_guard lock(stuck_waits_mutex);
  unlist_locked(wait);
}

void ContextImpl::unlist_locked(const StuckWait& wait) noexcept {
  const auto listed = std::find(stuck_waits.begin(), stuck_waits.end(), &wait);
  if (listed == stuck_waits.end()) return;
  *listed = stuck_waits.back();
  stuck_waits.pop_back();
}

void ContextImpl::throw_waits_behind(const TaskRecord* suspended, const char* what) {
  const auto name = [](const TaskRecord* task) {
    return task != nullptr && task->name != nullptr ? task->name : "(unnamed)";
  };
  const TaskRecord* running = running_task_record();
  if (suspended != nullptr && suspended->kind == TaskKind::host_access) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("{} inside task '{}' would never return: it waits for {} (or for tasks "
                            "ordered after it), which this thread was waiting to be granted when it ran "
                            "'{}', and which cannot return, nor end, before '{}' returns; map outside the "
                            "tasks, or order the waiting task after the unmap instead",
                            what, name(running), describe_waited(*suspended), name(running), name(running)));
  }
  throw Error(ErrorCode::invalid_argument,
              fmt::format("{} inside task '{}' would never return: it waits for task '{}' (or for tasks "
                          "ordered after it), which this thread suspended in a wait of its own to run "
                          "'{}', and which cannot resume before '{}' returns; wait for it outside the "
                          "tasks, or order the waiting task after it (`after`, or its accesses) instead",
                          what, name(running), name(suspended), name(running), name(running)));
}

void ContextImpl::throw_waits_across(std::string_view elsewhere, const char* what) {
  const TaskRecord* running = running_task_record();
  const char* name = running != nullptr && running->name != nullptr ? running->name : "(unnamed)";
  throw Error(ErrorCode::invalid_argument,
              fmt::format("{}{} would never return: it waits for {} (or for tasks ordered after it), held "
                          "on another thread's stack below a wait that in turn waits, directly or through "
                          "other waits, for {} (the waits wait for each other); wait outside the tasks, or "
                          "order the waiting tasks after the work they wait for (`after`, or their "
                          "accesses) instead",
                          what, running != nullptr ? fmt::format(" inside task '{}'", name) : std::string(),
                          elsewhere,
                          running != nullptr ? fmt::format("a task held below '{}' on this thread", name)
                                             : std::string("this thread's map")));
}

void ContextImpl::report_root_errors() {
  std::vector<RootError> errors;
  std::uint64_t dropped = 0;
  {
    std::lock_guard lock(root_error_lock);
    errors = std::move(root_errors);
    root_errors.clear();
    dropped = std::exchange(root_errors_dropped, 0);
    if (++root_error_report == kept_root_error) root_error_report = 1;  // earlier drops no longer count
  }
  if (errors.empty() && dropped == 0) return;
  // One failure is rethrown; the others of the same wait are logged rather than lost (they are not
  // rethrown by a later wait: each failure is reported once).
  for (std::size_t i = 1; i < errors.size() && i <= logged_failures; ++i) {
    log::warn("another task failure, not rethrown by this wait: {}", what_of(errors[i].error));
  }
  const std::uint64_t unlisted =
      (errors.size() > logged_failures + 1 ? errors.size() - logged_failures - 1 : 0) + dropped;
  if (!errors.empty() && unlisted > 0) {
    log::warn("and {} more task failures, not rethrown by this wait{}", unlisted,
              dropped > 0 ? " (some of their errors were not kept)" : "");
  }
  if (!errors.empty()) std::rethrow_exception(errors.front().error);
  throw Error(ErrorCode::task_failed,
              fmt::format("{} tasks failed and nobody waited for them (their errors were not kept: more "
                          "than {} failures were pending)",
                          dropped, max_root_errors));
}

void ContextImpl::on_slot_idle() noexcept { wake_root_waiters(); }

// Every few submissions (throttle_intervals()) a thread checks the master deque's depth (an
// application thread) and, less often, the number of tasks in flight; above
// task_queue.per_device_queue_depth / task_queue.max_in_flight it runs tasks itself (if it can) or
// waits until the count drops.
void ContextImpl::throttle_slow(ThreadState& thread, const TaskRecord* submitted) {
  const ThrottleIntervals intervals = throttle_intervals();
  const std::uint64_t submitted_count = thread.submitted.load(std::memory_order_relaxed);
  const bool count_due = submitted_count >= thread.count_in_flight_at;
  if (count_due) thread.count_in_flight_at = submitted_count + intervals.in_flight + 1;
  // The next call comes when the count is due, or sooner for an application thread, which checks its
  // queue's depth too — also after it ran tasks in the master slot (chosen by the thread's role, not
  // by the slot it holds now). Set before relieve_master(), which runs tasks here: their submissions
  // count from it (they found the countdown wrapped round, and submitted unthrottled, when it was set
  // after).
  const std::uint64_t until_count = thread.count_in_flight_at - submitted_count - 1;
  thread.submissions_until_check = static_cast<std::uint32_t>(
      thread.is_worker_thread ? until_count : std::min<std::uint64_t>(intervals.depth, until_count));
  // Past its depth, a queue of fork-join spawns stops growing: the next ones run at once here (see
  // begin_spawn()), the workers taking the queued ones. Other tasks are run from the queue, and while
  // another thread holds slot 0 relieve_master() waits for the workers to take them. No task runs
  // here while this thread holds a mapping (may_help(), also for max_in_flight below): one that maps
  // the same data would be refused, where a queued one waits for the unmap.
  const bool helps = may_help(thread);
  if (helps) {
    // A spawn run at once would go before ready tasks of higher priority: those are run first, from
    // the queue.
    if (thread.spawned_last && thread.slot == nullptr && spawns_may_run_inline() && scheduler.master_free() &&
        scheduler.relieved_deque(thread).size() > scheduler.queue_depth() &&
        !scheduler.higher_priority_waiting()) {
      thread.spawns_inline = true;
    } else {
      scheduler.relieve_master(thread);
    }
  }
  if (!count_due) return;
  const auto limit = static_cast<std::int64_t>(config.task_queue.max_in_flight);
  const auto counted = [this] {
    return in_flight() - suspended_coroutine_records.load(std::memory_order_relaxed);
  };
  if (counted() < limit) return;
  // Inside a task the unfinished tasks may be this thread's own ancestors, waiting in the frames
  // below (nested fork-join): waiting for the count to fall would never end, and helping with any
  // task nests one stack frame chain in another without bound. The task just submitted runs here at
  // once instead, like an undeferred OpenMP task (the stack grows only as deep as the task tree);
  // if it is not at hand (stolen, queued elsewhere, waiting for predecessors) the submission goes on.
  // While over the bound it checks at every submission: checking only every interval-th, the
  // submissions in between piled up without limit (a producer inside a task went 4000x past it).
  if (running_task_record() != nullptr) {
    thread.count_in_flight_at = submitted_count + 1;  // due at the next submission
    thread.submissions_until_check = 0;
    if (helps) (void)scheduler.run_if_newest(thread, submitted);
    return;
  }
  SubmitterWaits::Notice waiting(submitter_waits);
  Clock::time_point idle_since{};  // since when this thread found nothing to help with
  while (counted() >= limit) {
    if (helps && scheduler.help_once(thread)) {
      idle_since = {};
      continue;
    }
    // The tasks are running or waiting elsewhere. If they may wait for a mapping this thread holds,
    // waiting for them here would never end: the submission goes on past the bound.
    // Nor once the context is shut down: nothing will run them (a late TaskGroup submission).
    if (!helps || shut_down.load(std::memory_order_acquire)) return;
    waiting.begin();  // nothing more comes from this thread for a while: batched work may leave now
    const Clock::time_point now = Clock::now();
    if (idle_since == Clock::time_point{}) idle_since = now;
    // Once in the context's life: a program whose tasks are that long would hear it at every wait.
    if (now - idle_since >= stalled_submission_warning && !stalled_submission_warned.exchange(true))
      warn_stalled_submission(counted(), limit);
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

// A submitter held back for long says why (once per context): the tasks it waits for may be waiting for
// what never comes — a mapping held by a thread that itself waits for this one (another thread
// cannot see that cycle: the holder is outside nerve, in a join or a lock).
void ContextImpl::warn_stalled_submission(std::int64_t in_flight, std::int64_t limit) const noexcept {
  const std::size_t mappings = held_mapping_count.load(std::memory_order_relaxed);
  try {
    log::warn(
        "a submission has waited {} ms for the {} tasks in flight to drop below "
        "task_queue.max_in_flight ({}) and still waits{} (said once per context)",
        stalled_submission_warning.count(), in_flight, limit,
        mappings == 0
            ? std::string(": they are running, or waiting for other tasks or devices")
            : fmt::format("; {} buffer mapping{} held: tasks waiting for an unmap count until it comes "
                          "(a thread holding a mapping while it waits for this one never unmaps it)",
                          mappings, mappings == 1 ? " is" : "s are"));
  } catch (...) {  // out of memory for the message: the submission goes on waiting, unannounced
  }
}

void ContextImpl::record_root_error(TaskRecord& task) noexcept {
  std::lock_guard lock(root_error_lock);
  // A ticket no entry has (31 bits wrap only after that many failures kept; never two alike).
  const auto taken = [this](std::uint32_t candidate) {
    return std::any_of(root_errors.begin(), root_errors.end(),
                       [candidate](const RootError& kept) { return kept.ticket == candidate; });
  };
  do {
    root_error_tickets = (root_error_tickets + 1) & (kept_root_error - 1);
  } while (root_error_tickets == 0 || taken(root_error_tickets));
  const std::uint32_t dropped_in = keep_root_error_locked(task.error, root_error_tickets);
  task.root_error_note = dropped_in == 0 ? (kept_root_error | root_error_tickets) : dropped_in;
}

std::uint32_t ContextImpl::keep_root_error(const std::exception_ptr& error) noexcept {
  std::lock_guard lock(root_error_lock);
  return keep_root_error_locked(error, 0);
}

std::uint32_t ContextImpl::keep_root_error_locked(const std::exception_ptr& error,
                                                  std::uint32_t ticket) noexcept {
  if (root_errors.size() < max_root_errors) {
    try {
      root_errors.push_back({ticket, error});
      return 0;
    } catch (...) {  // out of memory: counted like one over the cap
    }
  }
  ++root_errors_dropped;
  return root_error_report;
}

void ContextImpl::forget_root_error(TaskRecord& task) noexcept {
  std::lock_guard lock(root_error_lock);
  const std::uint32_t note =
      std::exchange(task.root_error_note, 0);  // a second wait() takes nothing more off
  if ((note & kept_root_error) != 0) {
    const std::uint32_t ticket = note & ~kept_root_error;
    const auto it = std::find_if(root_errors.begin(), root_errors.end(),
                                 [ticket](const RootError& kept) { return kept.ticket == ticket; });
    if (it != root_errors.end()) root_errors.erase(it);  // else reported by a wait_all() already
  } else if (note != 0 && note == root_error_report && root_errors_dropped > 0) {
    --root_errors_dropped;  // counted for the report still to come: it is no longer pending
  }
}

}  // namespace nerve::detail
