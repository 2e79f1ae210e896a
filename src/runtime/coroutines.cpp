// coroutines.cpp — the runtime side of coroutine tasks (include/nerve/coroutine.hpp).
//
// A launched coroutine is not one task record that pauses: each stretch it runs between two
// suspensions is an ordinary task (its continuation), so a suspended coroutine holds no worker and
// no stack. What the program sees as the coroutine's Task is a separate record that is never
// scheduled: it is counted as submitted when the coroutine is launched and finished when the
// coroutine returns or throws, so wait_all(), groups and Task::wait() treat it like any task.
#include <algorithm>
#include <coroutine>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <new>
#include <span>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "nerve/coroutine.hpp"
#include "nerve/error.hpp"
#include "nerve/task.hpp"

#include "runtime/context_impl.hpp"
#include "task/task_graph.hpp"
#include "util/log.hpp"

namespace nerve::detail {

constinit thread_local CoroutineStretch running_stretch __attribute__((tls_model("initial-exec")));

namespace {

// run_stretch() resumes the coroutine that runs for `root`, marking the calling thread's running
// task (the stretch) as that coroutine's for the wait checks meanwhile.
void run_stretch(void* coroutine, const TaskRecord* root) {
  const CoroutineStretch outer = running_stretch;
  // No root (a coroutine nerve did not launch): nothing to check against, the stretch is a plain task.
  running_stretch = {root != nullptr ? running_task_record() : nullptr, root};
  std::coroutine_handle<>::from_address(coroutine).resume();  // never throws: the promise keeps it
  running_stretch = outer;
}

// Suspended, a coroutine's records do not count against task_queue.max_in_flight
// (ContextImpl::suspended_coroutine_records): its continuation while it waits for its predecessor,
// counted in the continuation's context, and its Task, in the Task's.
constexpr std::uint8_t step_left_out = 1;
constexpr std::uint8_t root_left_out = 2;

void leave_out(ContextImpl& context, std::int64_t records) noexcept {
  context.suspended_coroutine_records.fetch_add(records, std::memory_order_relaxed);
}

// record_stretch_outcome(): with recording on, the running stretch's record says `outcome` (the
// coroutine's end in it), although the stretch task itself succeeds.
void record_stretch_outcome(ContextImpl& context, std::uint32_t outcome) noexcept {
  if (!context.times_tasks) return;
  if (MonitoredRun* run = context.current_thread().perf_run;
      run != nullptr && run->task == running_task_record())
    run->coroutine_outcome = outcome;
}

struct Resume {
  void* coroutine;
  const TaskRecord* root;     // null: a coroutine nerve did not launch (no Task to check against)
  std::uint8_t left_out = 0;  // which records were left out of the count while it was suspended
  void operator()() const {
    count_again();
    run_stretch(coroutine, root);
  }
  // count_again(): resumed, the coroutine's records count again (before it runs: it may end its Task,
  // and with it its context).
  void count_again() const noexcept {
    if ((left_out & step_left_out) != 0) leave_out(*running_task_record()->context, -1);
    if ((left_out & root_left_out) != 0) leave_out(*root->context, -1);
  }
};

// The first stretch of a launched coroutine: a task like any other of its group, it does not start
// once the group (or the coroutine's Task) is cancelled; the coroutine is then destroyed unrun and
// its Task finishes cancelled.
struct Start {
  void* coroutine;
  TaskRecord* launched;
  void operator()() const {
    const bool cancelled =
        launched->cancel_pending.load(std::memory_order_acquire) ||
        (launched->group != nullptr && launched->group->cancel_requested.load(std::memory_order_acquire));
    if (!cancelled) {
      run_stretch(coroutine, launched);
      return;
    }
    std::coroutine_handle<>::from_address(coroutine).destroy();
    ContextImpl& context = *launched->context;
    record_stretch_outcome(context, status_cancelled);  // it never ran: not a stretch that succeeded
    context.finish(launched, context.current_thread(), status_cancelled);
  }
};

// A launched coroutine's Task record is never scheduled: its closure bytes hold what the coroutine
// awaits (its AwaitSlot), so that a cycle check can follow awaits downwards, from the awaited Task
// to what that one awaits (known_not_to_wait_for()). Only the coroutine itself writes its slot (its
// awaits, its end), under its context's coroutine_awaits_mutex; checks read it under that mutex.
struct AwaitSlot {
  // The Task of its last co_await on a Task, held as a handle (released at the next await or at its
  // end): while that Task is unfinished, the coroutine is suspended behind it.
  TaskRecord* awaited = nullptr;
  bool parked = false;  // since its last co_await on a TaskGroup: what it waits for is not listed
};
static_assert(sizeof(AwaitSlot) <= inline_closure_bytes);

void never_invoked(void* /*closure*/, const AccessView* /*views*/) { std::abort(); }
void nothing_to_destroy(void* /*closure*/) noexcept {}
const ClosureOps coroutine_task_ops{&never_invoked, &nothing_to_destroy};

AwaitSlot& await_slot(const TaskRecord& task) noexcept {
  // The slot is the coroutine's state, not the record's: written through a const record too.
  auto* closure = const_cast<std::byte*>(task.closure);
  return *std::launder(reinterpret_cast<AwaitSlot*>(closure));
}

// known_not_to_wait_for(): true when `task` is known not to wait for `root` (the Task of a coroutine
// of `home` about to await `task`), found by following what it waits for downwards: a coroutine's
// Task waits for what its slot says, an ordinary task with no unfinished predecessor for nothing.
// False when it does, or when the walk cannot tell (an ordinary task's predecessors are not
// recorded, a parked coroutine's group not listed, another context's slots not guarded by the
// caller's lock): the walk upwards from `root` then decides. Without it, a chain of coroutines each
// awaiting the next one's Task walked the whole chain above each await (quadratic in its depth),
// where the chain below the awaited one is short: it is the part just launched. Called with
// home.coroutine_awaits_mutex held: no slot of `home` changes meanwhile, and each Task it reaches
// is held by the slot it was found in (the first by the awaiter).
bool known_not_to_wait_for(const TaskRecord* task, const TaskRecord* root, const ContextImpl& home) {
  constexpr int max_steps = 4096;
  for (int step = 0; step < max_steps; ++step) {
    if (task == root) return false;
    if (task->finished()) return true;
    if (task->ops != &coroutine_task_ops) {
      return task->kind == TaskKind::function && task->pool == nullptr &&
             task->pending.load(std::memory_order_acquire) == 0;
    }
    if (task->context != &home) return false;
    const AwaitSlot& slot = await_slot(*task);
    if (slot.parked) return false;
    // Not started, or running: a coroutine waits for nothing but what it is suspended behind.
    if (slot.awaited == nullptr) return true;
    task = slot.awaited;
  }
  return false;
}

// Each stretch is named after its launched coroutine: the trace and the stats show the coroutine's
// work under the name launch() was given.
const char* step_name(const TaskRecord* root) noexcept {
  return root != nullptr && root->name != nullptr ? root->name : "coroutine";
}

template <class Step>
void submit_step(ContextImpl* context, Step step, TaskRecord* after, const char* name) {
  TaskDraft draft = context->begin_task(sizeof(Closure<Step>), alignof(Closure<Step>), false);
  ::new (draft.closure) Closure<Step>{step};
  SubmitInfo info{};
  info.ops = &Closure<Step>::ops;
  info.name = name;
  info.after = &after;
  info.after_count = after != nullptr ? 1 : 0;
  info.after_consumes = false;  // the coroutine resumes and sees the failure itself
  commit_task(context, draft, info);
}

// refuse_awaits_that_wait_for_themselves(): Error(invalid_argument) when the launched coroutine whose
// Task is `root` awaits that very Task (`task`), or the TaskGroup (`group`) it was launched into, or
// something that waits for its Task: ordered after it, or through other coroutines that await it
// (`announced`: awaits between their check and their suspension). Called with the context's
// coroutine_awaits_mutex held.
void refuse_awaits_that_wait_for_themselves(const TaskRecord* root, const TaskRecord* task,
                                            const GroupState* group,
                                            std::span<const ContextImpl::AnnouncedAwait> announced) {
  const char* name = root->name != nullptr ? root->name : "(unnamed)";
  if (task == root) {
    throw Error(
        ErrorCode::invalid_argument,
        fmt::format("co_await of the own Task of coroutine '{}' inside it would wait for itself", name));
  }
  if (group != nullptr && root->group == group) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("co_await of the TaskGroup coroutine '{}' was launched into would wait for "
                            "itself (it is one of the group's tasks)",
                            name));
  }
  // Nothing waits for the coroutine's Task (the usual case): no walk, no std::function.
  if (!ContextImpl::may_be_waited_for(*root, announced)) return;
  if (task != nullptr && known_not_to_wait_for(task, root, *root->context)) return;
  // A group none of whose unfinished members can be ordered behind a task: the walk cannot meet one.
  if (task == nullptr && (group == nullptr || group->ordered_members.load(std::memory_order_acquire) == 0))
    return;
  const auto awaited = [&](const TaskRecord* candidate) {
    return candidate != root && (candidate == task || (group != nullptr && candidate->group == group));
  };
  bool through_coroutine = false;
  const TaskRecord* waited = ContextImpl::first_waiting_for(root, awaited, announced, &through_coroutine);
  if (waited == nullptr) return;
  const char* what = task != nullptr ? "a Task" : "a TaskGroup";
  const char* waited_name = waited->name != nullptr ? waited->name : "(unnamed)";
  if (through_coroutine) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("co_await of {} inside coroutine '{}' would never resume: task '{}' waits for "
                            "the coroutine to end, through other coroutines that await its Task (or "
                            "work ordered after it) while it awaits theirs (the awaits wait for each other)",
                            what, name, waited_name));
  }
  throw Error(ErrorCode::invalid_argument,
              fmt::format("co_await of {} inside coroutine '{}' would never resume: task '{}' is ordered "
                          "after the coroutine's own Task (by its accesses or `after`), so it cannot "
                          "start before the coroutine ends",
                          what, name, waited_name));
}

}  // namespace

