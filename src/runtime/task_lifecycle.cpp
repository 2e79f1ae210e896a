// task_lifecycle.cpp — a task from submission to recycling: commit (accesses, dependencies),
// ready (placement), execute (or cancel), finish (report, release successors, count).
#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <span>
#include <utility>
#include <vector>

#include <pthread.h>

#include <fmt/format.h>

#include "nerve/error.hpp"

#include "memory/buffer_state.hpp"
#include "runtime/context_impl.hpp"
#include "runtime/failure_log.hpp"
#include "runtime/pool_state.hpp"
#include "task/task_graph.hpp"
#include "util/exception_text.hpp"
#include "util/monotonic_clock.hpp"

namespace nerve::detail {
namespace {

// own_overlaps(): for each of a task's accesses, how many of its accesses to the same buffer overlap
// that one's range (into `out`, one per access) — the most a segment inside it can receive from the
// task, which its readers reserve room for. A few accesses are compared pairwise, without
// allocating; more are counted from the accesses sorted by start and by end, so n accesses to one
// buffer cost n log n (counting all of them per access made 16,000 ranges of one buffer take 7 s
// and 2 GB, reserving n slots in each of n segments). Ranges are the tracker's (tracked_end(): the
// accesses of a zero-byte buffer overlap each other). An empty access may be over-counted, which
// only reserves more.
void own_overlaps(std::span<const AccessRecord> accesses, std::span<std::size_t> out) {
  constexpr std::size_t pairwise = 8;
  if (accesses.size() <= pairwise) {
    for (std::size_t i = 0; i < accesses.size(); ++i) {
      const AccessRecord& a = accesses[i];
      std::size_t n = 0;
      for (const AccessRecord& b : accesses) {
        n += b.buffer == a.buffer && b.offset < tracked_end(a) && a.offset < tracked_end(b) ? 1 : 0;
      }
      out[i] = std::max<std::size_t>(n, 1);
    }
    return;
  }
  using Key = std::pair<const BufferState*, std::size_t>;
  std::vector<Key> starts;
  std::vector<Key> ends;
  starts.reserve(accesses.size());
  ends.reserve(accesses.size());
  for (const AccessRecord& access : accesses) {
    starts.emplace_back(access.buffer, access.offset);
    ends.emplace_back(access.buffer, tracked_end(access));
  }
  std::sort(starts.begin(), starts.end());
  std::sort(ends.begin(), ends.end());
  for (std::size_t i = 0; i < accesses.size(); ++i) {
    const AccessRecord& access = accesses[i];
    const Key first{access.buffer, 0};
    // Started before this one ends, less those that ended before it starts: the overlapping ones.
    const auto started =
        std::lower_bound(starts.begin(), starts.end(), Key{access.buffer, tracked_end(access)}) -
        std::lower_bound(starts.begin(), starts.end(), first);
    const auto ended = std::upper_bound(ends.begin(), ends.end(), Key{access.buffer, access.offset}) -
                       std::lower_bound(ends.begin(), ends.end(), first);
    out[i] = static_cast<std::size_t>(std::max<std::ptrdiff_t>(started - ended, 1));
  }
}

constexpr std::size_t max_inline_views = 16;

const char* display_name(const TaskRecord* task) noexcept {
  return task->name != nullptr ? task->name : "(unnamed)";
}

}  // namespace

std::exception_ptr cancellation_error(const TaskRecord* task) {
  return cancellation_error(task, fmt::format("task '{}'", display_name(task)));
}

std::exception_ptr cancellation_error(const TaskRecord* task, const std::string& subject) {
  if (task->error == nullptr) {
    const char* why = task->cancel_cause == TaskRecord::CancelCause::dependency
                          ? "because a task it depends on was cancelled"
                          : "before it started";
    return std::make_exception_ptr(TaskCancelled(fmt::format("{} was cancelled {}", subject, why), nullptr));
  }
  const std::string cause = what_of(task->error);
  const std::string origin = task->context != nullptr ? task->context->failure_origin(task->error) : "";
  return std::make_exception_ptr(TaskCancelled(
      origin.empty() ? fmt::format("{} was cancelled because a task it depends on failed: {}", subject, cause)
                     : fmt::format("{} was cancelled because task '{}', which it depends on, "
                                   "failed: {}",
                                   subject, origin, cause),
      task->error));
}

void ContextImpl::note_failure_origin(const TaskRecord& failed) noexcept {
  // A pool's gate fails with its failed member's exception: the member, noted first, is the origin.
  if (failed.name == nullptr || failed.error == nullptr || failed.kind == TaskKind::pool_gate) return;
  try {
    std::lock_guard lock(failure_origins_mutex);
    if (failure_origins.size() == max_failure_origins) failure_origins.pop_front();
    failure_origins.emplace_back(failed.error, failed.name);
  } catch (...) {  // out of memory: the cancellations' messages just do not name it
  }
}

std::string ContextImpl::failure_origin(const std::exception_ptr& cause) {
  std::lock_guard lock(failure_origins_mutex);
  for (auto it = failure_origins.rbegin(); it != failure_origins.rend(); ++it) {
    if (it->first == cause) return it->second;
  }
  return {};
}

DepOverflow* DepOverflow::make(DepOverflow* next, std::size_t capacity) {
  void* memory = ::operator new(sizeof(DepOverflow) + capacity * sizeof(DepNode));
  auto* chunk = ::new (memory) DepOverflow{next, 0, static_cast<std::uint32_t>(capacity)};
  std::uninitialized_default_construct_n(chunk->nodes(), capacity);
  return chunk;
}

void DepOverflow::destroy_chain(DepOverflow* chunk) noexcept {
  while (chunk != nullptr) {
    DepOverflow* next = chunk->next;
    ::operator delete(chunk);  // the header and the nodes are trivially destructible
    chunk = next;
  }
}

DepNode* allocate_dep_node(TaskRecord* successor) {
  // The inline nodes are taken from the last: deps[inline_dep_count - 1] shares a line with the first access.
  if (successor->dep_used < inline_dep_count)
    return &successor->deps[inline_dep_count - 1 - successor->dep_used++];
  DepOverflow* chunk = successor->dep_overflow;
  if (chunk == nullptr || chunk->used == chunk->capacity) {
    chunk = DepOverflow::make(successor->dep_overflow, DepOverflow::default_capacity);
    successor->dep_overflow = chunk;
  }
  return &chunk->nodes()[chunk->used++];
}

void reserve_dep_nodes(TaskRecord* successor, std::size_t edges) {
  if (free_dep_nodes(successor) >= edges) return;
  // A new current chunk for all of them (what the old one has left goes unused).
  successor->dep_overflow =
      DepOverflow::make(successor->dep_overflow, std::max(DepOverflow::default_capacity, edges));
}

TaskRecord* ContextImpl::allocate_record(ThreadState& thread) {
  TaskRecord* task = records.allocate(thread.records);
  record_fields::restore(task->context, this);  // a line the task may otherwise only read
  return task;
}

void ContextImpl::refuse_submission_after_shutdown() const {
  if (shut_down)
    throw Error(ErrorCode::invalid_argument,
                "submit to a context that has been destroyed (a TaskGroup or TaskPool outlived it)");
}

TaskDraft ContextImpl::begin_task(std::size_t closure_size, std::size_t closure_align, bool guard_depth) {
  refuse_submission_after_shutdown();
  ThreadState& thread = current_thread();
  // Any other submission ends a stretch of spawns run at once: the next stretch starts only from a
  // queue found past its depth again.
  thread.spawned_last = false;
  thread.spawns_inline = false;
  if (guard_depth) refuse_deep_nesting(thread, "a submission");
  return allocate_draft(thread, closure_size, closure_align);
}

// Once the queue of an application thread's fork-join spawns is past its depth (throttle_slow() sets
// spawns_inline), the next spawns run at once on that thread, in slot 0, until the workers have
// taken the queue down to half its depth: the back-pressure task_queue.per_device_queue_depth
// promises, without a record, a queue or a steal for a task the submitter would run itself anyway
// (relieve_master() ran the newest queued ones, those just submitted). libgomp does the same past
// 64 queued tasks per thread.
TaskDraft ContextImpl::begin_spawn(std::size_t closure_size, std::size_t closure_align) {
  refuse_submission_after_shutdown();
  ThreadState& thread = current_thread();
  if (thread.spawns_inline) [[unlikely]] {
    if (thread.slot == nullptr && spawns_may_run_inline() &&
        scheduler.claim_master_for_spawn(thread, scheduler.queue_depth() / 2)) {
      return {nullptr, nullptr};
    }
    thread.spawns_inline = false;
  }
  thread.spawned_last = true;
  refuse_deep_nesting(thread, "a submission");
  return allocate_draft(thread, closure_size, closure_align);
}

TaskDraft ContextImpl::allocate_draft(ThreadState& thread, std::size_t closure_size,
                                      std::size_t closure_align) {
  TaskRecord* task = allocate_record(thread);
  void* closure = task->closure;
  if (closure_size > inline_closure_bytes || closure_align > alignof(std::max_align_t)) {
    try {
      closure = task->allocate_heap_closure(closure_size, closure_align);
    } catch (...) {
      records.free(thread.records, task);
      throw;
    }
  }
  return {task, closure};
}

void ContextImpl::discard_task(TaskDraft draft, const ClosureOps* ops) noexcept {
  TaskRecord* task = draft.record;
  ops->destroy(draft.closure);
  for (std::size_t i = 0; i < task->access_count; ++i) retire_task_access(task->accesses[i].buffer);
  abandon_task(draft);  // frees the accesses and dependency nodes with the record
}

void ContextImpl::abandon_task(TaskDraft draft) noexcept {
  TaskRecord* task = draft.record;
  task->free_heap_closure();
  records.free(current_thread().records, task);
}

// validate_access() throws for an access nerve cannot honour. A valid access costs a few compares,
// inlined into the submission; reject_access(), out of line, finds which check failed and says so.
inline void ContextImpl::validate_access(const AccessSpec& access) const {
  const BufferState* buffer = access.buffer;
  if (buffer == nullptr || buffer->life.load(std::memory_order_acquire) != BufferLife::alive ||
      buffer->context != this || access.offset > buffer->bytes || access.size > buffer->bytes - access.offset)
      [[unlikely]] {
    reject_access(access);
  }
}

void ContextImpl::reject_access(const AccessSpec& access) const {
  static constexpr const char* task_access = "a task's access to";
  const BufferState* buffer = access.buffer;
  if (buffer == nullptr) throw Error(ErrorCode::buffer_misuse, "a task accesses an empty buffer handle");
  buffer->check_usable(task_access, access.offset, access.size);
  if (buffer->context != this) {
    throw Error(ErrorCode::buffer_misuse,
                fmt::format("a task accesses {} of another context", buffer->describe()));
  }
  buffer_check_range(buffer, access.offset, access.size, task_access);
  throw Error(ErrorCode::internal, "an access failed validation for no reason found");  // not reached
}

void ContextImpl::copy_accesses(TaskRecord* task, const AccessSpec* accesses, std::size_t count) {
  if (count == 0) return;
  if (count > std::numeric_limits<std::uint16_t>::max()) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("a task declares {} accesses; at most {} are supported", count,
                            std::numeric_limits<std::uint16_t>::max()));
  }
  // A pool gate's accesses are its members', already validated; the members keep the buffers alive
  // (the gate ends after the last of them).
  const bool gate = task->kind == TaskKind::pool_gate;
  if (!gate) {
    // The first few: a core tracks only so many misses at once. Then the buffers created after the
    // ones it writes: in a sweep, the next submission's. Not after the ones it reads: those lines
    // (W4: the cell above's right neighbour) are the workers', finishing the row above (a measured
    // W4 loss; written ones only: 230 -> 168 ns/task, medians of 12 alternated runs).
    const std::size_t ahead = std::min<std::size_t>(count, 8);
    for (std::size_t i = 0; i < ahead; ++i) prefetch_submission_lines(accesses[i].buffer);
    for (std::size_t i = 0; i < ahead; ++i) {
      if (accesses[i].buffer != nullptr && writes(accesses[i].mode))
        prefetch_next_created(accesses[i].buffer);
    }
    for (std::size_t i = 0; i < count; ++i) validate_access(accesses[i]);
  }
  if (count > inline_access_count) task->accesses = new AccessRecord[count];
  for (std::size_t i = 0; i < count; ++i) {
    const AccessSpec& access = accesses[i];
    task->accesses[i] = AccessRecord{access.buffer, access.offset, access.size, access.mode};
    if (!gate) begin_task_access(access.buffer);
  }
  task->access_count = static_cast<std::uint16_t>(count);
}

