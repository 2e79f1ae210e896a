// pool_state.hpp — a TaskPool: mutually independent tasks launched together.
//
// Members never register with the dependency trackers. At launch a single "gate" record registers
// the union of the members' accesses (per buffer: the covering range, the combined mode); when the
// gate's predecessors are done it releases every member, and it finishes when the last member does
// — failed if any member failed, so tasks that read the pool's output are cancelled.
//
// Cancellation is per member, as for plain tasks: the gate notes at registration which writers each
// range it reads comes from (PoolOutcome::inputs), and at release cancels only the members that read
// a range whose writer failed or was cancelled, with that writer's cause; the others run. A gate
// whose members were only cancelled finishes cancelled, and cancels only the dependents that read
// what a cancelled member was to write (PoolOutcome::outputs), with that member's original cause —
// never a TaskCancelled of its own, and none when the cancellation was requested. Which part of the
// gate's data a dependent read is noted as it registers (PoolOutcome::reads): by the time the gate
// finishes, another task may have written over a cancelled member's output, and a dependent that
// read that write rather than the gate's data must run.
//
// Thread safety: add() is called by one thread at a time (the pool's filler); launch() by any
// number at once (wait_all() launches); member_finished() by workers.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

#include "nerve/detail/runtime_api.hpp"

#include "memory/buffer_state.hpp"
#include "task/task_record.hpp"
#include "util/spin_lock.hpp"

namespace nerve::detail {

struct ContextImpl;
struct ThreadState;

// PoolOutcome: what a gate keeps, in its closure bytes, for cancelling members and dependents
// precisely. Made at launch for every pool that writes or reads anything.
struct PoolOutcome {
  // A range the gate reads, and its writer (a reference, dropped at release), sorted by buffer and
  // start; the ranges of a buffer are disjoint.
  struct Input {
    BufferState* buffer;
    std::size_t begin;
    std::size_t end;
    TaskRecord* writer;
  };
  // A range a cancelled member was to write, with the cause it was cancelled with.
  struct Output {
    BufferState* buffer;
    std::size_t begin;
    std::size_t end;
    std::exception_ptr cause;
  };
  // A range of the gate's data that later work read (Read::consumer), noted as that work registers
  // (note_gate_reads): the ranges whose writer the gate then was. A cancelled member's output that
  // another task has written since is not among them, so the reader is not cancelled for it.
  struct Read {
    const TaskRecord* consumer;
    const BufferState* buffer;
    std::size_t begin;
    std::size_t end;
    // Consulted, when its consumer's edge from the gate was: spent. The consumer may finish and its
    // record carry another task, which must not meet this note.
    bool spent = false;
  };
  std::vector<Input> inputs;
  std::vector<Output> outputs;  // reserved at launch for every member that could be cancelled
  // Every consumer is cancelled with the gate's error (all members were cancelled with that cause,
  // or the gate was cancelled with no failed input to explain it).
  bool whole = false;
  // `reads`, sorted by consumer once the gate's fate is known (`reads_closed`: the first dependent
  // it cancels); readers registering after that are decided as they register. Guarded by
  // reads_lock: dependents register on different buffers at once. `reads_lost`: a note did not fit
  // in memory, and every dependent is decided by its accesses alone (which cancels more).
  // (Mutable: notes taken while the gate's outcome is otherwise only read.)
  mutable SpinLock reads_lock;
  mutable std::vector<Read> reads;
  mutable bool reads_closed = false;
  mutable bool reads_lost = false;
};

// gate_outcome(): the gate's PoolOutcome, or nullptr (a pool whose tasks access nothing).
inline PoolOutcome*& gate_outcome(TaskRecord* gate) noexcept {
  return *std::launder(reinterpret_cast<PoolOutcome**>(gate->closure));
}
inline const PoolOutcome* gate_outcome(const TaskRecord* gate) noexcept {
  return *std::launder(reinterpret_cast<PoolOutcome* const*>(gate->closure));
}

// note_gate_inputs(): fills the gate's PoolOutcome::inputs while registering it, with every tracker
// it registers in locked and split, before anything is registered; throws std::bad_alloc with
// nothing kept (the gate's references are dropped by drop_gate_inputs()).
void note_gate_inputs(TaskRecord* gate);

// unwritten_parts(): for_each_part_read() for [begin, end), past the earlier accesses before `from`.
template <class Fn>
bool unwritten_parts(const TaskRecord& task, std::size_t index, std::size_t from, std::size_t begin,
                     std::size_t end, Fn& fn) noexcept {
  if (begin >= end) return false;
  const AccessRecord& access = task.accesses[index];
  for (std::size_t j = from; j < index; ++j) {
    const AccessRecord& earlier = task.accesses[j];
    if (earlier.buffer != access.buffer || !writes(earlier.mode) || earlier.offset >= end ||
        tracked_end(earlier) <= begin)
      continue;
    return unwritten_parts(task, index, j + 1, begin, earlier.offset, fn) ||
           unwritten_parts(task, index, j + 1, tracked_end(earlier), end, fn);
  }
  return fn(begin, end);
}

// for_each_part_read(): calls fn(begin, end) for each part of `task`'s access `index` (a read) that
// none of its earlier accesses writes — what it reads of other tasks' data, as registering its
// accesses in order finds — until fn returns true; returns whether it did.
template <class Fn>
bool for_each_part_read(const TaskRecord& task, std::size_t index, Fn&& fn) noexcept {
  const AccessRecord& access = task.accesses[index];
  return unwritten_parts(task, index, 0, access.offset, tracked_end(access), fn);
}

struct PoolState {
  explicit PoolState(ContextImpl& owner) : context(owner) {}

  // make_room() readies `members` for one more (may throw bad_alloc); add() then cannot fail, so a
  // task whose accesses are already registered is never lost between the two.
  void make_room();
  void add(TaskRecord* member) noexcept;
  void launch();
  void release_members(ThreadState& thread);
  void member_finished(ThreadState& thread);
  void discard() noexcept;  // destroy members of a pool that was never launched
  // cancel_members(): at release of a cancelled gate, cancels the members that read a failed input
  // (all of them, with the gate's error, when no input explains the cancellation).
  void cancel_members() noexcept;

  ContextImpl& context;
  std::vector<TaskRecord*> members;
  std::atomic<std::int64_t> remaining{0};
  TaskRecord* gate = nullptr;
  // The members to release, copied at launch (release_members() runs on a worker and must not
  // allocate; the last member may finish the pool while it iterates, so it iterates its own copy).
  std::unique_ptr<TaskRecord*[]> release_list;
  // Set once launch() has registered the gate; launch() runs once even when wait_all() calls it
  // from several threads at once.
  std::atomic<bool> launched{false};
  std::mutex launch_mutex;
  // The first member that failed: the gate fails with its exception, and wait_all() rethrows it.
  KeptFailure first_error;
  // The first member cancelled: wait_all() rethrows its TaskCancelled when no member failed (a failure
  // says more than a cancellation caused by a task outside the pool, whichever came first).
  KeptFailure first_cancellation;
  // Set at release (before any member runs) when a member is cancelled: the gate then finishes
  // cancelled, unless a member failed.
  bool members_cancelled = false;
};

// free_pool(): releases a pool whose tasks have all ended (a launched one's gate is done), or
// discards the tasks of one never launched; then deletes it and drops its context reference.
void free_pool(PoolState* pool) noexcept;

}  // namespace nerve::detail