TaskRecord* coroutine_task_create(ContextImpl* context, const char* name, GroupState* group) {
  if (live(context).shut_down)
    throw Error(
        ErrorCode::invalid_argument,
        fmt::format("coroutine '{}' launched in a context that has been destroyed (a TaskGroup outlived it)",
                    name != nullptr ? name : "coroutine"));
  ThreadState& thread = context->current_thread();
  TaskRecord* task = context->allocate_record(thread);
  // Unnamed, it stays so in messages ("a task it depends on failed"); its stretches are still named
  // "coroutine" in the trace and the stats (step_name()).
  task->name = name;
  task->group = group;
  task->ops = &coroutine_task_ops;
  ::new (static_cast<void*>(task->closure)) AwaitSlot{};
  task->phase.store(status_running, std::memory_order_relaxed);
  task->status.store(status_running, std::memory_order_relaxed);
  task->refs.store(2, std::memory_order_relaxed);  // the runtime's (until finished) and the handle's
  context->add_external_reference();               // the handle's, as for any Task
  if (group != nullptr) {
    group->ordered_members.fetch_add(1, std::memory_order_relaxed);  // may_be_ordered(*task)
    group->pending.fetch_add(1, std::memory_order_relaxed);
  }
  thread.count_submitted();
  return task;
}