// Locks every buffer the task touches, in address order, so that concurrent submissions over the
// same buffers are ordered the same way on all of them (no dependency cycles), then registers each
// access and adds an edge from each predecessor (deduplicated).
std::size_t ContextImpl::register_dependencies(TaskRecord* task, ThreadState& thread,
                                               TaskRecord* const* after, std::size_t after_count,
                                               bool after_consumes) {
  // The predecessors met so far, on the stack: a vector kept in the thread state cost a W4 task ~40
  // instructions of clearing, capacity checks and bookkeeping (callgrind, T = 1).
  constexpr std::size_t seen_capacity = 64;
  Predecessor seen[seen_capacity];
  std::size_t seen_count = 0;
  std::size_t edges = 0;
  // One edge per predecessor, except that a consuming dependency on a predecessor already reached
  // through a non-consuming one (this task reads what it wrote and also overwrites or follows it)
  // adds a consuming edge: the predecessor's failure must cancel this task, whatever the order of
  // the accesses. A second edge to one predecessor is harmless (it only counts twice).
  // Inlined into the trackers' loops: with the edge count GCC stopped inlining it, which cost a W3 task
  // ~25 instructions and a call (callgrind, T = 1) in the submission's hottest loop.
  auto on_predecessor = [&](Predecessor predecessor) __attribute__((always_inline)) {
    if (predecessor.task == task) return;
    for (Predecessor& earlier : std::span(seen, seen_count)) {
      if (earlier.task != predecessor.task) continue;
      if (earlier.consumes || !predecessor.consumes) return;
      earlier.consumes = true;
      edges += add_edge(predecessor.task, task, true) ? 1 : 0;
      return;
    }
    if (seen_count < seen_capacity) seen[seen_count++] = predecessor;  // beyond, duplicates are harmless
    if (add_edge(predecessor.task, task, predecessor.consumes)) {
      ++edges;
      // A group member behind a task outside its group's own graph (GroupState::ordered_members).
      if (task->group != nullptr &&
          (predecessor.task->group != task->group || may_be_ordered(*predecessor.task))) [[unlikely]]
        task->submission_flags |= TaskRecord::ordered_from_outside_flag;
    }
    if (recorder != nullptr) [[unlikely]]
      recorder->edge(thread, predecessor.task, task);
  };
  // Recording: a dependency on a task that has already finished adds no edge, but the trace still
  // draws its arrow (docs/TRACING.md: one per dependency), once per predecessor.
  // Registration must not throw once it began: out of memory, an arrow is left out.
  auto record_finished_sources = [&](const AccessRecord& access) noexcept {
    std::vector<const TaskRecord*>& recorded = thread.scratch_finished_sources;
    access.buffer->tracker.finished_sources(
        access.offset, access.size, access.mode, [&](const TaskRecord* source) noexcept {
          if (std::find(recorded.begin(), recorded.end(), source) != recorded.end()) return;
          try {
            recorded.push_back(source);
          } catch (const std::bad_alloc&) {
            return;
          }
          recorder->edge(thread, source, task);
        });
  };
  if (recorder != nullptr) [[unlikely]]
    thread.scratch_finished_sources.clear();
  // Every allocation registration needs is made first, with the locks held (the trackers' segments
  // and readers, the task's dependency nodes: on_predecessor adds at most one edge per report); a bad_alloc
  // there leaves the task out of the graph and the submission throws. Registering then cannot fail.
  const std::size_t count = task->access_count;
  if (count == 1) {
    const AccessRecord& access = task->accesses[0];
    BufferState* buffer = access.buffer;
    DependencyTracker& tracker = buffer->tracker;
    std::lock_guard lock(tracker.lock());
    const bool whole = tracker.whole(access.offset, access.size);
    if (!whole) tracker.split_for(access.offset, access.size);
    const std::size_t room = free_dep_nodes(task);
    const std::size_t free_room = room > after_count ? room - after_count : 0;
    const std::size_t bound =
        whole ? tracker.reserve_whole(access.mode, free_room)
              : tracker.reserve_for(access.offset, access.size, access.mode, 1, free_room);
    reserve_dep_nodes(task, bound + after_count);
    if (task->kind == TaskKind::pool_gate) [[unlikely]]
      note_gate_inputs(task);
    note_reads_of_gates(task);
    if (recorder != nullptr) [[unlikely]]
      record_finished_sources(access);
    if (whole) {
      tracker.register_whole(task, access.mode, on_predecessor);
    } else {
      tracker.register_access(task, access.offset, access.size, access.mode, on_predecessor);
    }
  } else if (count > 1) {
    // The distinct buffers in address order: most tasks have a few, sorted in place on the stack by
    // insertion (std::sort and the vector's bookkeeping cost a W4 task ~75 instructions).
    constexpr std::size_t few = 8;
    BufferState* few_buffers[few];
    std::span<BufferState*> buffers;
    if (count <= few) {
      std::size_t distinct = 0;
      for (std::size_t i = 0; i < count; ++i) {
        BufferState* buffer = task->accesses[i].buffer;
        std::size_t at = distinct;
        while (at > 0 && few_buffers[at - 1] > buffer) --at;
        if (at > 0 && few_buffers[at - 1] == buffer) continue;
        std::copy_backward(few_buffers + at, few_buffers + distinct, few_buffers + distinct + 1);
        few_buffers[at] = buffer;
        ++distinct;
      }
      buffers = std::span<BufferState*>(few_buffers, distinct);
    } else {
      auto& many = thread.scratch_buffers;
      many.clear();
      many.reserve(count);
      for (std::size_t i = 0; i < count; ++i) many.push_back(task->accesses[i].buffer);
      std::sort(many.begin(), many.end());
      many.erase(std::unique(many.begin(), many.end()), many.end());
      buffers = many;
    }
    // A task with two accesses to one buffer keeps the segments its accesses split (no merge).
    const bool merge = buffers.size() == count;
    std::size_t few_overlaps[few];
    std::vector<std::size_t> many_overlaps;
    std::span<std::size_t> overlaps;
    if (!merge) {
      if (count > few) many_overlaps.resize(count);
      overlaps =
          count > few ? std::span<std::size_t>(many_overlaps) : std::span<std::size_t>(few_overlaps, count);
      own_overlaps(std::span<const AccessRecord>(task->accesses, count), overlaps);
    }
    // Bit i: access i covers its buffer whole (DependencyTracker::whole()), known once the locks are
    // held. Only with one access per buffer: another access's split would make it stale.
    std::uint32_t whole = 0;
    const bool few_distinct = merge && count <= few;
    const auto is_whole = [&whole, few_distinct](std::size_t i) {
      return few_distinct && ((whole >> i) & 1) != 0;
    };
    for (BufferState* buffer : buffers) buffer->tracker.lock().lock();
    try {
      const std::size_t room = free_dep_nodes(task);
      std::size_t bound = after_count;
      // An access to a buffer of its own is split and reserved in one pass: no other access of the
      // task changes that buffer's segments (W4: ~50 instructions less per task than two passes).
      // Otherwise every split comes before any reservation.
      if (few_distinct) {
        for (std::size_t i = 0; i < count; ++i) {
          const AccessRecord& access = task->accesses[i];
          DependencyTracker& tracker = access.buffer->tracker;
          const std::size_t free_room = room > bound ? room - bound : 0;
          if (tracker.whole(access.offset, access.size)) {
            whole |= std::uint32_t{1} << i;
            bound += tracker.reserve_whole(access.mode, free_room);
          } else {
            tracker.split_for(access.offset, access.size);
            bound += tracker.reserve_for(access.offset, access.size, access.mode, 1, free_room);
          }
        }
      } else {
        for (std::size_t i = 0; i < count; ++i) {
          const AccessRecord& access = task->accesses[i];
          access.buffer->tracker.split_for(access.offset, access.size);
        }
        for (std::size_t i = 0; i < count; ++i) {
          const AccessRecord& access = task->accesses[i];
          const std::size_t free_room = room > bound ? room - bound : 0;
          bound += access.buffer->tracker.reserve_for(access.offset, access.size, access.mode,
                                                      merge ? 1 : overlaps[i], free_room);
        }
      }
      reserve_dep_nodes(task, bound);
      // A pool's gate notes which writers the data it reads comes from (PoolState::cancel_members).
      if (task->kind == TaskKind::pool_gate) [[unlikely]]
        note_gate_inputs(task);
    } catch (...) {
      for (BufferState* buffer : buffers) buffer->tracker.lock().unlock();
      throw;
    }
    note_reads_of_gates(task);  // nothing throws from here
    for (std::size_t i = 0; i < count; ++i) {
      const AccessRecord& access = task->accesses[i];
      if (recorder != nullptr) [[unlikely]]
        record_finished_sources(access);
      if (is_whole(i)) {
        access.buffer->tracker.register_whole(task, access.mode, on_predecessor);
      } else {
        access.buffer->tracker.register_access(task, access.offset, access.size, access.mode, on_predecessor,
                                               merge);
      }
    }
    for (BufferState* buffer : buffers) buffer->tracker.lock().unlock();
  } else {
    reserve_dep_nodes(task, after_count);
  }
  for (std::size_t i = 0; i < after_count; ++i) on_predecessor(Predecessor{after[i], after_consumes});
  return edges;
}

