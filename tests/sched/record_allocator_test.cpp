// The task record allocator: records are distinct and aligned, recycled rather than reallocated,
// the most recently freed one comes back first, and records that one thread allocates and another
// frees (one submitter, the workers running) circulate through the depot without new slabs.
#include "task/record_allocator.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_set>
#include <vector>

#include <gtest/gtest.h>

namespace nerve::detail {
namespace {

using Cache = RecordAllocator::Cache;
constexpr std::size_t slab = RecordAllocator::slab_records;
constexpr std::size_t magazine = RecordAllocator::magazine_size;

TEST(RecordAllocator, RecordsAreDistinctAlignedAndRecycledWithoutNewSlabs) {
  RecordAllocator allocator;
  Cache cache;
  allocator.register_cache(cache);
  const std::size_t count = 3 * slab + 17;  // several slabs, the last one begun
  std::vector<TaskRecord*> records;
  for (std::size_t i = 0; i < count; ++i) records.push_back(allocator.allocate(cache));
  std::unordered_set<TaskRecord*> distinct(records.begin(), records.end());
  EXPECT_EQ(distinct.size(), count);
  for (TaskRecord* record : records) {
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(record) % alignof(TaskRecord), 0U);
  }
  EXPECT_EQ(allocator.live_records(), static_cast<std::int64_t>(count));
  const std::size_t slabs = allocator.slab_count();
  EXPECT_EQ(slabs, 4U);

  for (TaskRecord* record : records) allocator.free(cache, record);
  EXPECT_EQ(allocator.live_records(), 0);
  for (int round = 0; round < 3; ++round) {
    std::vector<TaskRecord*> again;
    for (std::size_t i = 0; i < count; ++i) again.push_back(allocator.allocate(cache));
    EXPECT_EQ(std::unordered_set<TaskRecord*>(again.begin(), again.end()).size(), count);
    for (TaskRecord* record : again) EXPECT_TRUE(distinct.contains(record)) << "a record not seen before";
    for (TaskRecord* record : again) allocator.free(cache, record);
  }
  EXPECT_EQ(allocator.slab_count(), slabs);
  EXPECT_EQ(allocator.live_records(), 0);
}

TEST(RecordAllocator, TheRecordFreedLastComesBackFirstEvenAfterASpill) {
  RecordAllocator allocator;
  Cache cache;
  allocator.register_cache(cache);
  std::vector<TaskRecord*> records;
  for (std::size_t i = 0; i < 2 * magazine + 5; ++i) records.push_back(allocator.allocate(cache));
  // Freeing them all fills the cache (two magazines) and hands the older magazine to the depot.
  for (TaskRecord* record : records) allocator.free(cache, record);
  for (std::size_t i = records.size(); i-- > records.size() - magazine;) {
    EXPECT_EQ(allocator.allocate(cache), records[i]) << "the cache must keep the records freed last";
  }
}

TEST(RecordAllocator, AFreshSlabIsHandedOutInAddressOrder) {
  RecordAllocator allocator;
  Cache cache;
  allocator.register_cache(cache);
  TaskRecord* previous = allocator.allocate(cache);
  for (std::size_t i = 1; i < slab; ++i) {
    TaskRecord* record = allocator.allocate(cache);
    EXPECT_EQ(record, previous + 1) << "record " << i;
    previous = record;
  }
}

// One thread allocates, another frees, as a submitter and a worker do: the records come back to the
// allocating thread through the depot, so a bounded number in flight needs a bounded number of slabs.
TEST(RecordAllocator, RecordsFreedOnAnotherThreadReturnThroughTheDepot) {
  RecordAllocator allocator;
  Cache producer_cache;
  Cache consumer_cache;
  allocator.register_cache(producer_cache);
  allocator.register_cache(consumer_cache);
  constexpr std::size_t in_flight = 1000;
  constexpr std::size_t total = 200'000;
  std::mutex mutex;
  std::deque<TaskRecord*> queue;  // at most in_flight records
  const auto try_push = [&](TaskRecord* record) {
    std::lock_guard lock(mutex);
    if (queue.size() == in_flight) return false;
    queue.push_back(record);
    return true;
  };
  const auto try_pop = [&]() -> std::optional<TaskRecord*> {
    std::lock_guard lock(mutex);
    if (queue.empty()) return std::nullopt;
    TaskRecord* record = queue.front();
    queue.pop_front();
    return record;
  };
  std::thread consumer([&] {
    for (std::size_t done = 0; done < total;) {
      if (auto record = try_pop()) {
        allocator.free(consumer_cache, *record);
        ++done;
      } else {
        std::this_thread::yield();
      }
    }
  });
  for (std::size_t i = 0; i < total; ++i) {
    TaskRecord* record = allocator.allocate(producer_cache);
    while (!try_push(record)) std::this_thread::yield();
  }
  consumer.join();
  EXPECT_EQ(allocator.live_records(), 0);
  // In flight in the queue, plus what the two caches and the depot's magazines in transit can hold.
  const std::size_t bound = (in_flight + 4 * 2 * magazine) / slab + 2;
  EXPECT_LE(allocator.slab_count(), bound);
}

}  // namespace
}  // namespace nerve::detail