void coroutine_task_finish(TaskRecord* record, std::exception_ptr error) noexcept {
  ContextImpl& context = *record->context;
  // Recording: the stretch the exception escaped from is the coroutine's failed work (the records
  // and the trace have no entry for the coroutine's Task itself).
  if (error != nullptr) record_stretch_outcome(context, status_failed);
  // What it awaited last is released: nothing follows its slot once it has finished.
  AwaitSlot& slot = await_slot(*record);
  if (slot.awaited != nullptr || slot.parked) {  // its own writes: read without the lock
    TaskRecord* awaited = nullptr;
    {
      std::lock_guard lock(context.coroutine_awaits_mutex);
      awaited = std::exchange(slot.awaited, nullptr);
      slot.parked = false;
    }
    if (awaited != nullptr) release_handle(awaited);
  }
  record->error = std::move(error);
  context.finish(record, context.current_thread(),
                 record->error != nullptr ? status_failed : status_succeeded);
}

// suspend_behind(): the coroutine's continuation, ordered after `after`, its records left out of the
// count from now on. Left out before the submission, while both contexts are surely alive: once
// submitted, the continuation may run at once, end the coroutine, and let its context go.
void suspend_behind(ContextImpl* context, void* coroutine, TaskRecord* after, const TaskRecord* root) {
  const bool waits = after != nullptr;
  const std::uint8_t left_out = (waits ? step_left_out : 0) | (waits && root != nullptr ? root_left_out : 0);
  const auto leave = [&](std::int64_t records) {
    if ((left_out & step_left_out) != 0) leave_out(*context, records);
    if ((left_out & root_left_out) != 0) leave_out(*root->context, records);
  };
  leave(1);
  try {
    submit_step(context, Resume{coroutine, root, left_out}, after, step_name(root));
  } catch (...) {
    leave(-1);  // not suspended after all: the await throws
    throw;
  }
}