TaskRecord* ContextImpl::commit_task(TaskDraft draft, const SubmitInfo& info) {
  TaskRecord* task = draft.record;
  ThreadState& thread = current_thread();
  // The fork-join fast path: nothing to validate, nothing can depend on it, nobody can wait for it.
  if (info.access_count == 0 && info.after_count == 0 && info.pool == nullptr && !info.keep_handle &&
      info.device == -1 && task->kernel == nullptr && !info.stream_launcher) [[likely]] {
    task->ops = info.ops;
    record_fields::restore(task->name, info.name);
    task->group = info.group;
    task->compute_intensive = info.compute_intensive;
    task->priority = info.priority;
    task->lean = lean_pristine;
    task->refs.store(1, std::memory_order_relaxed);
    if (info.group != nullptr) info.group->pending.fetch_add(1, std::memory_order_relaxed);
    thread.count_submitted();
    if (lean_runs_on_host()) [[likely]] {
      // make_ready() would find nothing to place and no node to prefer.
      task->phase.store(status_ready, std::memory_order_relaxed);
      scheduler.enqueue_spawned(task, thread);
    } else {
      make_ready(task, thread, true);
    }
    throttle_submission(thread, task);
    return nullptr;
  }
  RecordAllocator::prefetch_next(thread.records);
  // The cold lines are written only where a field differs from its recycled value (see TaskRecord).
  record_fields::restore(  // before the device checks
      task->submission_flags,
      static_cast<std::uint8_t>((info.stream_launcher ? TaskRecord::stream_launcher_flag : 0) |
                                (info.stream_only ? TaskRecord::stream_only_flag : 0)));
  try {
    if (info.after_count != 0 && info.pool != nullptr) {
      throw Error(ErrorCode::invalid_argument, "tasks in a task pool cannot have `after` edges");
    }
    if (info.device != -1) {
      if (task->kernel == nullptr) {
        check_closure_device(*task, info.device, info.name);
      } else {
        validate_device_hint(info.device, info.name);
      }
    } else if (task->stream_only()) {
      check_closure_device(*task, -1, info.name);
    }
    if (info.pool != nullptr) info.pool->make_room();
    for (std::size_t i = 0; i < info.after_count; ++i) {
      if (info.after[i] == nullptr) {
        throw Error(ErrorCode::invalid_argument, "`after` names an empty task handle");
      }
      if (info.after[i]->context != this) {
        throw Error(ErrorCode::invalid_argument, "`after` names a task of another context");
      }
    }
    copy_accesses(task, info.accesses, info.access_count);
  } catch (...) {
    discard_task(draft, info.ops);
    throw;
  }
  task->ops = info.ops;
  record_fields::restore(task->name, info.name);
  task->compute_intensive = info.compute_intensive;
  task->priority = info.priority;
  record_fields::restore(task->device_hint, static_cast<std::int16_t>(info.device));
  task->group = info.group;
  if (info.pool != nullptr) {
    if (recorder != nullptr) [[unlikely]]
      recorder->task_submitted(task);
    task->refs.store(1, std::memory_order_relaxed);
    info.pool->add(task);
    return nullptr;
  }
  task->refs.store(info.keep_handle ? 2 : 1, std::memory_order_relaxed);
  if (task->access_count == 0 && info.after_count == 0 && !info.keep_handle) {
    task->lean = lean_plain;
    if (info.group != nullptr) info.group->pending.fetch_add(1, std::memory_order_relaxed);
    thread.count_submitted();
    make_ready(task, thread, true);
    throttle_submission(thread, task);
    return nullptr;
  }
  if (recorder != nullptr) [[unlikely]]
    recorder->task_submitted(task);  // stamps the record only; edges are traced against it
  open_submission_guard(task);
  std::size_t edges = 0;
  if (task->access_count != 0 || info.after_count != 0) {
    try {
      edges = register_dependencies(task, thread, info.after, info.after_count, info.after_consumes);
    } catch (...) {  // out of memory before any edge or tracker entry was made: not submitted
      discard_task(draft, info.ops);
      throw;
    }
  }
  // Nothing below can fail. The guard keeps the task from running before this is done.
  if (info.keep_handle) add_external_reference();
  if (info.group != nullptr) {
    if (may_be_ordered(*task)) info.group->ordered_members.fetch_add(1, std::memory_order_relaxed);
    info.group->pending.fetch_add(1, std::memory_order_relaxed);
  }
  thread.count_submitted();
  if (close_submission_guard(task, edges)) make_ready(task, thread, true);
  throttle_submission(thread, task);
  return info.keep_handle ? task : nullptr;
}

