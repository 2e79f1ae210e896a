// The dependency tracker's reservation (reserve_for) against what registration then reports: the
// bound must never be smaller (submission reserves that many dependency nodes and must not
// allocate afterwards), it names every tracked task while they fit the room given (without reading
// their status), and counts exactly the ones registration will report when they do not.
#include "task/dependency_tracker.hpp"

#include <cstddef>
#include <memory>
#include <random>
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

// whole() holds only for a non-empty access to all of a buffer that was never split, or was merged
// back whole by a write.
TEST(DependencyTracker, WholeOnlyForTheWholeUnsplitBuffer) {
  Records records;
  DependencyTracker tracker(64);
  EXPECT_TRUE(tracker.whole(0, 64));
  EXPECT_FALSE(tracker.whole(0, 32));
  EXPECT_FALSE(tracker.whole(32, 32));
  EXPECT_FALSE(tracker.whole(0, 0));
  DependencyTracker empty(0);
  EXPECT_FALSE(empty.whole(0, 0));
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

}  // namespace
}  // namespace nerve::detail
