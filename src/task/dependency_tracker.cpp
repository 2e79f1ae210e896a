#include "task/dependency_tracker.hpp"

#include <algorithm>

#include "task/task_graph.hpp"
#include "task/task_record.hpp"

namespace nerve::detail {
void DependencyTracker::retain_task(TaskRecord* task) noexcept { retain_record(task); }
void DependencyTracker::release_task(TaskRecord* task) noexcept { release(task); }

DependencyTracker::DependencyTracker(std::size_t bytes)
    : bytes_(bytes), single_{0, bytes == 0 ? 1 : bytes, nullptr, {}} {}

DependencyTracker::~DependencyTracker() { clear(); }

void DependencyTracker::forget(const TaskRecord* task, std::size_t offset, std::size_t size) noexcept {
  const std::size_t end = offset + size;
  for (Segment& segment : segments()) {
    if (segment.end <= offset || segment.begin >= end) continue;
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
  }
}

void DependencyTracker::clear() noexcept {
  for (Segment& segment : segments()) {
    if (segment.writer != nullptr) release_task(segment.writer);
    for (TaskRecord* reader : segment.readers) release_task(reader);
    segment.writer = nullptr;
    segment.readers.clear();
  }
  if (!spill_.empty()) {
    single_ = std::move(spill_.front());
    single_.end = bytes_ == 0 ? 1 : bytes_;
    spill_.clear();
  }
}

std::size_t DependencyTracker::split_at(std::size_t position) {
  const std::span<Segment> all = segments();
  auto it = std::upper_bound(all.begin(), all.end(), position,
                             [](std::size_t value, const Segment& s) { return value < s.end; });
  const auto index = static_cast<std::size_t>(it - all.begin());
  if (index == all.size() || all[index].begin == position) return index;
  // Split the segment at `index` into [begin, position) and [position, end): both halves keep the
  // state. The copy and the insertion may throw; the references are taken once both are done.
  Segment right{position, all[index].end, all[index].writer, all[index].readers};
  if (spill_.empty()) {  // the first split: the one segment moves out of single_ (index is 0)
    spill_.reserve(4);
    spill_.push_back(std::move(single_));  // into reserved room: a segment moves without throwing
    single_.writer = nullptr;
    spill_.push_back(std::move(right));
  } else {
    spill_.insert(spill_.begin() + static_cast<std::ptrdiff_t>(index) + 1, std::move(right));
  }
  Segment& inserted = spill_[index + 1];
  if (inserted.writer != nullptr) retain_task(inserted.writer);
  for (TaskRecord* reader : inserted.readers) retain_task(reader);
  spill_[index].end = position;
  return index + 1;
}

void DependencyTracker::split_around(std::size_t offset, std::size_t size) {
  split_at(offset);
  split_at(offset + size);
}

std::size_t DependencyTracker::reserve_in_segments(std::size_t offset, std::size_t size, Access mode,
                                                   std::size_t own_accesses, std::size_t room) {
  if (size == 0) return 0;
  const std::size_t end = offset + size;
  // The first segment ending after `offset`, as in split_at().
  const std::span<Segment> all = segments();
  const auto first = std::upper_bound(all.begin(), all.end(), offset,
                                      [](std::size_t value, const Segment& s) { return value < s.end; });
  // Every writer and, for a write, every reader may be reported: a bound that reads no other task's
  // status, whose line the core running that task is writing. Within `room` it is the answer.
  std::size_t named = 0;
  for (auto it = first; it != all.end() && it->begin < end; ++it) {
    Segment& segment = *it;
    prefetch_named(segment, mode);
    named += named_in(segment, mode);
    if (!writes(mode) && !readers_fit(segment, own_accesses))
      make_room_for_readers(segment.readers, own_accesses);
  }
  if (named <= room) return named;
  // What register_access() will report, by its own tests: a task only ever leaves `unfinished`,
  // so the count can only fall before the registration (and it stays an upper bound).
  std::size_t predecessors = 0;
  for (auto it = first; it != all.end() && it->begin < end; ++it) {
    const Segment& segment = *it;
    if (segment.writer != nullptr && (unfinished(segment.writer) || (reads(mode) && failed(segment.writer))))
      ++predecessors;
    if (writes(mode)) {
      for (const TaskRecord* reader : segment.readers) predecessors += unfinished(reader) ? 1 : 0;
    }
  }
  return predecessors;
}

// After a write, [first, last) all have the same writer and no readers: fold them into one.
void DependencyTracker::merge_around(std::size_t first, std::size_t last) {
  for (std::size_t i = first + 1; i < last; ++i) {
    if (spill_[i].writer != nullptr) release_task(spill_[i].writer);
  }
  spill_[first].end = spill_[last - 1].end;
  spill_.erase(spill_.begin() + static_cast<std::ptrdiff_t>(first) + 1,
               spill_.begin() + static_cast<std::ptrdiff_t>(last));
  if (spill_.size() == 1) {  // whole again: back into single_
    single_ = std::move(spill_.front());
    spill_.clear();
  }
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
