// dependency_tracker.hpp — infers a buffer's task dependencies from declared accesses.
//
// For each byte range ever accessed separately, the tracker remembers the last writer and the
// readers since that write (StarPU's sequential-consistency model). A new access depends on
// the last writer (read-after-write, write-after-write) and, if it writes, on the readers since
// (write-after-read). Ranges are kept as sorted, disjoint segments; accesses to disjoint slices
// touch disjoint segments and so never depend on each other. Segments are split on partial
// accesses and merged again when an access leaves neighbours meaning the same to every later one
// (merge_equivalent()).
//
// Cost: a buffer only ever accessed whole keeps its one segment inline (no search, no heap). Split,
// its segments are in a balanced tree, so an access costs O(log n) plus the segments it overlaps,
// whatever the order of its slices. (A sorted vector cost each split or merge in the middle a move
// of every later segment: slices written in reverse order took ~200 µs a task at 64k segments, and
// a 1-D stencil's halo reads as much.)
//
// Thread safety: callers hold lock() around register_access() / would_wait(); to give concurrent
// multi-buffer submissions one consistent order (no dependency cycles), a task locks all its buffers
// in address order before registering any access.
// Every task pointer stored here holds a reference (released on replacement or clear()).
#pragma once

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <map>
#include <memory>
#include <type_traits>
#include <utility>

#include "nerve/detail/runtime_api.hpp"

#include "task/reader_list.hpp"
#include "task/task_record.hpp"
#include "util/spin_lock.hpp"

namespace nerve::detail {

struct TaskRecord;

// A task the new access must wait for. `consumes` is true when the new access reads what the
// predecessor wrote (read-after-write): only then does the predecessor's failure cancel it. A pure
// write after a failed writer, or any write after a reader, does not consume the failed result.
struct Predecessor {
  TaskRecord* task;
  bool consumes;
};

class DependencyTracker {
 public:
  explicit DependencyTracker(std::size_t bytes);
  ~DependencyTracker();
  DependencyTracker(const DependencyTracker&) = delete;
  DependencyTracker& operator=(const DependencyTracker&) = delete;

  SpinLock& lock() noexcept { return lock_; }

  // Before register_access(), under the same hold of the lock, a submission makes every allocation
  // registration needs, so that a std::bad_alloc comes with nothing registered: split_for() makes
  // the access's bounds segment boundaries (a split changes no meaning), then, after split_for() for
  // every access the task has to this buffer, reserve_for() makes room in each segment's readers for
  // `own_accesses` more (that many accesses of the task to this buffer) and returns at most how many
  // predecessors register_access() will report for it (each report adds at most one edge): the
  // tasks it names when they are no more than `room` (the edges the task can take without
  // allocating), else the unfinished ones among them.
  // A buffer of zero bytes is tracked as one byte (single_ is [0, 1)): its accesses, all (0, 0), order
  // tasks as any buffer's do, while a zero-length slice of a longer buffer touches nothing. Applied
  // where segments are visited (for_overlapping()) and on register_access()'s whole-buffer path.
  std::size_t tracked_size(std::size_t size) const noexcept { return bytes_ == 0 ? 1 : size; }

  void split_for(std::size_t offset, std::size_t size) {
    if (size == 0 || (spill_ == nullptr && offset == 0 && size == bytes_)) return;  // the usual case
    split_range(offset, size);
  }
  std::size_t reserve_for(std::size_t offset, std::size_t size, Access mode, std::size_t own_accesses,
                          std::size_t room) {
    if (spill_ == nullptr && size != 0) {  // the usual case, inline: one segment holds the access
      if (const std::size_t named = named_if_room(mode, own_accesses, room); named != not_within_room)
        return named;
    }
    return reserve_in_segments(offset, size, mode, own_accesses, room);
  }

  // The usual access covers the whole buffer, which was never split: its one segment is single_, and
  // split_for(), reserve_for() and register_access() would each find that out again. A submission
  // whose accesses are to distinct buffers asks whole() once per access, with the lock held, and
  // calls reserve_whole() and register_whole() instead, which skip the splitting, the search and the
  // merge (W4: ~70 instructions per task of three accesses, callgrind).
  bool whole(std::size_t offset, std::size_t size) const noexcept {
    return spill_ == nullptr && offset == 0 && size == bytes_;
  }
  // reserve_whole(): reserve_for() of a whole() access that is the task's only one to this buffer.
  std::size_t reserve_whole(Access mode, std::size_t room) {
    if (const std::size_t named = named_if_room(mode, 1, room); named != not_within_room) return named;
    return reserve_in_segments(0, bytes_, mode, 1, room);
  }