int ContextImpl::preferred_numa_node(const TaskRecord* task) const noexcept {
  if (!scheduler.numa_placement()) return -1;
  int node = -1;
  std::size_t largest = 0;
  for (std::size_t i = 0; i < task->access_count; ++i) {
    const AccessRecord& access = task->accesses[i];
    const int home = access.buffer->home_numa.load(std::memory_order_relaxed);
    if (home >= 0 && access.size >= largest) {
      node = home;
      largest = access.size;
    }
  }
  return node;
}

void ContextImpl::make_ready(TaskRecord* task, ThreadState& thread, bool submission) {
  switch (task->kind) {
    case TaskKind::function:
      task->phase.store(status_ready, std::memory_order_relaxed);
      if (recorder != nullptr) [[unlikely]]
        recorder->task_ready(task, submission);
      if (coherence != nullptr && !host_bound_in_place(*task)) {
        place_with_data(task, thread, submission);
      } else {
        // The CPU workers, as placement would have chosen: `device` stays -1, which means them too
        // (writing 0 would move the record's cold line to this core and back at its release).
        if (coherence != nullptr && recorder != nullptr) [[unlikely]]
          task->data_valid_ns = task->ready_ns;  // no copies: valid when ready
        scheduler.enqueue(task, thread, submission, preferred_numa_node(task));
      }
      return;
    case TaskKind::host_access:
      if (coherence != nullptr && !task->cancel_pending.load(std::memory_order_acquire)) {
        place_with_data(task, thread, submission);  // the host copy must be valid first
      } else {
        grant_mapping(task, thread);
      }
      return;
    case TaskKind::pool_gate: task->pool->release_members(thread); return;
  }
}

