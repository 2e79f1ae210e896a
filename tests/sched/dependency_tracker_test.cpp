// The dependency tracker's reservation (reserve_for) against what registration then reports: the
// bound must never be smaller (submission reserves that many dependency nodes and must not
// allocate afterwards), it names every tracked task while they fit the room given (without reading
// their status), and counts exactly the ones registration will report when they do not.
#include "task/dependency_tracker.hpp"

#include <cstddef>
#include <memory>
#include <random>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "nerve/nerve.hpp"

#include "task/task_record.hpp"

namespace nerve::detail {
namespace {

// Records owned by the test: each holds one reference of its own, so the tracker's releases (which
// go through the record's context) never recycle them.
class Records {
 public:
  Records() : context_(nerve::Settings().use_environment(false).set("parallel.thread_pool_size", "1")) {}

  TaskRecord* make(std::uint32_t status) {
    records_.push_back(std::make_unique<TaskRecord>());
    TaskRecord* record = records_.back().get();
    record->context = context_.impl();
    record->refs.store(1, std::memory_order_relaxed);
    record->status.store(status, std::memory_order_relaxed);
    return record;
  }

 private:
  nerve::Context context_;
  std::vector<std::unique_ptr<TaskRecord>> records_;
};

std::size_t registered_reports(DependencyTracker& tracker, TaskRecord* task, std::size_t offset,
                               std::size_t size, Access mode) {
  std::size_t reports = 0;
  tracker.split_for(offset, size);
  tracker.register_access(task, offset, size, mode, [&](Predecessor) { ++reports; });
  return reports;
}

TEST(DependencyTracker, ReserveNamesTrackedTasksWithinRoomAndCountsUnfinishedBeyond) {
  Records records;
  DependencyTracker tracker(64);
  TaskRecord* writer = records.make(status_succeeded);
  EXPECT_EQ(registered_reports(tracker, writer, 0, 64, Access::write), 0u);
  TaskRecord* finished_reader = records.make(status_pending);
  TaskRecord* running_reader = records.make(status_pending);
  EXPECT_EQ(registered_reports(tracker, finished_reader, 0, 64, Access::read), 0u);
  EXPECT_EQ(registered_reports(tracker, running_reader, 0, 64, Access::read), 0u);
  finished_reader->status.store(status_succeeded, std::memory_order_relaxed);

  // A write names the writer and both readers (3); only the running reader will be reported.
  EXPECT_EQ(tracker.reserve_for(0, 64, Access::write, 1, 3), 3u);
  EXPECT_EQ(tracker.reserve_for(0, 64, Access::write, 1, 2), 1u);
  EXPECT_EQ(tracker.reserve_for(0, 64, Access::write, 1, 0), 1u);
  // A read waits for no reader: the finished writer is named within the room, not counted beyond it.
  EXPECT_EQ(tracker.reserve_for(0, 64, Access::read, 1, 4), 1u);
  EXPECT_EQ(tracker.reserve_for(0, 64, Access::read, 1, 0), 0u);
  // A failed writer is reported to readers: counted even beyond the room.
  writer->status.store(status_failed, std::memory_order_relaxed);
  EXPECT_EQ(tracker.reserve_for(0, 64, Access::read, 1, 0), 1u);

  TaskRecord* next = records.make(status_pending);
  EXPECT_EQ(registered_reports(tracker, next, 0, 64, Access::write), 1u);
  tracker.clear();
}

// A buffer of zero bytes orders its accesses as any buffer does (its one byte of tracking stands for
// it, through every entry point); a zero-length slice of a longer buffer conflicts with nothing.
TEST(DependencyTracker, AnEmptyBufferOrdersItsAccessesAndAnEmptySliceNothing) {
  Records records;
  DependencyTracker empty(0);
  TaskRecord* writer = records.make(status_pending);
  EXPECT_TRUE(empty.whole(0, 0));
  EXPECT_EQ(empty.reserve_whole(Access::write, 0), 0u);
  EXPECT_EQ(registered_reports(empty, writer, 0, 0, Access::write), 0u);
  EXPECT_EQ(empty.reserve_for(0, 0, Access::read, 1, 0), 1u);
  EXPECT_EQ(empty.reserve_whole(Access::read, 0), 1u);
  EXPECT_TRUE(empty.would_wait(0, 0, Access::read));
  TaskRecord* reader = records.make(status_pending);
  EXPECT_EQ(registered_reports(empty, reader, 0, 0, Access::read), 1u);
  empty.forget(writer, 0, 0);
  EXPECT_EQ(empty.first_blocker(0, 0, Access::write, [](const TaskRecord*) { return true; }), reader);
  empty.clear();

  DependencyTracker longer(64);
  TaskRecord* whole_writer = records.make(status_pending);
  EXPECT_EQ(registered_reports(longer, whole_writer, 0, 64, Access::write), 0u);
  EXPECT_FALSE(longer.would_wait(16, 0, Access::read_write));
  TaskRecord* slice_writer = records.make(status_pending);
  EXPECT_EQ(registered_reports(longer, slice_writer, 16, 0, Access::read_write), 0u);
  longer.clear();
}

// The statuses a random history gives its tasks (two unfinished first, then the three terminal
// ones) and the access modes it draws from.
constexpr std::uint32_t statuses[] = {status_pending, status_running, status_succeeded, status_failed,
                                      status_cancelled};
constexpr Access modes[] = {Access::read, Access::write, Access::read_write};

// Random histories over split segments: for every access, the bound given any room is at least
// what registration reports, and equals it when the room is zero.
TEST(DependencyTracker, ReservationBoundsEveryRegistrationOverRandomHistories) {
  constexpr std::size_t bytes = 256;
  std::mt19937 random(20261201);
  for (int history = 0; history < 50; ++history) {
    Records records;
    DependencyTracker tracker(bytes);
    std::vector<TaskRecord*> registered;
    for (int step = 0; step < 60; ++step) {
      // Tasks finish, fail or are cancelled at random between submissions.
      for (TaskRecord* task : registered) {
        if (task->load_status() < status_succeeded && random() % 4 == 0)
          task->status.store(statuses[2 + random() % 3], std::memory_order_relaxed);
      }
      const std::size_t offset = random() % bytes;
      const std::size_t size = 1 + random() % (bytes - offset);
      const Access mode = modes[random() % 3];
      tracker.split_for(offset, size);
      const std::size_t room = random() % 6;
      const std::size_t bound = tracker.reserve_for(offset, size, mode, 1, room);
      const std::size_t exact = tracker.reserve_for(offset, size, mode, 1, 0);
      TaskRecord* task = records.make(statuses[random() % 2]);
      std::size_t reports = 0;
      tracker.register_access(task, offset, size, mode, [&](Predecessor) { ++reports; });
      ASSERT_GE(bound, reports) << "history " << history << " step " << step;
      ASSERT_EQ(exact, reports) << "history " << history << " step " << step;
      registered.push_back(task);
    }
    tracker.clear();
  }
}

// The whole-buffer path (whole(), reserve_whole(), register_whole()) that submissions take for an
// access covering an unsplit buffer gives what the general path gives: two trackers fed the same
// random history, one through each path, reserve and report alike and name the same tasks after.
TEST(DependencyTracker, WholeAccessPathMatchesTheGeneralPath) {
  constexpr std::size_t bytes = 64;
  std::mt19937 random(20261202);
  Records records;
  DependencyTracker general(bytes);
  DependencyTracker fast(bytes);
  std::vector<TaskRecord*> registered;
  for (int step = 0; step < 400; ++step) {
    for (TaskRecord* task : registered) {
      if (task->load_status() < status_succeeded && random() % 3 == 0)
        task->status.store(statuses[2 + random() % 3], std::memory_order_relaxed);
    }
    const Access mode = modes[random() % 3];
    ASSERT_TRUE(fast.whole(0, bytes));
    const std::size_t room = random() % 4;
    general.split_for(0, bytes);
    ASSERT_EQ(fast.reserve_whole(mode, room), general.reserve_for(0, bytes, mode, 1, room))
        << "step " << step;
    TaskRecord* task = records.make(statuses[random() % 2]);
    std::vector<Predecessor> general_reports;
    std::vector<Predecessor> fast_reports;
    general.register_access(task, 0, bytes, mode, [&](Predecessor p) { general_reports.push_back(p); });
    fast.register_whole(task, mode, [&](Predecessor p) { fast_reports.push_back(p); });
    ASSERT_EQ(fast_reports.size(), general_reports.size()) << "step " << step;
    for (std::size_t i = 0; i < fast_reports.size(); ++i) {
      EXPECT_EQ(fast_reports[i].task, general_reports[i].task);
      EXPECT_EQ(fast_reports[i].consumes, general_reports[i].consumes);
    }
    registered.push_back(task);
  }
  // Each task is named by both trackers, or by neither: twice the references, or none, it took.
  for (TaskRecord* task : registered) EXPECT_EQ((task->refs.load() - 1) % 2, 0) << task;
  general.clear();
  fast.clear();
  for (TaskRecord* task : registered) EXPECT_EQ(task->refs.load(), 1);
}

// whole() holds only for an access to all of a buffer that was never split, or was merged back whole
// by a write — an empty buffer's too (its one byte of tracking), not an empty slice of a longer one.
TEST(DependencyTracker, WholeOnlyForTheWholeUnsplitBuffer) {
  Records records;
  DependencyTracker tracker(64);
  EXPECT_TRUE(tracker.whole(0, 64));
  EXPECT_FALSE(tracker.whole(0, 32));
  EXPECT_FALSE(tracker.whole(32, 32));
  EXPECT_FALSE(tracker.whole(0, 0));
  DependencyTracker empty(0);
  EXPECT_TRUE(empty.whole(0, 0));
  TaskRecord* part = records.make(status_pending);
  EXPECT_EQ(registered_reports(tracker, part, 16, 16, Access::write), 0u);
  EXPECT_FALSE(tracker.whole(0, 64));  // split in three
  TaskRecord* all = records.make(status_pending);
  EXPECT_EQ(registered_reports(tracker, all, 0, 64, Access::write), 1u);
  EXPECT_TRUE(tracker.whole(0, 64));  // the write merged it back
  tracker.clear();
}

// forget() (a host mapping at its unmap) removes exactly that task, wherever it is tracked, with the
// tracker's references to it, even while its status still says unfinished; the others stay.
TEST(DependencyTracker, ForgetDropsOnlyThatTaskAndTheReferencesToIt) {
  Records records;
  DependencyTracker tracker(64);
  TaskRecord* writer = records.make(status_pending);
  TaskRecord* mapping = records.make(status_pending);
  TaskRecord* reader = records.make(status_pending);
  EXPECT_EQ(registered_reports(tracker, writer, 0, 64, Access::write), 0u);
  EXPECT_EQ(registered_reports(tracker, mapping, 0, 32, Access::read), 1u);
  EXPECT_EQ(registered_reports(tracker, reader, 0, 64, Access::read), 2u);  // the writer, per segment
  ASSERT_EQ(mapping->refs.load(), 2);
  ASSERT_EQ(reader->refs.load(), 3);

  tracker.forget(mapping, 0, 32);
  EXPECT_EQ(mapping->refs.load(), 1);
  EXPECT_EQ(reader->refs.load(), 3);
  EXPECT_EQ(writer->refs.load(), 3);
  // A write now waits for the writer and the reader on both segments, not for the mapping.
  EXPECT_EQ(tracker.reserve_for(0, 64, Access::write, 1, 0), 4u);

  // A write mapping forgotten leaves nothing to wait for, though it is still unfinished.
  writer->status.store(status_succeeded, std::memory_order_relaxed);
  reader->status.store(status_succeeded, std::memory_order_relaxed);
  TaskRecord* write_mapping = records.make(status_pending);
  EXPECT_EQ(registered_reports(tracker, write_mapping, 0, 64, Access::write), 0u);
  EXPECT_EQ(tracker.reserve_for(0, 64, Access::read, 1, 0), 1u);
  tracker.forget(write_mapping, 0, 64);
  EXPECT_EQ(write_mapping->refs.load(), 1);
  EXPECT_EQ(tracker.reserve_for(0, 64, Access::read, 1, 0), 0u);
  EXPECT_EQ(tracker.reserve_for(0, 64, Access::write, 1, 0), 0u);
  EXPECT_EQ(writer->refs.load(), 1);
  EXPECT_EQ(reader->refs.load(), 1);
  tracker.clear();
}

// Regression (slices then whole reads): a buffer written in n slices, in any order, kept its n
// segments for good, since only a write merged them, so every later read of all of it cost n
// segments' work (5 ms a reader at 10^5 slices). Once the slices' writers have succeeded, a read
// covering them folds them into one: the buffer is whole again, and a write after names only the
// readers, each once.
TEST(DependencyTracker, ReadAfterSucceededSliceWritersMergesTheSlices) {
  constexpr std::size_t slices = 64;
  constexpr std::size_t bytes = slices * 16;
  Records records;
  DependencyTracker tracker(bytes);
  std::vector<TaskRecord*> writers;
  for (std::size_t i = slices; i-- > 0;) {  // in reverse order
    writers.push_back(records.make(status_pending));
    EXPECT_EQ(registered_reports(tracker, writers.back(), i * 16, 16, Access::write), 0u);
  }
  ASSERT_EQ(tracker.segment_count(), slices);

  // Unfinished writers differ: a read waits for each, and the slices stay apart.
  TaskRecord* early = records.make(status_pending);
  EXPECT_EQ(registered_reports(tracker, early, 0, bytes, Access::read), slices);
  EXPECT_EQ(tracker.segment_count(), slices);

  for (TaskRecord* writer : writers) writer->status.store(status_succeeded, std::memory_order_relaxed);
  TaskRecord* late = records.make(status_pending);
  EXPECT_EQ(registered_reports(tracker, late, 0, bytes, Access::read), 0u);
  EXPECT_EQ(tracker.segment_count(), 1u);
  EXPECT_TRUE(tracker.whole(0, bytes));
  // A whole read names no writer now, where it named all 64 before; a write names the two readers.
  EXPECT_EQ(tracker.reserve_for(0, bytes, Access::read, 1, slices), 0u);
  EXPECT_EQ(tracker.reserve_for(0, bytes, Access::write, 1, slices), 2u);
  for (TaskRecord* writer : writers) EXPECT_EQ(writer->refs.load(), 1);
  EXPECT_EQ(early->refs.load(), 2);
  EXPECT_EQ(late->refs.load(), 2);
  tracker.clear();
}

// Segments that a read covers and whose readers differ merge once the readers that told them apart
// have finished (pruned for the comparison); one writer of both stays named, for the trace's arrows.
TEST(DependencyTracker, ReadMergesSegmentsOnceTheReadersThatToldThemApartFinished) {
  Records records;
  DependencyTracker tracker(64);
  TaskRecord* writer = records.make(status_succeeded);
  EXPECT_EQ(registered_reports(tracker, writer, 0, 64, Access::write), 0u);
  TaskRecord* half_reader = records.make(status_pending);
  EXPECT_EQ(registered_reports(tracker, half_reader, 0, 32, Access::read), 0u);
  TaskRecord* first = records.make(status_pending);
  EXPECT_EQ(registered_reports(tracker, first, 0, 64, Access::read), 0u);
  EXPECT_EQ(tracker.segment_count(), 2u);  // the half reader still runs

  half_reader->status.store(status_succeeded, std::memory_order_relaxed);
  TaskRecord* second = records.make(status_pending);
  EXPECT_EQ(registered_reports(tracker, second, 0, 64, Access::read), 0u);
  EXPECT_EQ(tracker.segment_count(), 1u);
  EXPECT_EQ(half_reader->refs.load(), 1);
  EXPECT_EQ(first->refs.load(), 2);
  std::vector<const TaskRecord*> sources;
  tracker.finished_sources(0, 64, Access::read, [&](const TaskRecord* source) { sources.push_back(source); });
  EXPECT_EQ(sources, std::vector<const TaskRecord*>{writer});
  EXPECT_EQ(tracker.reserve_for(0, 64, Access::write, 1, 0), 2u);  // first and second, once each
  tracker.clear();
}

// A failed or cancelled writer's data must still cancel its later readers: its segment never merges
// with another writer's (succeeded, or none), though parts of its own range fold back together.
TEST(DependencyTracker, FailedWritersSurviveMerges) {
  Records records;
  DependencyTracker tracker(64);
  TaskRecord* succeeded = records.make(status_pending);
  TaskRecord* failing = records.make(status_pending);
  TaskRecord* cancelled = records.make(status_pending);
  EXPECT_EQ(registered_reports(tracker, succeeded, 0, 16, Access::write), 0u);
  EXPECT_EQ(registered_reports(tracker, failing, 16, 16, Access::write), 0u);
  EXPECT_EQ(registered_reports(tracker, cancelled, 32, 16, Access::write), 0u);
  TaskRecord* part = records.make(status_pending);
  EXPECT_EQ(registered_reports(tracker, part, 20, 8, Access::read), 1u);  // [16, 32) in three
  ASSERT_EQ(tracker.segment_count(), 6u);
  succeeded->status.store(status_succeeded, std::memory_order_relaxed);
  failing->status.store(status_failed, std::memory_order_relaxed);
  cancelled->status.store(status_cancelled, std::memory_order_relaxed);
  part->status.store(status_cancelled, std::memory_order_relaxed);

  TaskRecord* reader = records.make(status_pending);
  std::vector<Predecessor> reports;
  tracker.split_for(0, 64);
  tracker.register_access(reader, 0, 64, Access::read, [&](Predecessor p) { reports.push_back(p); });
  ASSERT_EQ(reports.size(), 4u);  // the failed writer in each of its three segments, the cancelled one
  for (const Predecessor& report : reports) {
    EXPECT_TRUE(report.task == failing || report.task == cancelled);
    EXPECT_TRUE(report.consumes);
  }
  // The failed writer's three segments are one again; nothing else merged.
  EXPECT_EQ(tracker.segment_count(), 4u);

  std::vector<std::pair<const TaskRecord*, std::size_t>> consumed;
  tracker.consumed_writers(0, 64, [&](const TaskRecord* writer, std::size_t begin, std::size_t end) {
    consumed.emplace_back(writer, end - begin);
  });
  const std::vector<std::pair<const TaskRecord*, std::size_t>> expected{{failing, 16}, {cancelled, 16}};
  EXPECT_EQ(consumed, expected);
  EXPECT_EQ(registered_reports(tracker, records.make(status_pending), 16, 16, Access::read), 1u);
  EXPECT_EQ(registered_reports(tracker, records.make(status_pending), 0, 64, Access::read), 2u);
  EXPECT_EQ(failing->refs.load(), 2);
  tracker.clear();
}

// Regression (a 1-D stencil): blocks written one task each, then each block's reader with a
// half-block halo on either side. While the readers run the buffer holds two segments a block, not
// more; once they finish, a read of all of it leaves one. The work an access does follows from its
// segments (each reservation names what they hold), so this bounds it without timing anything.
TEST(DependencyTracker, StencilHalosKeepTwoSegmentsPerBlockAndMergeWhenDone) {
  constexpr std::size_t blocks = 256;
  constexpr std::size_t block = 16;
  constexpr std::size_t halo = 8;
  constexpr std::size_t bytes = blocks * block;
  Records records;
  DependencyTracker tracker(bytes);
  std::vector<TaskRecord*> tasks;
  for (std::size_t i = 0; i < blocks; ++i) {
    tasks.push_back(records.make(status_pending));
    registered_reports(tracker, tasks.back(), ((i * 7919) % blocks) * block, block, Access::write);
  }
  ASSERT_EQ(tracker.segment_count(), blocks);
  for (TaskRecord* task : tasks) task->status.store(status_succeeded, std::memory_order_relaxed);
  for (std::size_t i = 0; i < blocks; ++i) {
    const std::size_t begin = i == 0 ? 0 : i * block - halo;
    const std::size_t end = std::min(bytes, (i + 1) * block + halo);
    tasks.push_back(records.make(status_pending));
    EXPECT_EQ(registered_reports(tracker, tasks.back(), begin, end - begin, Access::read), 0u);
    // A halo read names at most the four half-blocks it covers.
    EXPECT_LE(tracker.reserve_for(begin, end - begin, Access::read, 1, bytes), 4u);
  }
  EXPECT_LE(tracker.segment_count(), 2 * blocks);
  for (TaskRecord* task : tasks) task->status.store(status_succeeded, std::memory_order_relaxed);
  EXPECT_EQ(registered_reports(tracker, records.make(status_pending), 0, bytes, Access::read), 0u);
  EXPECT_EQ(tracker.segment_count(), 1u);
  tracker.clear();
  for (TaskRecord* task : tasks) EXPECT_EQ(task->refs.load(), 1);
}

}  // namespace
}  // namespace nerve::detail
