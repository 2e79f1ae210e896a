#include "task/dependency_tracker.hpp"

#include <algorithm>
#include <iterator>
#include <utility>

#include "task/task_graph.hpp"
#include "task/task_record.hpp"

namespace nerve::detail {
void DependencyTracker::retain_task(TaskRecord* task) noexcept { retain_record(task); }
void DependencyTracker::release_task(TaskRecord* task) noexcept { release(task); }

DependencyTracker::DependencyTracker(std::size_t bytes)
    : bytes_(bytes), single_{0, bytes == 0 ? 1 : bytes, nullptr, {}} {}

DependencyTracker::~DependencyTracker() { clear(); }

void DependencyTracker::forget(const TaskRecord* task, std::size_t offset, std::size_t size) noexcept {
  for_overlapping(*this, offset, size, [&](Segment& segment) {
    if (segment.writer == task) {
      release_task(segment.writer);
      segment.writer = nullptr;
    }
    const auto kept = std::remove_if(segment.readers.begin(), segment.readers.end(), [&](TaskRecord* reader) {
      if (reader != task) return false;
      release_task(reader);
      return true;
    });
    segment.readers.erase_from(kept);
  });
}

void DependencyTracker::clear() noexcept {
  const auto release_all = [](Segment& segment) noexcept {
    if (segment.writer != nullptr) release_task(segment.writer);
    for (TaskRecord* reader : segment.readers) release_task(reader);
    segment.writer = nullptr;
    segment.readers.clear();
  };
  release_all(single_);
  if (spill_ != nullptr) {
    for (auto& [end, segment] : *spill_) release_all(segment);
    unsplit(spill_->begin());  // keeps a segment's reader room, as single_ keeps its own
  }
}

void DependencyTracker::spill(std::size_t position) {
  // The map, its nodes and the copy of the readers may throw; the references are taken once they are
  // all made.
  auto halves = std::make_unique<SegmentMap>();
  const auto left = halves->emplace_hint(halves->end(), position, Segment{0, position, nullptr, {}});
  const auto right =
      halves->emplace_hint(halves->end(), bytes_, Segment{position, bytes_, single_.writer, single_.readers});
  left->second.writer = std::exchange(single_.writer, nullptr);
  left->second.readers = std::move(single_.readers);
  if (right->second.writer != nullptr) retain_task(right->second.writer);
  for (TaskRecord* reader : right->second.readers) retain_task(reader);
  spill_ = std::move(halves);
}

DependencyTracker::SegmentMap::iterator DependencyTracker::split_at(std::size_t position) {
  if (position >= bytes_) return spill_->end();
  const auto holder = spill_->upper_bound(position);
  Segment& right = holder->second;
  if (right.begin == position) return holder;
  // Both parts keep the state: the one before `position` is the new node. The node and the copy may
  // throw; the references are taken after.
  const auto left =
      spill_->emplace_hint(holder, position, Segment{right.begin, position, right.writer, right.readers});
  if (left->second.writer != nullptr) retain_task(left->second.writer);
  for (TaskRecord* reader : left->second.readers) retain_task(reader);
  right.begin = position;
  return holder;
}

std::pair<DependencyTracker::SegmentMap::iterator, DependencyTracker::SegmentMap::iterator>
DependencyTracker::split_range(std::size_t offset, std::size_t size) {
  if (spill_ == nullptr) spill(offset != 0 ? offset : offset + size);
  const auto last = split_at(offset + size);
  return {split_at(offset), last};
}

std::size_t DependencyTracker::reserve_in_segments(std::size_t offset, std::size_t size, Access mode,
                                                   std::size_t own_accesses, std::size_t room) {
  // Every writer and, for a write, every reader may be reported: a bound that reads no other task's
  // status, whose line the core running that task is writing. Within `room` it is the answer.
  std::size_t named = 0;
  for_overlapping(*this, offset, size, [&](Segment& segment) {
    prefetch_named(segment, mode);
    named += named_in(segment, mode);
    if (!writes(mode) && !readers_fit(segment, own_accesses))
      make_room_for_readers(segment.readers, own_accesses);
  });
  if (named <= room) return named;
  // What register_access() will report, by its own tests: a task only ever leaves `unfinished`,
  // so the count can only fall before the registration (and it stays an upper bound).
  std::size_t predecessors = 0;
  for_overlapping(*this, offset, size, [&](const Segment& segment) {
    if (segment.writer != nullptr && (unfinished(segment.writer) || (reads(mode) && failed(segment.writer))))
      ++predecessors;
    if (writes(mode)) {
      for (const TaskRecord* reader : segment.readers) predecessors += unfinished(reader) ? 1 : 0;
    }
  });
  return predecessors;
}

// After a write, [first, last) all have its writer and no readers: they fold into one. After a read,
// the segments a slice-by-slice history left (each slice's writer, succeeded; readers that finished)
// fold once nothing tells them apart: otherwise a buffer once written in n slices would cost every
// later access to all of it n segments' work, for good. Only the segments the access covered are
// looked at (each just gained or lost the same tasks, so their outside neighbours, which did not,
// differ from them); the access's cost stays in proportion to what it covered.
void DependencyTracker::merge_equivalent(SegmentMap::iterator first, SegmentMap::iterator last) noexcept {
  // A run of segments folds into its last; the others are erased a run at a time, and not at all
  // when the buffer is whole again: freeing the map then costs no rebalancing (a read after 10^5
  // slices folds them all).
  auto run = first;
  auto previous = first;
  for (auto it = std::next(first); it != last; previous = it++) {
    Segment& left = previous->second;
    Segment& right = it->second;
    if (!equivalent(left, right)) {
      spill_->erase(run, previous);
      run = it;
      continue;
    }
    // Settled writers that differ are both dropped: neither wrote all of the merged range.
    if (left.writer != right.writer && right.writer != nullptr) {
      release_task(right.writer);
      right.writer = nullptr;
    }
    if (left.writer != nullptr) release_task(left.writer);
    for (TaskRecord* reader : left.readers) release_task(reader);
    right.begin = left.begin;
  }
  if (previous->second.begin == 0 && previous->second.end == bytes_) {
    unsplit(previous);
    return;
  }
  spill_->erase(run, previous);
}

bool DependencyTracker::equivalent(Segment& left, Segment& right) noexcept {
  // A failed or cancelled writer is never settled: its segment stays apart from any other writer's,
  // so that a later reader of it is still cancelled with its error.
  if (left.writer != right.writer && !(settled(left.writer) && settled(right.writer))) return false;
  const auto same_readers = [&] {
    return std::equal(left.readers.begin(), left.readers.end(), right.readers.begin(), right.readers.end());
  };
  if (same_readers()) return true;
  if (left.readers.size() > merge_prune_limit || right.readers.size() > merge_prune_limit) return false;
  prune_finished(left.readers);
  prune_finished(right.readers);
  return same_readers();
}

void DependencyTracker::unsplit(SegmentMap::iterator whole) noexcept {
  single_.writer = std::exchange(whole->second.writer, nullptr);
  single_.readers = std::move(whole->second.readers);
  spill_.reset();
}

void DependencyTracker::make_room_for_readers(ReaderList& readers, std::size_t more) {
  // A list is pruned when it reached twice what the last prune kept: the next prune comes after at
  // least as many more readers as it looked at, so each reader is looked at a constant number of
  // times on average, and a list holds at most about twice its live readers. (Pruning every
  // registration past 32 readers looked at all of them each time: N readers waiting on one writer
  // cost N^2 / 2 status reads, minutes at 10^5.)
  if (readers.size() >= readers.prune_at(readers_prune_threshold)) {
    prune_finished(readers);
    readers.set_prune_at(std::max(readers_prune_threshold, 2 * readers.size()));
  }
  const std::size_t needed = readers.size() + more;
  if (readers.capacity() < needed) readers.reserve(std::max(needed, 2 * readers.size()));
}

void DependencyTracker::prune_finished(ReaderList& readers) noexcept {
  auto keep = std::remove_if(readers.begin(), readers.end(), [](TaskRecord* reader) {
    if (unfinished(reader)) return false;
    release_task(reader);
    return true;
  });
  readers.erase_from(keep);
}

}  // namespace nerve::detail
