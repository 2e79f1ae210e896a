// api.cpp — the exported entry points behind the public C++ headers.
#include <chrono>
#include <cstdlib>

#include <fmt/format.h>

#include "nerve/context.hpp"
#include "nerve/error.hpp"

#include "memory/buffer_state.hpp"
#include "perf/stats.hpp"
#include "runtime/context_impl.hpp"
#include "runtime/failure_log.hpp"
#include "runtime/pool_state.hpp"
#include "runtime/waitables.hpp"
#include "task/task_graph.hpp"
#include "util/exception_text.hpp"
#include "util/log.hpp"

namespace nerve {
namespace detail {
namespace {

Clock::time_point deadline_after(std::int64_t timeout_ns) {
  const Clock::time_point now = Clock::now();
  // A timeout past the clock's range (timeout_ns() saturates at int64 max) means no limit.
  if (timeout_ns < 0 || std::chrono::nanoseconds(timeout_ns) >= Clock::time_point::max() - now) {
    return Clock::time_point::max();
  }
  return now + std::chrono::nanoseconds(timeout_ns);
}

// The task a wait for one Task waits for.
struct TheTask {
  const TaskRecord* record;
  bool operator()(const TaskRecord* task) const noexcept { return task == record; }
  bool may_be_ordered() const noexcept { return may_be_ordered_now(*record); }
};

}  // namespace

ContextImpl* context_impl(Context& context) noexcept { return context.impl(); }

void throw_moved_from_context() {
  throw Error(ErrorCode::invalid_argument, "use of a moved-from nerve::Context (it has no runtime any more)");
}

TaskDraft begin_task(ContextImpl* context, std::size_t closure_size, std::size_t closure_align) {
  return live(context).begin_task(closure_size, closure_align);
}
void abandon_task(ContextImpl* context, TaskDraft draft) noexcept { context->abandon_task(draft); }
TaskDraft begin_spawn(ContextImpl* context, std::size_t closure_size, std::size_t closure_align) {
  return live(context).begin_spawn(closure_size, closure_align);
}
void run_spawn_inline(ContextImpl* context, void (*body)(void*), void* closure) noexcept {
  context->run_spawn_inline(body, closure);
}
void abandon_spawn(ContextImpl* context) noexcept { context->abandon_spawn(); }
TaskRecord* commit_task(ContextImpl* context, TaskDraft draft, const SubmitInfo& info) {
  return context->commit_task(draft, info);
}

void retain(TaskRecord* record) noexcept { retain_record(record); }
void release(TaskRecord* record) noexcept { record->context->release_task(record); }

void retain_handle(TaskRecord* record) noexcept {
  retain_record(record);
  record->context->add_external_reference();
}

void release_handle(TaskRecord* record) noexcept {
  ContextImpl* context = record->context;
  context->release_task(record);
  context->drop_external_reference();
}

int task_status(const TaskRecord* record) noexcept {
  const std::uint32_t status = record->load_status();
  if (status >= status_succeeded) return static_cast<int>(status);
  return record->phase.load(std::memory_order_relaxed);
}

bool task_wait(TaskRecord* record, std::int64_t timeout_ns) {
  ContextImpl& context = *record->context;
  TaskDone target{record};
  if (!target.done()) context.refuse_deep_nesting(context.current_thread(), "Task::wait()");
  const TheTask blocked{record};
  // A timeout past the clock's range is no limit: that wait_for() is wait(), refusals included.
  const Clock::time_point deadline = deadline_after(timeout_ns);
  if (deadline == Clock::time_point::max()) {
    const char* name = record->name != nullptr ? record->name : "(unnamed)";
    if (!target.done()) context.refuse_endless_wait(blocked, "Task::wait()", name);
    UnlessSuspended untimed{target, blocked};
    // A coroutine's Task gains work to wait for as the coroutine goes on (a stretch may await a task
    // that waits for a mapping this thread holds), so the check is repeated while a mapping is held.
    if (!context.wait_rechecking(context.current_thread(), untimed,
                                 [&] { context.refuse_own_mapping_wait(blocked, "Task::wait()", name); }))
      untimed.throw_hopeless("Task::wait()");
  } else if (!context.scheduler.wait(context.current_thread(), target, deadline)) {
    return false;
  }
  switch (record->load_status()) {
    case status_failed:
      context.forget_root_error(*record);  // reported here: wait_all() does not report it again
      std::rethrow_exception(record->error);
    case status_cancelled: std::rethrow_exception(cancellation_error(record));
    default: return true;
  }
}

std::exception_ptr task_error(const TaskRecord* record) noexcept {
  switch (record->load_status()) {
    case status_failed: return record->error;
    case status_cancelled: try { return cancellation_error(record);
      } catch (...) {
        return std::current_exception();
      }
    default: return nullptr;
  }
}

static void rethrow_group_error(GroupState* group) {
  if (std::exception_ptr error = group->first_error.take()) {
    if (!group->quiet_failures) log_unlisted_failures(group->first_error, "task group");
    std::rethrow_exception(error);
  }
}

ThreadState* context_retain(ContextImpl* context) noexcept {
  return context != nullptr ? context->retain_sharded() : nullptr;
}
void context_release(ContextImpl* context, ThreadState* shard) noexcept {
  if (context != nullptr) context->release_sharded(shard);
}
void require_context(const ContextImpl* context) {
  if (context == nullptr) throw_moved_from_context();
}

namespace {

// A group's wait ends when its count is zero; then a cancel() stops applying (cancel_requested
// covers the tasks submitted before the wait returned).
void end_cancel(GroupState* group) noexcept {
  if (group->cancel_requested.load(std::memory_order_relaxed))  // no write on the usual fork-join wait
    group->cancel_requested.store(false, std::memory_order_release);
}

void group_done(GroupState* group) {
  end_cancel(group);
  rethrow_group_error(group);
}

// The tasks a wait for `group` waits for.
struct GroupMember {
  const GroupState* group;
  bool operator()(const TaskRecord* task) const noexcept { return task->group == group; }
  bool may_be_ordered() const noexcept { return group->ordered_members.load(std::memory_order_acquire) != 0; }
};
GroupMember group_member(const GroupState* group) noexcept { return GroupMember{group}; }

void refuse_group_deadlock(ContextImpl& context, GroupState* group) {
  context.refuse_endless_wait(group_member(group), "TaskGroup::wait()");
}

void check_pool_context(const PoolState* pool) {
  if (pool->context.shut_down && !pool->launched) {
    throw Error(ErrorCode::invalid_argument, "launch of a task pool whose context has been destroyed");
  }
}

}  // namespace

void group_wait(ContextImpl* context, GroupState* group) {
  ContextImpl& runtime = live(context);
  GroupDone target{group};
  if (!target.done()) {
    ThreadState& thread = runtime.current_thread();
    runtime.refuse_deep_nesting(thread, "TaskGroup::wait()");
    refuse_group_deadlock(runtime, group);
    UnlessSuspended untimed{target, group_member(group)};
    if (!runtime.wait_rechecking(thread, untimed, [&] { refuse_group_deadlock(runtime, group); }))
      untimed.throw_hopeless("TaskGroup::wait()");
  }
  group_done(group);
}

bool group_wait_for(ContextImpl* context, GroupState* group, std::int64_t timeout_ns) {
  const Clock::time_point deadline = deadline_after(timeout_ns);
  if (deadline == Clock::time_point::max()) {  // no limit: wait(), refusals included
    group_wait(context, group);
    return true;
  }
  ContextImpl& runtime = live(context);
  GroupDone target{group};
  if (!target.done()) runtime.refuse_deep_nesting(runtime.current_thread(), "TaskGroup::wait_for()");
  if (!runtime.scheduler.wait(runtime.current_thread(), target, deadline)) return false;
  group_done(group);
  return true;
}

void group_destroy(ContextImpl* context, GroupState* group) noexcept {
  if (context == nullptr) return;  // a moved-from Context's group never had a task
  if ((group->pending.load(std::memory_order_acquire) & GroupState::count_mask) != 0) {
    if (context->forked_child()) return;  // the parent's tasks are not this process's to wait for
    try {
      refuse_group_deadlock(*context, group);
      bool ended = true;
      UnlessSuspended target{GroupDone{group}, group_member(group)};
      target.give_up_last();  // its failure is fatal: another wait of a cycle refuses first
      try {
        ended = context->scheduler.wait(context->current_thread(), target);
      } catch (...) {
      }
      if (!ended) target.throw_hopeless("TaskGroup::wait()");
    } catch (const std::exception& error) {
      // A wait that could never end (refused before, or found hopeless): the group lives on the
      // destroying thread's stack and its tasks will use it, so neither returning nor waiting is possible.
      log::error("~TaskGroup: {}; the program cannot continue", error.what());
      std::abort();
    }
    end_cancel(group);
  }
  // A parallel loop's group: its loop reports the body's exceptions itself (one rethrown, the others
  // counted), also when it waits here while unwinding (parallel.hpp).
  if (group->quiet_failures) {
    (void)group->first_error.take();
  } else {
    log_unreported_failure(group->first_error, "task group");
  }
}

PoolState* pool_create(ContextImpl* context, std::size_t expected_tasks) {
  auto* pool = new PoolState(live(context));
  // A hint: the members grow past it, and a huge one must not become a huge (or impossible) reserve.
  constexpr std::size_t max_reserved_members = std::size_t{1} << 16;
  pool->members.reserve(std::min(expected_tasks, max_reserved_members));
  context->add_external_reference();  // the pool may outlive the Context object
  context->free_detached_pools();
  return pool;
}

void pool_launch(PoolState* pool) {
  check_pool_context(pool);
  pool->launch();
}

namespace {
// The tasks a wait for `pool` waits for.
auto pool_member(const PoolState* pool) noexcept {
  return [pool](const TaskRecord* task) { return task->pool == pool; };
}

// The errors of a wait for `pool` that could never end; `what` names the wait.
void refuse_endless_pool_wait(PoolState* pool, const char* what) {
  if (TaskDone{pool->gate}.done()) return;
  pool->context.refuse_endless_wait(pool_member(pool), what);
}
}  // namespace

void pool_check_wait(PoolState* pool, const char* what) { refuse_endless_pool_wait(pool, what); }

void pool_wait(PoolState* pool) {
  pool_wait_ended(pool, "TaskPool::wait_all()");
  pool_report(pool);
}

void pool_wait_ended(PoolState* pool, const char* what) {
  check_pool_context(pool);
  pool->launch();
  ContextImpl& context = pool->context;
  context.refuse_deep_nesting(context.current_thread(), what);
  pool_check_wait(pool, what);
  ThreadState& thread = context.current_thread();
  UnlessSuspended target{TaskDone{pool->gate}, pool_member(pool)};
  if (!context.scheduler.wait(thread, target)) target.throw_hopeless(what);
}

void pool_report(PoolState* pool) {
  // Both taken: a later wait_all() returns quietly.
  const std::exception_ptr cancellation = pool->first_cancellation.take();
  if (std::exception_ptr error = pool->first_error.take()) {
    log_unlisted_failures(pool->first_error, "task pool");
    std::rethrow_exception(error);
  }
  if (cancellation != nullptr) std::rethrow_exception(cancellation);
}

void pool_destroy_checked(PoolState* pool) {
  if (pool == nullptr) return;
  ContextImpl& context = pool->context;
  if (context.forked_child()) return;  // as a group: left as it is in a forked child
  if (pool->launched) {
    try {
      refuse_endless_pool_wait(pool, "destroying a task pool");
      bool ended = true;
      UnlessSuspended target{TaskDone{pool->gate}, pool_member(pool)};
      try {
        ended = context.scheduler.wait(context.current_thread(), target);
      } catch (...) {
      }
      if (!ended) target.throw_hopeless("destroying a task pool");
    } catch (const Error& error) {  // a wait that could never end: refused before, or found hopeless
      context.detach_pool(pool);
      throw Error(error.code(), fmt::format("{}; the pool is detached instead: its tasks run when they can, "
                                            "and it is freed after them",
                                            error.what()));
    }
    // Nobody waited for the pool: its failure would go unseen (wait_all() does not report a pool's).
    log_unreported_failure(pool->first_error, "task pool");
  }
  free_pool(pool);
}

void pool_destroy(PoolState* pool) noexcept {
  try {
    pool_destroy_checked(pool);
  } catch (const std::exception& error) {
    log::error("~TaskPool: {}", error.what());
  }
}

std::size_t pool_size(const PoolState* pool) noexcept { return pool->members.size(); }
bool pool_launched(const PoolState* pool) noexcept { return pool->launched; }

void log_dropped_exceptions(const char* loop, std::uint64_t count) noexcept {
  try {
    log::warn("{}: {} more exception{} thrown by its body, not rethrown (it rethrows the first)", loop, count,
              count == 1 ? " was" : "s were");
  } catch (...) {  // out of memory for the message
  }
}

unsigned context_worker_count(const ContextImpl* context) noexcept {
  return context != nullptr ? context->scheduler.slot_count() : 1;
}

// Deterministic mode: a fixed number of pieces (that of 16 workers), so the halving tree — and
// with it a reduction's rounding — is the same on every machine and worker count.
std::size_t context_auto_pieces(const ContextImpl* context) noexcept {
  if (context == nullptr) return 1;  // a moved-from Context: submitting the pieces throws
  if (context->config.parallel.deterministic_mode) return deterministic_pieces;
  return 4 * static_cast<std::size_t>(context->scheduler.slot_count());
}

}  // namespace detail

// --- Context ---------------------------------------------------------------------------------------

Context::Context() : Context(Settings{}) {}

Context::Context(const Settings& settings) : impl_(new detail::ContextImpl(settings)) {}

Context::~Context() {
  if (impl_ != nullptr) impl_->release_owner();
}

Context::Context(Context&& other) noexcept : impl_(std::exchange(other.impl_, nullptr)) {}

Context& Context::operator=(Context&& other) noexcept {
  if (this != &other) {
    if (impl_ != nullptr) impl_->release_owner();
    impl_ = std::exchange(other.impl_, nullptr);
  }
  return *this;
}

void Context::wait_all() {
  detail::ContextImpl& context = detail::live(impl_);
  context.refuse_own_mapping_wait(detail::ContextImpl::waits_for_all, "wait_all()");
  context.wait_all();
}
unsigned Context::worker_count() const noexcept {
  return impl_ != nullptr ? impl_->scheduler.slot_count() : 0;
}
std::vector<DeviceInfo> Context::devices() const { return detail::live(impl_).device_infos(); }

const char* name(DeviceKind kind) noexcept {
  switch (kind) {
    case DeviceKind::cpu: return "cpu";
    case DeviceKind::test: return "test";
    case DeviceKind::opencl: return "opencl";
    case DeviceKind::cuda: return "cuda";
  }
  return "unknown";
}

int Context::current_worker() const noexcept {
  if (impl_ == nullptr) return -1;
  try {
    const detail::ThreadState& thread = impl_->current_thread();
    return thread.slot != nullptr ? static_cast<int>(thread.slot->index) : -1;
  } catch (...) {
    return -1;
  }
}

const Config& Context::config() const { return detail::live(impl_).config; }
const Topology& Context::topology() const { return detail::live(impl_).topology; }

}  // namespace nerve

namespace nerve {

ContextStats Context::stats() const { return detail::collect_stats(detail::live(impl_)); }
std::size_t Context::memory_compact() {
  std::size_t returned = 0;
  for (detail::MemoryNode* node : detail::live(impl_).memory_nodes()) returned += node->compact();
  return returned;
}
void Context::dump_perf_stats(const std::filesystem::path& path) const {
  detail::write_perf_stats(detail::live(impl_), path);
}

}  // namespace nerve