void resume_coroutine(ContextImpl* context, void* coroutine, TaskRecord* after, const TaskRecord* root) {
  if (root == nullptr || after == nullptr) {
    suspend_behind(context, coroutine, after, root);
    return;
  }
  // The check and the continuation's registration cannot share one critical section (a submission
  // may run other tasks under back-pressure, which may await), so the await is announced from the
  // check until its continuation is registered: two awaits closing one cycle at once see each other.
  // Both records are held meanwhile, as handles (with their contexts): once registered, the
  // continuation may run and the coroutine end, and its context be destroyed, before the
  // announcement is withdrawn; a recycled record must not inherit the announcement. (A finished one
  // is harmless: the walks reach only unfinished tasks through it.)
  ContextImpl& home = *root->context;
  auto* awaiting = const_cast<TaskRecord*>(root);  // its counts only
  TaskRecord* awaited_before = nullptr;
  {
    std::lock_guard lock(home.coroutine_awaits_mutex);
    refuse_awaits_that_wait_for_themselves(root, after, nullptr, home.announced_awaits);
    home.announced_awaits.push_back({root, after});
    retain_handle(awaiting);
    retain_handle(after);  // the announcement's: a recycled record must not inherit it
    retain_handle(after);  // the slot's, until the coroutine's next await or its end
    AwaitSlot& slot = await_slot(*root);
    awaited_before = std::exchange(slot.awaited, after);
    slot.parked = false;
  }
  if (awaited_before != nullptr) release_handle(awaited_before);
  struct Withdraw {
    ContextImpl& home;
    TaskRecord* root;
    TaskRecord* target;
    bool suspended = false;
    ~Withdraw() {
      TaskRecord* not_awaited = nullptr;
      {
        std::lock_guard lock(home.coroutine_awaits_mutex);
        auto& list = home.announced_awaits;
        const auto it =
            std::find_if(list.begin(), list.end(), [&](const ContextImpl::AnnouncedAwait& listed) {
              return listed.root == root && listed.target == target;
            });
        if (it != list.end()) {
          *it = list.back();
          list.pop_back();
        }
        // Not suspended after all (the await throws): the coroutine runs on, behind nothing. (Once
        // suspended, the slot is no longer this await's: the coroutine may have resumed already.)
        if (!suspended) not_awaited = std::exchange(await_slot(*root).awaited, nullptr);
      }
      if (not_awaited != nullptr) release_handle(not_awaited);
      release_handle(target);
      release_handle(root);  // last: it may end `home`
    }
  } withdraw{home, awaiting, after};
  suspend_behind(context, coroutine, after, root);
  withdraw.suspended = true;
}

void start_coroutine(ContextImpl* context, void* coroutine, TaskRecord* launched) {
  submit_step(context, Start{coroutine, launched}, nullptr, step_name(launched));
}

void ContextImpl::resume_group_continuation(void* coroutine, const TaskRecord* root) noexcept {
  // Its Task was left out of the count while it was parked (group_suspend()).
  const Resume resume{coroutine, root, root != nullptr ? root_left_out : std::uint8_t{0}};
  try {
    submit_step(this, resume, nullptr, step_name(root));
  } catch (const std::exception& error) {
    // No record for a continuation task (out of memory, context shutting down): resume here rather
    // than lose the coroutine; it runs on this thread's stack before the finish completes.
    log::warn("coroutine resumed inline: {}", error.what());
    if (root != nullptr) leave_out(*root->context, -1);
    run_stretch(coroutine, root);
  }
}