// The mapping is granted (or cancelled): wake the thread blocked in map().
void ContextImpl::grant_mapping(TaskRecord* task, ThreadState& thread) {
  if (task->cancel_pending.load(std::memory_order_acquire)) {
    // A walk of suspended_blocker() from this mapping (its map waits below a task) reads what waits
    // for it: it must be over before the cancellation releases them; a later one skips the mapping.
    { std::lock_guard barrier(mappings_mutex); }
    finish(task, thread, status_cancelled);
    return;
  }
  if (is_prefetch_mapping(task)) {
    end_mapping(task, thread);  // its only reference goes with it
    return;
  }
  // Against abandon_mapping(): one of the two wins; an abandoned mapping is over as soon as granted.
  std::uint8_t phase = task->phase.load(std::memory_order_acquire);
  do {
    if (phase == mapping_abandoned) {
      end_mapping(task, thread);  // its only reference left goes with it
      return;
    }
  } while (!task->phase.compare_exchange_weak(phase, status_running, std::memory_order_seq_cst));
  if ((task->status.load(std::memory_order_seq_cst) & status_waiters_bit) != 0)
    scheduler.waiters().wake(task);
}

bool ContextImpl::abandon_mapping(TaskRecord* mapping) noexcept {
  std::uint8_t phase = mapping->phase.load(std::memory_order_acquire);
  do {
    if (phase == status_running) return false;
  } while (!mapping->phase.compare_exchange_weak(phase, mapping_abandoned, std::memory_order_acq_rel));
  return true;
}

