#include "runtime/pool_state.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <utility>
#include <vector>

#include <fmt/format.h>

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

bool input_failed(const PoolOutcome::Input& input) noexcept {
  const std::uint32_t status = input.writer->load_status();
  return status == status_failed || status == status_cancelled;
}

bool input_order(const PoolOutcome::Input& a, const PoolOutcome::Input& b) noexcept {
  if (a.buffer != b.buffer) return std::less<>()(a.buffer, b.buffer);
  return a.begin < b.begin;
}

// input_read_by(): the first of `outcome`'s inputs that one of `member`'s reads overlaps and that
// satisfies `which(input, begin, end)`, [begin, end) being the part read; or nullptr. A buffer's inputs
// are disjoint and sorted: a binary search each. The parts an earlier access of the member writes are
// its own output, not an input (as for a plain task, whose accesses register in order).
template <class Which>
const PoolOutcome::Input* input_read_by(const PoolOutcome& outcome, const TaskRecord& member,
                                        Which&& which) noexcept {
  const std::vector<PoolOutcome::Input>& inputs = outcome.inputs;
  const PoolOutcome::Input* found = nullptr;
  for (std::size_t i = 0; i < member.access_count && found == nullptr; ++i) {
    const AccessRecord& access = member.accesses[i];
    if (!reads(access.mode)) continue;
    for_each_part_read(member, i, [&](std::size_t begin, std::size_t end) {
      auto it = std::partition_point(inputs.begin(), inputs.end(), [&](const PoolOutcome::Input& input) {
        return input.buffer != access.buffer ? std::less<>()(input.buffer, access.buffer)
                                             : input.end <= begin;
      });
      for (; it != inputs.end() && it->buffer == access.buffer && it->begin < end; ++it) {
        if (which(*it, std::max(it->begin, begin), std::min(it->end, end))) {
          found = &*it;
          return true;
        }
      }
      return false;
    });
  }
  return found;
}

// drop_inputs(): the references the inputs hold, once the gate is released (or abandoned).
void drop_inputs(PoolOutcome& outcome) noexcept {
  for (const PoolOutcome::Input& input : outcome.inputs) release(input.writer);
  outcome.inputs.clear();
}

// The gate is one record, whose accesses are counted in 16 bits, and each piece is one access to
// register: a buffer's pieces past its share of that (at most max_pieces_per_buffer) are merged
// across the smallest gaps between them (merge_smallest_gaps()).
constexpr std::size_t max_gate_accesses = std::numeric_limits<std::uint16_t>::max();
constexpr std::size_t max_pieces_per_buffer = 1024;

Access mode_of(unsigned bits) noexcept { return static_cast<Access>(bits); }

// merge_smallest_gaps(): `pieces` (disjoint, sorted) merged into at most `budget` pieces by joining
// neighbours across the smallest gaps first (a gap of 0: neighbours of different modes), each merged
// piece read and/or written as any piece it covers is. Only those smallest gaps are then ordered
// with the pool; the wide ones, which is where unrelated work usually lies, stay free.
void merge_smallest_gaps(std::vector<AccessSpec>& pieces, std::size_t budget) {
  const std::size_t count = pieces.size();
  if (count <= budget) return;
  std::vector<std::size_t> gaps(count - 1);  // gap k lies between piece k and piece k + 1
  for (std::size_t k = 0; k + 1 < count; ++k) gaps[k] = k;
  const auto width = [&](std::size_t k) {
    return pieces[k + 1].offset - (pieces[k].offset + pieces[k].size);
  };
  const std::size_t joined = count - budget;
  std::nth_element(
      gaps.begin(), gaps.begin() + static_cast<std::ptrdiff_t>(joined - 1), gaps.end(),
      [&](std::size_t a, std::size_t b) { return width(a) != width(b) ? width(a) < width(b) : a < b; });
  std::vector<bool> join(count - 1, false);
  for (std::size_t i = 0; i < joined; ++i) join[gaps[i]] = true;
  std::vector<AccessSpec> merged;
  merged.reserve(budget);
  merged.push_back(pieces[0]);
  for (std::size_t k = 1; k < count; ++k) {
    if (!join[k - 1]) {
      merged.push_back(pieces[k]);
      continue;
    }
    AccessSpec& last = merged.back();
    last.size = pieces[k].offset + pieces[k].size - last.offset;
    last.mode = mode_of(static_cast<unsigned>(last.mode) | static_cast<unsigned>(pieces[k].mode));
  }
  pieces = std::move(merged);
}