namespace {

bool park_in_group(GroupState* group, void* coroutine, const TaskRecord* root) {
  void* expected = nullptr;
  // The completer reads the root after seeing the parked bit (acquire) and taking the continuation.
  if (!group->continuation.compare_exchange_strong(expected, coroutine, std::memory_order_acq_rel)) {
    throw Error(ErrorCode::invalid_argument, "co_await on a TaskGroup another coroutine already awaits");
  }
  // The completer that took the previous awaiter's continuation clears its bit right after
  // (finish_group_member()): the bit must be this awaiter's alone when it is added.
  while ((group->pending.load(std::memory_order_acquire) & GroupState::coroutine_parked) != 0)
    std::this_thread::yield();
  // Only the parked coroutine writes it, before the parked bit that entitles a completer to read it
  // (written before the CAS, a refused awaiter could overwrite the parked one's root meanwhile).
  group->continuation_root.store(root, std::memory_order_relaxed);
  const std::int64_t before =
      group->pending.fetch_add(GroupState::coroutine_parked, std::memory_order_acq_rel);
  if ((before & GroupState::count_mask) != 0) return true;  // the last task to finish resumes it
  // Already empty: no completer will look. Take the continuation back unless one just did.
  if (group->continuation.exchange(nullptr, std::memory_order_acq_rel) == nullptr) return true;
  group->pending.fetch_sub(GroupState::coroutine_parked, std::memory_order_acq_rel);
  return false;
}

}  // namespace

bool group_suspend(GroupState* group, void* coroutine, const TaskRecord* root) {
  if (root == nullptr) return park_in_group(group, coroutine, nullptr);
  // Parking registers nothing that could run tasks: the check and the park share one critical section.
  // Its Task is held, with its context, until the lock is let go: once parked, the coroutine may
  // resume on another thread, end, and its context be destroyed.
  auto* awaiting = const_cast<TaskRecord*>(root);  // its counts only
  retain_handle(awaiting);
  // Handles let go after the lock (each may end its context), the coroutine's Task last.
  struct ReleasedAtExit {
    TaskRecord* record = nullptr;
    ~ReleasedAtExit() {
      if (record != nullptr) release_handle(record);
    }
  };
  const ReleasedAtExit release{awaiting};
  ContextImpl& home = *root->context;
  ReleasedAtExit awaited_before;
  std::lock_guard lock(home.coroutine_awaits_mutex);
  refuse_awaits_that_wait_for_themselves(root, nullptr, group, home.announced_awaits);
  // Written before the park publishes the coroutine (it may resume, and end, at once). It stays
  // `parked` until its next await, resumed or not parked at all: the walks then go upwards.
  AwaitSlot& slot = await_slot(*root);
  awaited_before.record = std::exchange(slot.awaited, nullptr);
  slot.parked = true;
  if (!park_in_group(group, coroutine, root)) return false;
  leave_out(home, 1);  // its Task, until resume_group_continuation()'s step runs
  return true;
}

// The completer clears the parked bit now (finish_group_member()); kept for programs built against
// a header that called it when the coroutine resumed.
void group_resumed(GroupState* /*group*/) noexcept {}

ContextImpl* task_context(const TaskRecord* record) noexcept { return record->context; }

const TaskRecord* coroutine_root_of(const TaskRecord& task) noexcept {
  // Steps are recognised by their closure type; their closures are inline (asserted here).
  static_assert(sizeof(Closure<Resume>) <= inline_closure_bytes &&
                sizeof(Closure<Start>) <= inline_closure_bytes);
  if (task.ops == &Closure<Resume>::ops)
    return static_cast<const Closure<Resume>*>(static_cast<const void*>(task.closure))->fn.root;
  if (task.ops == &Closure<Start>::ops)
    return static_cast<const Closure<Start>*>(static_cast<const void*>(task.closure))->fn.launched;
  return nullptr;
}

bool is_launched_coroutine(const TaskRecord& task) noexcept { return task.ops == &coroutine_task_ops; }

void ContextImpl::refuse_coroutine_endless_wait(const TaskRecord& root,
                                                const std::function<bool(const TaskRecord*)>& blocked,
                                                const char* what) {
  const TaskRecord* waited = first_waiting_for(&root, blocked);
  if (waited == nullptr) return;
  const char* name = root.name != nullptr ? root.name : "(unnamed)";
  if (waited == &root) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("{} inside coroutine '{}' would wait for that coroutine itself (its own Task, "
                            "or the TaskGroup it was launched into) and never return",
                            what, name));
  }
  throw_waits_for_dependent(root, *waited, what);
}

}  // namespace nerve::detail