void ContextImpl::destroy_closure(TaskRecord* task) noexcept {
  void* closure = task->closure_storage();
  task->ops->destroy(closure);
  task->free_heap_closure();
}

// fill_views() resolves each access to the memory the task runs on; a write makes the buffer's
// home NUMA node the worker's if it had none (first touch).
void ContextImpl::fill_views(const TaskRecord* task, const ThreadState& thread, AccessView* views) noexcept {
  const bool first_touch = scheduler.numa_placement() && thread.slot != nullptr;
  for (std::size_t i = 0; i < task->access_count; ++i) {
    const AccessRecord& access = task->accesses[i];
    // finish() adds to every accessed buffer's accesses_ended, a line the neighbouring tasks' workers
    // also write: asking for all of them now overlaps those misses with each other and with the body
    // (locked adds one after another cannot overlap them). W4's workers spent a third of their time there.
    __builtin_prefetch(&access.buffer->accesses_ended, 1);
    views[i] = AccessView{access.buffer->host + access.offset, access.size};
    if (first_touch && access.mode != Access::read) {
      int unknown = -1;
      access.buffer->home_numa.compare_exchange_strong(unknown, thread.slot->numa_node,
                                                       std::memory_order_relaxed);
    }
  }
}

namespace {
constinit thread_local int running_device_index __attribute__((tls_model("initial-exec"))) = -1;
// The innermost task body on this thread's stack, linked to those it runs on top of.
constinit thread_local RunningFrame* running_frame __attribute__((tls_model("initial-exec"))) = nullptr;
// The stream a C kernel launches on (launch_closure), or nullptr.
constinit thread_local void* running_stream_handle __attribute__((tls_model("initial-exec"))) = nullptr;
// invoke_closure()'s outcome for a body that deferred its completion.
constexpr std::uint32_t outcome_deferred = 0xff;
}  // namespace

int running_device() noexcept { return running_device_index; }
TaskRecord* running_task_record() noexcept {
  return running_frame != nullptr ? running_frame->task : nullptr;
}

namespace {
// Set in a forked child's thread (the one that forked) when the fork happened inside a task body.
constinit thread_local bool forked_in_body __attribute__((tls_model("initial-exec"))) = false;
void note_fork_in_child() noexcept {
  if (running_frame != nullptr) forked_in_body = true;
}
}  // namespace

void watch_forks_inside_tasks() noexcept {
  [[maybe_unused]] static const bool registered = pthread_atfork(nullptr, nullptr, note_fork_in_child) == 0;
}
bool thread_forked_inside_a_task() noexcept { return forked_in_body; }
// A frame's `deferred` is set by defer_current_task() for its body. A flag of the frame, not of the
// record: once deferred, the record belongs to whoever completes it and may be finished and recycled
// before the body has even returned, so the worker must not look at it again.
TaskRecord* running_task_unfinished() noexcept {
  return running_frame != nullptr && !running_frame->deferred ? running_frame->task : nullptr;
}
const RunningFrame* innermost_frame() noexcept { return running_frame; }
void* running_stream() noexcept { return running_stream_handle; }

std::exception_ptr ContextImpl::launch_closure(TaskRecord* task, Device& device, void* stream) noexcept {
  try {
    const std::vector<AccessView> views = device_views(*task, device);
    task->phase.store(status_running, std::memory_order_relaxed);
    task->start_ns = monotonic_ns();
    const int outer_device = std::exchange(running_device_index, device.info().index);
    RunningFrame frame{task, running_frame, false};
    running_frame = &frame;
    void* const outer_stream = std::exchange(running_stream_handle, stream);
    struct Restore {
      int device;
      RunningFrame* frame;
      void* stream;
      ~Restore() {
        running_device_index = device;
        running_frame = frame;
        running_stream_handle = stream;
      }
    } restore{outer_device, frame.outer, outer_stream};
    task->ops->invoke(task->closure_storage(), views.data());
    return nullptr;
  } catch (...) {
    return std::current_exception();
  }
}

void throw_waits_for_dependent(const TaskRecord& running, const TaskRecord& waited, const char* what) {
  throw Error(ErrorCode::invalid_argument,
              fmt::format("{} inside task '{}' would wait for task '{}', which its accesses or `after` "
                          "order after the running task: it cannot start before that ends, so the wait "
                          "would never return",
                          what, display_name(&running), display_name(&waited)));
}

void throw_waits_for_awaiter(const TaskRecord& running, const TaskRecord& waited, const char* what) {
  throw Error(ErrorCode::invalid_argument,
              fmt::format("{} inside task '{}' would never return: what it waits for came to wait for the "
                          "task itself while it waited ('{}' awaits it, or work ordered after it, directly "
                          "or through other coroutines and tasks), and cannot end before it does",
                          what, display_name(&running), display_name(&waited)));
}

void throw_waits_for_itself(const TaskRecord& running, const char* what) {
  throw Error(ErrorCode::invalid_argument,
              fmt::format("{} inside task '{}' would wait for that task itself and never return", what,
                          display_name(&running)));
}