// append_union(): `accesses` of one buffer as disjoint pieces (sorted, adjacent pieces of one mode
// joined), each read and/or written as the accesses covering it are; at most `budget` of them.
void append_union(BufferState* buffer, const std::vector<const AccessRecord*>& accesses, std::size_t budget,
                  std::vector<AccessSpec>& specs) {
  if (buffer->bytes == 0) {  // every access is the whole empty buffer: one piece, which orders the pool
    unsigned bits = 0;
    for (const AccessRecord* access : accesses) bits |= static_cast<unsigned>(access->mode);
    specs.push_back(AccessSpec{buffer, 0, 0, mode_of(bits)});
    return;
  }
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
  std::vector<AccessSpec> pieces;
  std::int64_t reading = 0, writing = 0;
  for (std::size_t k = 0; k + 1 < bounds.size(); ++k) {
    reading += readers[k];
    writing += writers[k];
    const unsigned bits = (reading > 0 ? static_cast<unsigned>(Access::read) : 0u) |
                          (writing > 0 ? static_cast<unsigned>(Access::write) : 0u);
    if (bits == 0) continue;  // a gap no member touches
    const std::size_t size = bounds[k + 1] - bounds[k];
    if (!pieces.empty() && pieces.back().offset + pieces.back().size == bounds[k] &&
        pieces.back().mode == mode_of(bits)) {
      pieces.back().size += size;
    } else {
      pieces.push_back(AccessSpec{buffer, bounds[k], size, mode_of(bits)});
    }
  }
  merge_smallest_gaps(pieces, budget);
  specs.insert(specs.end(), pieces.begin(), pieces.end());
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
  if (by_buffer.size() > max_gate_accesses) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("a task pool's tasks touch {} buffers; a pool is ordered by at most {}: "
                            "launch them as several pools",
                            by_buffer.size(), max_gate_accesses));
  }
  // Each buffer's share of the gate's accesses: a pool over many buffers merges their gaps sooner.
  const std::size_t budget =
      std::min(max_pieces_per_buffer, max_gate_accesses / std::max<std::size_t>(by_buffer.size(), 1));
  std::vector<AccessSpec> specs;
  for (const auto& [buffer, accesses] : by_buffer) append_union(buffer, accesses, budget, specs);
  release_list = std::make_unique<TaskRecord*[]>(members.size());
  std::copy(members.begin(), members.end(), release_list.get());
  gate = context.allocate_record(thread);
  gate->kind = TaskKind::pool_gate;
  ::new (static_cast<void*>(gate->closure)) PoolOutcome*(nullptr);  // the gate runs no closure
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
    if (PoolOutcome* outcome = gate_outcome(gate)) drop_inputs(*outcome);
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
  ContextImpl& runtime = context;  // the pool may be freed before the last member is made ready
  if (members.empty()) {
    runtime.finish(gate, thread, status_succeeded);
    return;
  }
  if (gate->cancel_pending.load(std::memory_order_acquire)) cancel_members();
  if (PoolOutcome* outcome = gate_outcome(gate)) drop_inputs(*outcome);  // decided: not needed now
  remaining.store(static_cast<std::int64_t>(members.size()), std::memory_order_release);
  // Our own copy (made at launch): the last member to finish may finish the gate while we iterate.
  const std::unique_ptr<TaskRecord*[]> to_release = std::move(release_list);
  const std::size_t count = members.size();
  for (std::size_t i = 0; i < count; ++i) {
    TaskRecord* member = to_release[i];
    member->pending.store(0, std::memory_order_relaxed);
    runtime.make_ready(member, thread, false);
  }
}

