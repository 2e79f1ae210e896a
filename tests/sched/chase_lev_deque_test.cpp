// The work-stealing deque's exactly-once invariant: every pushed item is popped or stolen exactly
// once, under many interleavings of one owner (pushing and popping) and several thieves, who steal
// one item at a time or in batches.
#include "sched/chase_lev_deque.hpp"

#include <array>
#include <atomic>
#include <cstdint>
#include <random>
#include <span>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace nerve {
namespace {

struct Item {
  std::uint32_t id;
};

TEST(ChaseLevDeque, OwnerPopsInLifoOrderAndThiefStealsFifo) {
  ChaseLevDeque<Item*> deque(2);
  std::vector<Item> items(10);
  for (std::uint32_t i = 0; i < items.size(); ++i) {
    items[i].id = i;
    deque.push(&items[i]);
  }
  EXPECT_EQ(deque.size(), 10u);
  EXPECT_EQ(deque.steal()->id, 0u);
  EXPECT_EQ(deque.pop()->id, 9u);
  EXPECT_EQ(deque.steal()->id, 1u);
  EXPECT_EQ(deque.pop()->id, 8u);
  EXPECT_EQ(deque.size(), 6u);
  while (deque.pop() != nullptr) {
  }
  EXPECT_EQ(deque.pop(), nullptr);
  EXPECT_EQ(deque.steal(), nullptr);
  EXPECT_TRUE(deque.empty());
}

TEST(ChaseLevDeque, BatchStealTakesTheOldestHalfUpToItsLimitAndTheOwnerStillPopsTheNewest) {
  ChaseLevDeque<Item*> deque(4, 4);
  std::vector<Item> items(20);
  for (std::uint32_t i = 0; i < items.size(); ++i) {
    items[i].id = i;
    deque.push(&items[i]);
  }
  std::array<Item*, 8> batch{};
  // 20 present: half is 10, the limit 4.
  ASSERT_EQ(deque.steal_batch(batch), 4u);
  for (std::uint32_t i = 0; i < 4; ++i) EXPECT_EQ(batch[i]->id, i);
  // A smaller span bounds it too.
  ASSERT_EQ(deque.steal_batch(std::span<Item*>(batch.data(), 2)), 2u);
  EXPECT_EQ(batch[0]->id, 4u);
  EXPECT_EQ(batch[1]->id, 5u);
  // 14 left (6..19): the owner pops the newest while more than a batch separates it from the top.
  for (std::uint32_t expected = 19; expected >= 10; --expected) EXPECT_EQ(deque.pop()->id, expected);
  // 4 left (6..9), all within a batch of the top: still the newest for the owner...
  EXPECT_EQ(deque.pop()->id, 9u);
  // ...and the oldest for thieves. 3 left: half rounded up is 2.
  ASSERT_EQ(deque.steal_batch(batch), 2u);
  EXPECT_EQ(batch[0]->id, 6u);
  EXPECT_EQ(batch[1]->id, 7u);
  ASSERT_EQ(deque.steal_batch(batch), 1u);
  EXPECT_EQ(batch[0]->id, 8u);
  EXPECT_EQ(deque.steal_batch(batch), 0u);
  EXPECT_EQ(deque.pop(), nullptr);
  EXPECT_TRUE(deque.empty());
  // The deque works on after being emptied from both ends.
  deque.push(&items[0]);
  EXPECT_EQ(deque.pop()->id, 0u);
}

// One round: the owner pushes `count` items in bursts, popping some in between; `thieves` threads
// steal (in batches of up to `max_batch`) until the owner is done and the deque is empty. Each item
// must be taken exactly once.
void exactly_once_round(unsigned seed, int thieves, std::uint32_t count, std::size_t max_batch = 1) {
  ChaseLevDeque<Item*> deque(4, max_batch);  // small: exercises growth while thieves read old arrays
  std::vector<Item> items(count);
  std::vector<std::atomic<int>> taken(count);
  for (std::uint32_t i = 0; i < count; ++i) items[i].id = i;
  std::atomic<bool> owner_done{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < thieves; ++t) {
    threads.emplace_back([&, t] {
      std::minstd_rand random(seed * 31 + static_cast<unsigned>(t));
      while (true) {
        std::array<Item*, 16> batch{};
        const std::size_t stolen =
            max_batch == 1 ? (batch[0] = deque.steal()) != nullptr : deque.steal_batch(batch);
        for (std::size_t i = 0; i < stolen; ++i) taken[batch[i]->id].fetch_add(1, std::memory_order_relaxed);
        if (stolen == 0 && owner_done.load(std::memory_order_acquire) && deque.empty()) return;
        if (random() % 8 == 0) std::this_thread::yield();
      }
    });
  }
  std::minstd_rand random(seed);
  std::uint32_t next = 0;
  while (next < count) {
    const std::uint32_t burst = 1 + random() % 16;
    for (std::uint32_t i = 0; i < burst && next < count; ++i) deque.push(&items[next++]);
    const std::uint32_t pops = random() % (burst + 1);
    for (std::uint32_t i = 0; i < pops; ++i) {
      if (Item* item = deque.pop()) taken[item->id].fetch_add(1, std::memory_order_relaxed);
    }
    if (random() % 4 == 0) std::this_thread::yield();
  }
  while (Item* item = deque.pop()) taken[item->id].fetch_add(1, std::memory_order_relaxed);
  owner_done.store(true, std::memory_order_release);
  for (auto& thread : threads) thread.join();
  for (std::uint32_t i = 0; i < count; ++i) {
    ASSERT_EQ(taken[i].load(), 1) << "item " << i << " (seed " << seed << ", " << thieves << " thieves)";
  }
}

TEST(ChaseLevDeque, EveryItemTakenExactlyOnceUnderManyInterleavings) {
  for (unsigned seed = 1; seed <= 60; ++seed) exactly_once_round(seed, 1 + static_cast<int>(seed % 4), 4000);
}

TEST(ChaseLevDeque, EveryItemTakenExactlyOnceWhenThievesStealInBatches) {
  for (unsigned seed = 1; seed <= 60; ++seed) {
    exactly_once_round(seed, 1 + static_cast<int>(seed % 4), 4000, std::size_t{1} << (1 + seed % 4));
  }
}

TEST(ChaseLevDeque, LastItemRaceBetweenOwnerAndThieves) {
  // Single items pushed and immediately contended: the top == bottom CAS path.
  for (unsigned seed = 1; seed <= 20; ++seed) {
    ChaseLevDeque<Item*> deque;
    constexpr std::uint32_t count = 20000;
    std::vector<Item> items(count);
    std::vector<std::atomic<int>> taken(count);
    std::atomic<bool> done{false};
    std::thread thief([&] {
      while (!done.load(std::memory_order_acquire) || !deque.empty()) {
        if (Item* item = deque.steal()) taken[item->id].fetch_add(1);
      }
    });
    for (std::uint32_t i = 0; i < count; ++i) {
      items[i].id = i;
      deque.push(&items[i]);
      if (Item* item = deque.pop()) taken[item->id].fetch_add(1);
    }
    done.store(true, std::memory_order_release);
    thief.join();
    for (std::uint32_t i = 0; i < count; ++i) ASSERT_EQ(taken[i].load(), 1) << i;
  }
}

}  // namespace
}  // namespace nerve