void throw_wait_too_deep(const ThreadState& thread, const char* what) {
  throw Error(
      ErrorCode::out_of_memory,
      fmt::format("{} inside a task nested {} deep on this thread: its stack ({} KiB) has under {} KiB "
                  "left, and the tasks a wait runs there could overflow it; nest fewer blocking "
                  "waits (a sequential cutoff; a coroutine's co_await holds no stack)",
                  what, thread.nesting, (thread.stack.high - thread.stack.low) / 1024,
                  thread.stack.reserve / 1024));
}

TaskRecord* defer_current_task() {
  TaskRecord* task = running_task_record();
  if (task == nullptr || task->kind != TaskKind::function || task->device > 0 ||
      task == &task->context->inline_spawn_record) {
    throw Error(ErrorCode::invalid_argument, "defer_current_task() outside a task running on a CPU worker");
  }
  if (!running_frame->deferred) ++task->context->current_thread().deferred_bodies;
  running_frame->deferred = true;
  return task;
}

// complete_deferred() ends a task whose body deferred its completion, on the calling thread (often a
// communication thread with no worker slot: finish() then wakes parked wait_all() callers itself).
void complete_deferred(TaskRecord* task, std::exception_ptr error) noexcept {
  ContextImpl& context = *task->context;
  context.destroy_closure(task);
  std::uint32_t outcome = status_succeeded;
  if (error != nullptr) {
    task->error = std::move(error);
    outcome = status_failed;
  }
  context.finish(task, context.current_thread(), outcome);
}

std::uint32_t ContextImpl::invoke_closure(TaskRecord* task, ThreadState& thread,
                                          const AccessView* views) noexcept {
  std::uint32_t outcome = status_succeeded;
  const int outer_device = std::exchange(running_device_index, task->device < 0 ? 0 : task->device);
  RunningFrame frame{task, running_frame, false};
  running_frame = &frame;
  // The bypass (a released successor kept to run next) is for the finishing of a task only: tasks
  // the body releases (a pool it launches, a mapping it ends) must be queued, or a wait of the body
  // for them would never end — nobody else could see them.
  const bool outer_bypass = std::exchange(thread.bypass_enabled, false);
  ++thread.nesting;
  try {
    task->ops->invoke(task->closure_storage(), views);
  } catch (...) {
    task->error = std::current_exception();
    outcome = status_failed;
  }
  --thread.nesting;
  thread.bypass_enabled = outer_bypass;
  running_frame = frame.outer;
  running_device_index = outer_device;
  // A body that threw is not deferred (the contract: nothing may throw after deferring).
  if (frame.deferred) {
    --thread.deferred_bodies;
    if (outcome == status_succeeded) return outcome_deferred;
  }
  return outcome;
}

void ContextImpl::run_spawn_inline(void (*body)(void*), void* closure) noexcept {
  ThreadState& thread = current_thread();
  WorkerSlot& slot = *thread.slot;
  WorkerSlot::bump(slot.stats.tasks_run);
  const std::uint64_t tasks_run = slot.stats.tasks_run.load(std::memory_order_relaxed);
  thread.count_submitted();
  const int outer_device = std::exchange(running_device_index, 0);
  RunningFrame frame{&inline_spawn_record, running_frame, false};
  running_frame = &frame;
  const bool outer_bypass = std::exchange(thread.bypass_enabled, false);
  ++thread.nesting;
  try {
    body(closure);
  } catch (...) {
    (void)keep_root_error(std::current_exception());  // nobody holds a handle to forget it through
  }
  --thread.nesting;
  thread.bypass_enabled = outer_bypass;
  running_frame = frame.outer;
  running_device_index = outer_device;
  thread.count_completed();
  // A wait inside the body ran tasks in slot 0, maybe from the submitter's deque: the workers must
  // hear of what is left there, as after any stay in slot 0.
  scheduler.release_master(thread, slot.stats.tasks_run.load(std::memory_order_relaxed) != tasks_run);
  wake_root_waiters();
}

void ContextImpl::abandon_spawn() noexcept { scheduler.release_master(current_thread(), false); }

namespace {

// refuse_late_task(): the error of a task picked after shutdown, which never runs.
void refuse_late_task(TaskRecord* task) noexcept {
  try {
    task->error = std::make_exception_ptr(
        Error(ErrorCode::invalid_argument,
              fmt::format("task '{}' was submitted while its context was being destroyed, too late to be "
                          "waited for: it never ran",
                          display_name(task))));
  } catch (...) {  // out of memory for the message
    task->error = std::current_exception();
  }
}

}  // namespace

void ContextImpl::execute(TaskRecord* task, ThreadState& thread) {
  std::uint32_t outcome = status_cancelled;
  const bool cancelled =
      task->cancel_pending.load(std::memory_order_acquire) ||
      (task->group != nullptr && task->group->cancel_requested.load(std::memory_order_acquire));
  if (!cancelled && shut_down.load(std::memory_order_acquire)) [[unlikely]] {
    // Submitted (through a TaskGroup, from another thread) while the context was being destroyed,
    // too late to be waited for: never run — its buffers' data may be gone. It fails, so that the
    // group's wait says so instead of returning as if it had run.
    refuse_late_task(task);
    outcome = status_failed;
  } else if (!cancelled) {
    task->phase.store(status_running, std::memory_order_relaxed);
    if (task->access_count == 0) {  // fork-join: no views to fill
      outcome = invoke_closure(task, thread, nullptr);
    } else if (task->access_count <= max_inline_views) [[likely]] {
      AccessView views[max_inline_views];
      fill_views(task, thread, views);
      outcome = invoke_closure(task, thread, views);
    } else {
      std::vector<AccessView> views(task->access_count);
      fill_views(task, thread, views.data());
      outcome = invoke_closure(task, thread, views.data());
    }
    if (outcome == outcome_deferred) return;  // complete_deferred() finishes it; `task` is not ours now
  } else if (task->cancel_cause == TaskRecord::CancelCause::data) [[unlikely]] {
    outcome = status_failed;  // its input could not be brought: it fails, it was not cancelled
  }
  destroy_closure(task);
  // A task of the fork-join fast path that succeeded is finished here: no accesses to retire, no
  // successors, no handle, no pool, no device, nothing recorded (finish() would test each of them:
  // ~60 instructions of W2's ~700 per task, callgrind).
  if (outcome == status_succeeded && task->lean == lean_pristine && lean_runs_on_host() && !times_tasks)
      [[likely]] {
    task->status.store(status_succeeded, std::memory_order_release);
    if (task->group != nullptr) finish_group_member(task->group);
    thread.count_completed();
    if (thread.slot == nullptr) wake_root_waiters();
    records.free_pristine(thread.records, task);
    return;
  }
  finish(task, thread, outcome);
}