  // register_access() records `task` accessing [offset, offset + size) and calls
  // on_predecessor(Predecessor) for every task it must wait for: unfinished conflicting tasks, and
  // failed writers whose data it would read (a task may be reported more than once). The callback
  // runs before the tracker drops its own reference to the predecessor, so the record is alive.
  // After split_for() and reserve_for() it allocates nothing, provided `merge` is false whenever the
  // task has another access to this buffer (a merge would undo a split another needs). With `merge`,
  // the segments the access covered are merged where they came to mean the same (merge_equivalent()).
  // Inlined: called once per access of every submission, where a call costs a W4 task ~40
  // instructions of prologue, epilogue and spilled arguments (callgrind).
  template <class OnPredecessor>
  __attribute__((always_inline)) void register_access(TaskRecord* task, std::size_t offset, std::size_t size,
                                                      Access mode, OnPredecessor&& on_predecessor,
                                                      bool merge = true);
  // register_whole(): register_access() of a whole() access, after reserve_whole().
  template <class OnPredecessor>
  __attribute__((always_inline)) void register_whole(TaskRecord* task, Access mode,
                                                     OnPredecessor&& on_predecessor) {
    register_in(single_, task, mode, on_predecessor);
  }

  // finished_sources() calls fn(task) for each finished task that an access would depend on were it
  // still running: the writer (unless register_access() reports it: a failed one a read consumes),
  // and for a write the readers still listed. register_access() leaves them out, as there is nothing
  // to wait for; the trace's flow arrows want them, as the data still came from them. A task may be
  // reported more than once.
  // A merge forgets the finished writers it folds together when they differ (merge_equivalent()), so
  // a later access to a merged range has no arrow from them: they reached the access that merged it.
  // Not inlined: only a recording run calls it, and its search inlined into the submission's loop
  // cost every W4 task ~8 instructions of closure set-up (callgrind).
  template <class Fn>
  __attribute__((noinline)) void finished_sources(std::size_t offset, std::size_t size, Access mode,
                                                  Fn&& fn) const {
    for_overlapping(*this, offset, size, [&](const Segment& segment) {
      if (segment.writer != nullptr && !unfinished(segment.writer) &&
          !(reads(mode) && failed(segment.writer)))
        fn(segment.writer);
      if (!writes(mode)) return;
      for (const TaskRecord* reader : segment.readers) {
        if (!unfinished(reader)) fn(reader);
      }
    });
  }

  // consumed_writers() calls fn(writer, begin, end) for each segment of [offset, offset + size)
  // whose writer a read there consumes and that has not succeeded (unfinished, failed or cancelled:
  // the writers register_access() reports to a read as consumed), with the segment's part of the
  // range. A pool's gate notes them before it registers (PoolState: which members a failure cancels).
  template <class Fn>
  void consumed_writers(std::size_t offset, std::size_t size, Fn&& fn) const {
    size = tracked_size(size);  // for the range reported, as for_overlapping() tracks it
    const std::size_t end = offset + size;
    for_overlapping(*this, offset, size, [&](const Segment& segment) {
      if (segment.writer != nullptr && (unfinished(segment.writer) || failed(segment.writer)))
        fn(segment.writer, std::max(segment.begin, offset), std::min(segment.end, end));
    });
  }

  // reads_failed_data(): a read of the range would be cancelled by a writer that already failed.
  bool reads_failed_data(std::size_t offset, std::size_t size) const {
    bool found = false;
    consumed_writers(offset, size, [&found](const TaskRecord* writer, std::size_t, std::size_t) {
      found = found || failed(writer);
    });
    return found;
  }

  // would_wait() is true if an access would depend on a task that has not finished.
  bool would_wait(std::size_t offset, std::size_t size, Access mode) const {
    return first_blocker(offset, size, mode, [](const TaskRecord*) { return true; }) != nullptr;
  }
  // first_blocker(): an unfinished task the access would wait for that satisfies `which`, or nullptr.
  template <class Which>
  const TaskRecord* first_blocker(std::size_t offset, std::size_t size, Access mode, Which&& which) const;

  // forget() drops `task` wherever it is the writer or a reader of [offset, offset + size): for an
  // access known to be over before the task's status says so (a host mapping at its unmap), so
  // that the next access does not load and release a record nobody needs to wait for.
  void forget(const TaskRecord* task, std::size_t offset, std::size_t size) noexcept;
  // clear() forgets every access (buffer destruction).
  void clear() noexcept;

  std::size_t segment_count() const noexcept { return spill_ == nullptr ? 1 : spill_->size(); }

  // A pool's gate has written part of the buffer (ever: never reset): its later readers note their
  // reads with the gates they meet (note_gate_reads), which other buffers' readers skip. Under lock().
  bool pool_written() const noexcept { return pool_written_; }
  void mark_pool_written() noexcept { pool_written_ = true; }

 private:
  struct Segment {
    std::size_t begin;
    std::size_t end;
    TaskRecord* writer = nullptr;
    ReaderList readers;
  };

