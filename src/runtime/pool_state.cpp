#include "runtime/pool_state.hpp"

#include <algorithm>
#include <cstdint>
#include <map>
#include <vector>

#include "nerve/error.hpp"

#include "memory/buffer_state.hpp"
#include "runtime/context_impl.hpp"
#include "task/task_graph.hpp"

namespace nerve::detail {

void PoolState::make_room() {
  if (launched.load(std::memory_order_acquire))
    throw Error(ErrorCode::invalid_argument, "task added to a task pool after launch()");
  if (members.size() == members.capacity()) members.reserve(members.size() * 2 + 16);
}

void PoolState::add(TaskRecord* member) noexcept {
  member->pool = this;
  members.push_back(member);  // make_room() made the room: no allocation
}

namespace {

// A buffer's pieces past this fold into the range covering them: the gate is one record, whose
// accesses are counted in 16 bits, and each piece is one access to register.
constexpr std::size_t max_pieces_per_buffer = 1024;

Access mode_of(unsigned bits) noexcept { return static_cast<Access>(bits); }

// append_union(): `accesses` of one buffer as disjoint pieces (sorted, adjacent pieces of one mode
// joined), each read and/or written as the accesses covering it are.
void append_union(BufferState* buffer, const std::vector<const AccessRecord*>& accesses,
                  std::vector<AccessSpec>& specs) {
  std::vector<std::size_t> bounds;
  bounds.reserve(2 * accesses.size());
  for (const AccessRecord* access : accesses) {
    bounds.push_back(access->offset);
    bounds.push_back(access->offset + access->size);
  }
  std::sort(bounds.begin(), bounds.end());
  bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
  // Readers and writers covering each elementary interval [bounds[k], bounds[k + 1]), by differences.
  std::vector<std::int64_t> readers(bounds.size(), 0), writers(bounds.size(), 0);
  const auto index_of = [&](std::size_t position) {
    return static_cast<std::size_t>(std::lower_bound(bounds.begin(), bounds.end(), position) -
                                    bounds.begin());
  };
  for (const AccessRecord* access : accesses) {
    const std::size_t first = index_of(access->offset), last = index_of(access->offset + access->size);
    const auto mode = static_cast<unsigned>(access->mode);
    if ((mode & static_cast<unsigned>(Access::read)) != 0) ++readers[first], --readers[last];
    if ((mode & static_cast<unsigned>(Access::write)) != 0) ++writers[first], --writers[last];
  }
  const std::size_t begin_count = specs.size();
  std::int64_t reading = 0, writing = 0;
  for (std::size_t k = 0; k + 1 < bounds.size(); ++k) {
    reading += readers[k];
    writing += writers[k];
    const unsigned bits = (reading > 0 ? static_cast<unsigned>(Access::read) : 0u) |
                          (writing > 0 ? static_cast<unsigned>(Access::write) : 0u);
    if (bits == 0) continue;  // a gap no member touches
    const std::size_t size = bounds[k + 1] - bounds[k];
    if (specs.size() > begin_count && specs.back().offset + specs.back().size == bounds[k] &&
        specs.back().mode == mode_of(bits)) {
      specs.back().size += size;
    } else {
      specs.push_back(AccessSpec{buffer, bounds[k], size, mode_of(bits)});
    }
  }
  if (specs.size() - begin_count > max_pieces_per_buffer) {
    AccessSpec covering = specs[begin_count];
    unsigned bits = 0;
    for (std::size_t i = begin_count; i < specs.size(); ++i) bits |= static_cast<unsigned>(specs[i].mode);
    covering.size = specs.back().offset + specs.back().size - covering.offset;
    covering.mode = mode_of(bits);
    specs.resize(begin_count);
    specs.push_back(covering);
  }
}

}  // namespace

void PoolState::launch() {
  if (launched.load(std::memory_order_acquire)) return;
  std::lock_guard lock(launch_mutex);
  if (launched.load(std::memory_order_relaxed)) return;
  ThreadState& thread = context.current_thread();
  // The gate's accesses: per buffer, the union of the members' ranges, each piece with the union of
  // the modes covering it. Work on a gap between them neither waits for the pool nor is cancelled by
  // its failure (a range from the lowest to the highest byte did both).
  std::map<BufferState*, std::vector<const AccessRecord*>> by_buffer;
  for (TaskRecord* member : members) {
    for (std::size_t i = 0; i < member->access_count; ++i)
      by_buffer[member->accesses[i].buffer].push_back(&member->accesses[i]);
  }
  std::vector<AccessSpec> specs;
  for (const auto& [buffer, accesses] : by_buffer) append_union(buffer, accesses, specs);
  release_list = std::make_unique<TaskRecord*[]>(members.size());
  std::copy(members.begin(), members.end(), release_list.get());
  gate = context.allocate_record(thread);
  gate->kind = TaskKind::pool_gate;
  gate->pool = this;
  gate->name = "task pool";
  gate->refs.store(2, std::memory_order_relaxed);  // the runtime and the pool
  open_submission_guard(gate);
  std::size_t edges = 0;
  // Recording: the gate is numbered like a task, and stands for the members in the trace's arrows.
  if (context.recorder != nullptr) [[unlikely]]
    context.recorder->pool_launched(thread, gate, members);
  try {  // out of memory: the pool stays unlaunched, as it was (a gate's accesses count nowhere)
    context.copy_accesses(gate, specs.data(), specs.size());
    edges = context.register_dependencies(gate, thread, nullptr, 0);
  } catch (...) {
    context.abandon_task(TaskDraft{gate, gate->closure});  // its accesses go with it
    gate = nullptr;
    throw;
  }
  launched.store(true, std::memory_order_release);
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

void PoolState::member_finished(TaskRecord* /*member*/, ThreadState& thread) {
  if (remaining.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  if (first_error.present()) {
    gate->error = first_error.kept();
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