namespace {

// read_fails(): whether a read of [begin, end) of `buffer`, which `writer` wrote last, meets failed
// data, and then the cause it is cancelled with: a failed or cancelled writer's cause; for a pool's
// gate, its error when a member failed (the pool fails as a whole) or when its cancellation cancelled
// every member alike (`whole`), else the cause of a range one of its cancelled members was to write
// there (none: the members that wrote that part ran). The one rule for a pool's members reading a
// gate (cancel_members) and for the gate's other dependents (cancel_pool_consumer).
bool read_fails(const TaskRecord* writer, const BufferState* buffer, std::size_t begin, std::size_t end,
                std::exception_ptr& cause) noexcept {
  const std::uint32_t status = writer->load_status();
  if (status != status_failed && status != status_cancelled) return false;
  const PoolOutcome* written = writer->kind == TaskKind::pool_gate ? gate_outcome(writer) : nullptr;
  if (written == nullptr || status == status_failed || written->whole) {
    cause = failure_cause(writer);
    return true;
  }
  for (const PoolOutcome::Output& output : written->outputs) {
    if (output.buffer == buffer && output.begin < end && begin < output.end) {
      cause = output.cause;
      return true;
    }
  }
  return false;
}

}  // namespace

void PoolState::cancel_members() noexcept {
  PoolOutcome* outcome = gate_outcome(gate);
  if (outcome == nullptr || std::none_of(outcome->inputs.begin(), outcome->inputs.end(), input_failed)) {
    // Nothing noted explains the cancellation: every member goes, with the gate's cause.
    for (TaskRecord* member : members) mark_cancelled_by(member, failure_cause(gate));
    members_cancelled = true;
    if (outcome != nullptr) outcome->whole = true;
    return;
  }
  std::size_t cancelled = 0;
  bool one_cause = true;
  for (TaskRecord* member : members) {
    std::exception_ptr cause;
    const auto meets_failure = [&](const PoolOutcome::Input& input, std::size_t begin, std::size_t end) {
      return read_fails(input.writer, input.buffer, begin, end, cause);
    };
    if (input_read_by(*outcome, *member, meets_failure) == nullptr) continue;  // no failed data: it runs
    mark_cancelled_by(member, cause);
    ++cancelled;
    one_cause = one_cause && member->error == gate->error;
    for (std::size_t i = 0; i < member->access_count; ++i) {
      const AccessRecord& access = member->accesses[i];
      if (!writes(access.mode) || tracked_end(access) == access.offset) continue;
      if (outcome->outputs.size() == outcome->outputs.capacity()) {
        outcome->whole = true;  // not reached (launch reserved for every candidate); cancels more
        continue;
      }
      outcome->outputs.push_back(
          PoolOutcome::Output{access.buffer, access.offset, tracked_end(access), member->error});
    }
  }
  members_cancelled = cancelled > 0;
  // All cancelled with the gate's cause: every consumer is cancelled with it, with no search.
  if (cancelled == members.size() && one_cause) outcome->whole = true;
}

