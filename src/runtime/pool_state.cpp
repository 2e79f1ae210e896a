#include "runtime/pool_state.hpp"

#include <algorithm>
#include <map>

#include "nerve/error.hpp"

#include "memory/buffer_state.hpp"
#include "runtime/context_impl.hpp"
#include "task/task_graph.hpp"

namespace nerve::detail {

void PoolState::make_room() {
  if (launched) throw Error(ErrorCode::invalid_argument, "task added to a task pool after launch()");
  if (members.size() == members.capacity()) members.reserve(members.size() * 2 + 16);
}

void PoolState::add(TaskRecord* member) noexcept {
  member->pool = this;
  members.push_back(member);  // make_room() made the room: no allocation
}

void PoolState::launch() {
  if (launched) return;
  ThreadState& thread = context.current_thread();
  // The gate's accesses: per buffer, the range covering all members' accesses and the union mode.
  std::map<BufferState*, AccessSpec> merged;
  for (TaskRecord* member : members) {
    for (std::size_t i = 0; i < member->access_count; ++i) {
      const AccessRecord& access = member->accesses[i];
      auto [it, inserted] = merged.try_emplace(
          access.buffer, AccessSpec{access.buffer, access.offset, access.size, access.mode});
      if (!inserted) {
        AccessSpec& spec = it->second;
        const std::size_t begin = std::min(spec.offset, access.offset);
        const std::size_t end = std::max(spec.offset + spec.size, access.offset + access.size);
        spec.offset = begin;
        spec.size = end - begin;
        spec.mode =
            static_cast<Access>(static_cast<unsigned>(spec.mode) | static_cast<unsigned>(access.mode));
      }
    }
  }
  std::vector<AccessSpec> specs;
  for (auto& entry : merged) specs.push_back(entry.second);
  release_list = std::make_unique<TaskRecord*[]>(members.size());
  std::copy(members.begin(), members.end(), release_list.get());
  gate = context.allocate_record(thread);
  gate->kind = TaskKind::pool_gate;
  gate->pool = this;
  gate->name = "task pool";
  gate->refs.store(2, std::memory_order_relaxed);  // the runtime and the pool
  open_submission_guard(gate);
  std::size_t edges = 0;
  try {  // out of memory: the pool stays unlaunched, as it was (a gate's accesses count nowhere)
    context.copy_accesses(gate, specs.data(), specs.size());
    edges = context.register_dependencies(gate, thread, nullptr, 0);
  } catch (...) {
    context.abandon_task(TaskDraft{gate, gate->closure});  // its accesses go with it
    gate = nullptr;
    throw;
  }
  launched = true;
  thread.count_submitted();
  context.pool_gates_submitted.fetch_add(1, std::memory_order_release);  // after: stats read it first
  for (std::size_t i = 0; i < members.size(); ++i) thread.count_submitted();
  if (close_submission_guard(gate, edges)) context.make_ready(gate, thread, true);
}

void PoolState::release_members(ThreadState& thread) {
  remaining.store(static_cast<std::int64_t>(members.size()), std::memory_order_release);
  if (members.empty()) {
    context.finish(gate, thread, status_succeeded);
    return;
  }
  const bool cancelled = gate->cancel_pending.load(std::memory_order_acquire);
  // Our own copy (made at launch): the last member to finish may finish the gate while we iterate.
  const std::unique_ptr<TaskRecord*[]> to_release = std::move(release_list);
  const std::size_t count = members.size();
  for (std::size_t i = 0; i < count; ++i) {
    TaskRecord* member = to_release[i];
    if (cancelled) mark_cancelled(member);
    member->pending.store(0, std::memory_order_relaxed);
    context.make_ready(member, thread, false);
  }
}

void PoolState::mark_cancelled(TaskRecord* member) noexcept {
  member->error = gate->error;
  member->cancel_pending.store(true, std::memory_order_release);
}

void PoolState::record_error(const std::exception_ptr& error) noexcept {
  if (!has_error.exchange(true, std::memory_order_acq_rel)) first_error = error;
}

void PoolState::member_finished(TaskRecord* /*member*/, ThreadState& thread) {
  if (remaining.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  if (has_error.load(std::memory_order_acquire)) {
    gate->error = first_error;
    context.finish(gate, thread, status_failed);
  } else {
    context.finish(gate, thread, status_succeeded);
  }
}

void free_pool(PoolState* pool) noexcept {
  ContextImpl& context = pool->context;
  if (pool->launched) {
    context.release_task(pool->gate);
  } else {
    pool->discard();
  }
  delete pool;
  context.drop_external_reference();
}

void PoolState::discard() noexcept {
  for (TaskRecord* member : members) {
    void* closure = member->closure_storage();
    member->ops->destroy(closure);
    member->free_heap_closure();
    for (std::size_t i = 0; i < member->access_count; ++i) retire_task_access(member->accesses[i].buffer);
    member->access_count = 0;
    context.release_task(member);
  }
  members.clear();
}

}  // namespace nerve::detail