void ContextImpl::finish(TaskRecord* task, ThreadState& thread, std::uint32_t outcome) {
  // Nothing is held on the host (CoherenceEngine::release).
  if (task->device > 0 && coherence != nullptr) {
    coherence->release(task, devices[static_cast<std::size_t>(task->device) - 1]->memory().index());
  }
  if (task->kind != TaskKind::pool_gate) {
    for (std::size_t i = 0; i < task->access_count; ++i) retire_task_access(task->accesses[i].buffer);
  }
  const bool counted = task->kind != TaskKind::host_access;
  if (outcome == status_failed || outcome == status_cancelled) {
    if (outcome == status_failed) note_failure_origin(*task);
    const bool requested = outcome == status_cancelled && task->error == nullptr;
    std::exception_ptr reported = outcome == status_failed ? task->error : cancellation_error(task);
    // A group or pool keeps its first failure for its wait; the others are logged (cancellations
    // caused by the kept one would only repeat it).
    if (task->pool != nullptr && task->kind == TaskKind::function) {
      if (outcome != status_failed) {
        task->pool->first_cancellation.record(reported);
      } else if (!task->pool->first_error.record(reported)) {
        log_unkept_failure(task->pool->first_error, reported, "task pool");
      }
    } else if (task->group != nullptr) {
      KeptFailure& kept = task->group->first_error;
      if (!requested && !kept.record(reported) && outcome == status_failed && !task->group->quiet_failures)
        log_unkept_failure(kept, reported, "task group");
    } else if (outcome == status_failed && task->kind == TaskKind::function) {
      record_root_error(*task);  // reported is its error
    }
  }
  if (times_tasks) [[unlikely]] {  // the task's end and outcome, before any successor is ready
    if (MonitoredRun* run = thread.perf_run; run != nullptr && run->task == task)
      perf->cpu_run_finished(thread, *run, outcome);
  }
  if (task->lean) {
    task->status.store(outcome, std::memory_order_release);  // nobody waits for it or follows it
  } else {
    const std::uint32_t previous = task->status.exchange(outcome, std::memory_order_acq_rel);
    if ((previous & status_waiters_bit) != 0) scheduler.waiters().wake(task);
    close_and_release(task, outcome != status_succeeded,
                      [&](TaskRecord* successor) { make_ready(successor, thread, false); });
  }
  // Only members report to their pool: once a gate's status is published the pool may be gone.
  if (task->pool != nullptr && task->kind == TaskKind::function) task->pool->member_finished(thread);
  if (GroupState* group = task->group) {
    if (may_be_ordered(*task)) group->ordered_members.fetch_sub(1, std::memory_order_release);
    finish_group_member(group);
  }
  if (counted) thread.count_completed();
  if (task->kind == TaskKind::pool_gate) pool_gates_completed.fetch_add(1, std::memory_order_release);
  if (thread.slot == nullptr) wake_root_waiters();
  // The fork-join fast path's task changed no cold field but its name, unless it failed or was
  // cancelled (error), was recorded (times) or was placed (device: only where some device runs
  // plain closures, host_bound_in_place()): its release need not look.
  if (task->lean == lean_pristine && outcome == status_succeeded && lean_runs_on_host()) [[likely]] {
    records.free_pristine(thread.records, task);
    return;
  }
  release_task(task, thread);
}

void ContextImpl::finish_group_member(GroupState* group) noexcept {
  const std::int64_t before = group->pending.fetch_sub(1, std::memory_order_acq_rel);
  if ((before & GroupState::count_mask) == 1 && before >= GroupState::parked_one) [[unlikely]] {
    void* coroutine = nullptr;
    const TaskRecord* root = nullptr;
    if ((before & GroupState::coroutine_parked) != 0) {
      // The parked coroutine keeps the group alive until it resumes. Its root is read before its
      // continuation is taken: from then on another coroutine may park there and write its own.
      root = group->continuation_root.load(std::memory_order_relaxed);
      coroutine = group->continuation.exchange(nullptr, std::memory_order_acq_rel);
      // Cleared by the taker, not by the coroutine once it runs: the reused group's next awaiter
      // (park_in_group() waits for this) must not add its bit to this one's (they overflowed into
      // the sign, and that awaiter was never resumed). The last touch of the group.
      if (coroutine != nullptr)
        group->pending.fetch_sub(GroupState::coroutine_parked, std::memory_order_acq_rel);
    }
    scheduler.waiters().wake(group);  // by address only: the group may be gone already
    if (coroutine != nullptr) resume_group_continuation(coroutine, root);
  }
}

// Idle workers wake wait_all() callers; a completion on a device or copy-engine thread (no worker
// slot) may be the last one while every worker sleeps, so it must wake them itself.
void ContextImpl::wake_root_waiters() noexcept {
  if (root_parked.load(std::memory_order_seq_cst) > 0) scheduler.waiters().wake(&root_parked);
}

void ContextImpl::release_task(TaskRecord* task, ThreadState& thread) noexcept {
  // A lean task's only reference is the runtime's: no atomic decrement needed.
  if (!task->lean && !release_record(task)) return;
  records.free(thread.records, task);  // with its accesses and dependency nodes
}

}  // namespace nerve::detail