  // Split, the segments keyed by their end: the segment holding a byte is the first whose key is above
  // it, one search (by its first byte it would take a step back as well). A split adds the part
  // before the new boundary as a node of its own and a merge folds a segment into the next, so a key
  // never changes.
  using SegmentMap = std::map<std::size_t, Segment>;

  static bool unfinished(const TaskRecord* task) noexcept { return task->load_status() < status_succeeded; }
  // A failed or cancelled task still matters to readers of its data: they are cancelled with its error.
  static bool failed(const TaskRecord* task) noexcept {
    const std::uint32_t status = task->load_status();
    return status == status_failed || status == status_cancelled;
  }
  // settled(): a writer no later access waits for or is told of: none, or one that succeeded.
  static bool settled(const TaskRecord* writer) noexcept {
    return writer == nullptr || writer->load_status() == status_succeeded;
  }
  static void retain_task(TaskRecord* task) noexcept;
  // retain_registering(): a reference to the task being registered, by its submitter while every
  // tracker the task is registered in is locked (call it nowhere else). Until those are unlocked
  // nobody else changes its count: it cannot run before its submission guard is lifted, and other
  // submissions see it only through those trackers. No locked instruction is needed.
  static void retain_registering(TaskRecord* task) noexcept {
    task->refs.store(task->refs.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  static void release_task(TaskRecord* task) noexcept;

  // spill() is the first split, at `position` (inside the buffer): single_'s state moves into spill_,
  // as two segments. split_at() makes `position` a boundary of spill_'s segments and returns the one
  // starting there (end() at bytes_): one search. An iterator to the segment that held `position`
  // now names its part after it, so of two splits the later position goes first. Both throw
  // std::bad_alloc having changed nothing.
  void spill(std::size_t position);
  SegmentMap::iterator split_at(std::size_t position);
  // split_range(): split_at() both ends of an access that is not whole(), the first split by spill();
  // returns its segments. Out of line, so that register_access() inlines small: the searches inlined
  // into the submission's loop cost W4, whose accesses never get here, instructions (callgrind).
  std::pair<SegmentMap::iterator, SegmentMap::iterator> split_range(std::size_t offset, std::size_t size);
  // for_overlapping() calls fn(segment) for each segment [offset, offset + size) overlaps, in order:
  // one search, then only those (a walk over every segment made a small access to a buffer split in
  // n cost n). An empty range overlaps the segment it falls inside, not one it starts or ends at.
  template <class Self, class Fn>
  static void for_overlapping(Self& self, std::size_t offset, std::size_t size, Fn&& fn);
  // The tasks a segment names for an access in `mode` (its writer and, for a write, its readers):
  // a bound on what register_access() reports for it that reads none of their statuses.
  static std::size_t named_in(const Segment& segment, Access mode) noexcept {
    return (segment.writer != nullptr ? 1 : 0) + (writes(mode) ? segment.readers.size() : 0);
  }
  // prefetch_named(): asks for the first line of every task named_in() counts. Registration reads
  // their statuses and drops or adds references on those lines, one task after another, between
  // locked instructions that keep the misses from overlapping; over many buffers (W4) those tasks
  // finished long ago or on another core. Asking for all of them here lets the misses overlap.
  static void prefetch_named(const Segment& segment, Access mode) noexcept {
    if (segment.writer != nullptr) __builtin_prefetch(segment.writer, 1);
    if (writes(mode)) {
      for (const TaskRecord* reader : segment.readers) __builtin_prefetch(reader, 1);
    }
  }
  // readers_fit(): room for `more` readers, and not yet time to prune the finished ones.
  static bool readers_fit(const Segment& segment, std::size_t more) noexcept {
    return segment.readers.capacity() >= segment.readers.size() + more &&
           segment.readers.size() < segment.readers.prune_at(readers_prune_threshold);
  }
  // named_if_room(): reserve_for()'s answer for an access single_ holds, which it can give without
  // allocating or reading any task's status — what named_in() counts, when that fits `room` and (for
  // a read) its readers have room for `own_accesses` more; else not_within_room.
  static constexpr std::size_t not_within_room = ~std::size_t{0};
  std::size_t named_if_room(Access mode, std::size_t own_accesses, std::size_t room) const noexcept {
    prefetch_named(single_, mode);
    const std::size_t named = named_in(single_, mode);
    return named <= room && (writes(mode) || readers_fit(single_, own_accesses)) ? named : not_within_room;
  }
  std::size_t reserve_in_segments(std::size_t offset, std::size_t size, Access mode, std::size_t own_accesses,
                                  std::size_t room);
  // register_in(): register_access()'s work on one segment the access covers.
  template <class OnPredecessor>
  __attribute__((always_inline)) void register_in(Segment& segment, TaskRecord* task, Access mode,
                                                  OnPredecessor& on_predecessor);
  // merge_equivalent(): folds each segment of [first, last) that an access just covered into the one
  // after it where they now mean the same (equivalent()); whole again, back into single_.
  void merge_equivalent(SegmentMap::iterator first, SegmentMap::iterator last) noexcept;
  // equivalent(): every later access finds the same in both: the same writer, or only settled ones,
  // and the same readers once finished ones are pruned (only lists of at most merge_prune_limit are,
  // so that a pair that stays apart costs a bounded look per access).
  static bool equivalent(Segment& left, Segment& right) noexcept;
  static constexpr std::size_t merge_prune_limit = 8;
  // unsplit(): `whole`, spill_'s segment that now covers the buffer (any other is folded into it,
  // its references released), goes back into single_.
  void unsplit(SegmentMap::iterator whole) noexcept;
  // make_room_for_readers(): room for `more` readers, pruning the finished ones first when the list
  // reached its prune mark; throws std::bad_alloc, leaving the list as valid as it was.
  static void make_room_for_readers(ReaderList& readers, std::size_t more);
  static void prune_finished(ReaderList& readers) noexcept;

  static constexpr std::size_t readers_prune_threshold = 32;

  SpinLock lock_;
  bool pool_written_ = false;
  std::size_t bytes_;
  // The segments, sorted, disjoint, covering [0, bytes_). Most buffers are only ever accessed whole:
  // their one segment is single_, in the buffer's own line, rather than behind a pointer (a dependent
  // miss on every access to a buffer another core touched last, W4's case). Split, every segment is
  // in spill_, which is otherwise null (never holds just one); single_ then names no task. A pointer
  // rather than the map itself keeps the tracker, with the counters after it, in the buffer's two
  // submission lines (BufferState's layout).
  Segment single_;
  std::unique_ptr<SegmentMap> spill_;
};

template <class Self, class Fn>
void DependencyTracker::for_overlapping(Self& self, std::size_t offset, std::size_t size, Fn&& fn) {
  size = self.tracked_size(size);
  if (size == 0) return;  // a zero-length slice overlaps nothing, not the segment around it
  const std::size_t end = offset + size;
  const auto overlaps = [&](const Segment& segment) { return segment.end > offset && segment.begin < end; };
  if (self.spill_ == nullptr) {
    if (overlaps(self.single_)) fn(self.single_);
    return;
  }
  std::conditional_t<std::is_const_v<Self>, const SegmentMap&, SegmentMap&> all = *self.spill_;
  for (auto it = all.upper_bound(offset); it != all.end() && overlaps(it->second); ++it) fn(it->second);
}

template <class Which>
const TaskRecord* DependencyTracker::first_blocker(std::size_t offset, std::size_t size, Access mode,
                                                   Which&& which) const {
  const TaskRecord* blocker = nullptr;
  for_overlapping(*this, offset, size, [&](const Segment& segment) {
    if (blocker != nullptr) return;
    if (segment.writer != nullptr && unfinished(segment.writer) && which(segment.writer)) {
      blocker = segment.writer;
      return;
    }
    if (!writes(mode)) return;
    for (const TaskRecord* reader : segment.readers) {
      if (unfinished(reader) && which(reader)) {
        blocker = reader;
        return;
      }
    }
  });
  return blocker;
}

template <class OnPredecessor>
inline void DependencyTracker::register_access(TaskRecord* task, std::size_t offset, std::size_t size,
                                               Access mode, OnPredecessor&& on_predecessor, bool merge) {
  if (spill_ == nullptr && offset == 0 && size == bytes_) {  // zero bytes too: single_ is [0, 1)
    register_in(single_, task, mode, on_predecessor);
    return;
  }
  if (size == 0) return;
  const auto [first, last] = split_range(offset, size);  // after split_for(): found, not made
  for (auto it = first; it != last; ++it) register_in(it->second, task, mode, on_predecessor);
  if (merge && std::next(first) != last) merge_equivalent(first, last);
}

template <class OnPredecessor>
inline void DependencyTracker::register_in(Segment& segment, TaskRecord* task, Access mode,
                                           OnPredecessor& on_predecessor) {
  if (segment.writer != nullptr && (unfinished(segment.writer) || (reads(mode) && failed(segment.writer)))) {
    on_predecessor(Predecessor{segment.writer, reads(mode)});
  }
  if (writes(mode)) {
    for (TaskRecord* reader : segment.readers) {
      if (unfinished(reader)) on_predecessor(Predecessor{reader, false});
      release_task(reader);
    }
    segment.readers.clear();
    retain_registering(task);
    if (segment.writer != nullptr) release_task(segment.writer);
    segment.writer = task;
  } else {
    retain_registering(task);
    segment.readers.push_back(task);  // reserve_for() made the room (and pruned at the list's mark)
  }
}

}  // namespace nerve::detail