// finish() recorded the member's failure in first_error before.
void PoolState::member_finished(ThreadState& thread) {
  if (remaining.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  if (first_error.present()) {
    // The pool fails as a whole, with its failed member's own exception.
    gate->error = first_error.kept();
    context.finish(gate, thread, status_failed);
  } else if (members_cancelled) {
    // Only cancelled: like a cancelled task, with the original cause it was cancelled with (null
    // when that was requested), which cancel_pool_consumer() gives the dependents it cancels.
    context.finish(gate, thread, status_cancelled);
  } else {
    context.finish(gate, thread, status_succeeded);
  }
}

void note_gate_inputs(TaskRecord* gate) {
  PoolOutcome*& outcome = gate_outcome(gate);
  if (gate->access_count == 0) return;
  outcome = new PoolOutcome;
  for (std::size_t i = 0; i < gate->access_count; ++i) {
    const AccessRecord& access = gate->accesses[i];
    if (writes(access.mode)) {
      access.buffer->tracker.mark_pool_written();
      gate->context->pool_gate_wrote.store(true, std::memory_order_relaxed);
    }
    if (!reads(access.mode)) continue;
    access.buffer->tracker.consumed_writers(
        access.offset, access.size, [&](TaskRecord* writer, std::size_t begin, std::size_t end) {
          outcome->inputs.push_back(PoolOutcome::Input{access.buffer, begin, end, writer});
          retain_record(writer);  // after the push: every input holds one reference
        });
  }
  std::sort(outcome->inputs.begin(), outcome->inputs.end(), input_order);
  std::size_t room = 0;  // the writes of every member that reads an input: those it may cancel
  for (const TaskRecord* member : gate->pool->members) {
    const auto any = [](const PoolOutcome::Input&, std::size_t, std::size_t) { return true; };
    if (input_read_by(*outcome, *member, any) == nullptr) continue;
    for (std::size_t i = 0; i < member->access_count; ++i) room += writes(member->accesses[i].mode) ? 1 : 0;
  }
  outcome->outputs.reserve(room);
}

namespace {

// note_reads_of(): note_gate_reads() for the consumer's access `index`, a read of a buffer a gate wrote.
void note_reads_of(TaskRecord& consumer, std::size_t index) noexcept {
  const AccessRecord& access = consumer.accesses[index];
  const auto note = [&](TaskRecord* writer, std::size_t begin, std::size_t end) {
    if (writer->kind != TaskKind::pool_gate) return;
    PoolOutcome& outcome = *gate_outcome(writer);  // made at the gate's registration, under this lock
    std::lock_guard lock(outcome.reads_lock);
    if (outcome.reads_closed) {  // the gate's fate is known and it has begun cancelling: decide now
      std::exception_ptr cause;
      if (read_fails(writer, access.buffer, begin, end, cause)) mark_cancelled_by(&consumer, cause);
      return;
    }
    try {
      outcome.reads.push_back(PoolOutcome::Read{&consumer, access.buffer, begin, end});
    } catch (const std::bad_alloc&) {
      outcome.reads_lost = true;
    }
  };
  for_each_part_read(consumer, index, [&](std::size_t begin, std::size_t end) {
    access.buffer->tracker.consumed_writers(begin, end - begin, note);
    return false;
  });
}

}  // namespace

void note_gate_reads(TaskRecord* consumer) noexcept {
  for (std::size_t index = 0; index < consumer->access_count; ++index) {
    const AccessRecord& access = consumer->accesses[index];
    if (reads(access.mode) && access.buffer->tracker.pool_written()) note_reads_of(*consumer, index);
  }
}

void cancel_pool_consumer(const TaskRecord* gate, TaskRecord* successor) noexcept {
  // The parts of the gate's data the successor read as it registered, as the gate noted them. Every
  // read of a buffer a gate wrote is noted (the registrations of tasks, gates and host mappings
  // alike): a successor with no note read none of this gate's data (its edge is a write's, or came
  // through another buffer), and a read of a part another task has written since is not noted.
  if (const PoolOutcome* found = gate_outcome(gate); found != nullptr) {  // none: the gate has no accesses
    const PoolOutcome& outcome = *found;
    std::lock_guard lock(outcome.reads_lock);
    const auto by_consumer = [](const PoolOutcome::Read& a, const PoolOutcome::Read& b) {
      return std::less<>()(a.consumer, b.consumer);
    };
    if (!outcome.reads_closed) {  // the first dependent: no more notes come
      std::sort(outcome.reads.begin(), outcome.reads.end(), by_consumer);
      outcome.reads_closed = true;
    }
    if (!outcome.reads_lost) {
      const PoolOutcome::Read key{successor, nullptr, 0, 0};
      const auto [first, last] =
          std::equal_range(outcome.reads.begin(), outcome.reads.end(), key, by_consumer);
      std::exception_ptr cause;
      bool fails = false;
      for (auto read = first; read != last; ++read) {
        if (read->spent) continue;  // an earlier task's in the same record
        read->spent = true;
        fails = fails || read_fails(gate, read->buffer, read->begin, read->end, cause);
      }
      if (fails) mark_cancelled_by(successor, cause);
      return;
    }
  }
  // A note was lost (out of memory): the whole ranges read count, also a part another task has
  // written since the gate, which cancels more than it should.
  for (std::size_t i = 0; i < successor->access_count; ++i) {
    const AccessRecord& access = successor->accesses[i];
    if (!reads(access.mode) || tracked_end(access) == access.offset) continue;
    std::exception_ptr cause;
    if (read_fails(gate, access.buffer, access.offset, tracked_end(access), cause)) {
      mark_cancelled_by(successor, cause);
      return;
    }
  }
}

void release_gate_outcome(TaskRecord* gate) noexcept {
  PoolOutcome*& outcome = gate_outcome(gate);
  if (outcome == nullptr) return;
  drop_inputs(*outcome);  // a gate abandoned at launch still holds them
  delete outcome;
  outcome = nullptr;
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
