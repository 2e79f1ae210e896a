// The work-stealing deque's exactly-once invariant: every pushed item is popped or stolen exactly
// once, under many interleavings of one owner (pushing and popping) and several thieves.
#include "sched/chase_lev_deque.hpp"

#include <atomic>
#include <cstdint>
#include <random>
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

// One round: the owner pushes `count` items in bursts, popping some in between; `thieves` threads
// steal until the owner is done and the deque is empty. Each item must be taken exactly once.
void exactly_once_round(unsigned seed, int thieves, std::uint32_t count) {
  ChaseLevDeque<Item*> deque(4);  // small: exercises growth while thieves read old arrays
  std::vector<Item> items(count);
  std::vector<std::atomic<int>> taken(count);
  for (std::uint32_t i = 0; i < count; ++i) items[i].id = i;
  std::atomic<bool> owner_done{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < thieves; ++t) {
    threads.emplace_back([&, t] {
      std::minstd_rand random(seed * 31 + static_cast<unsigned>(t));
      while (true) {
        if (Item* item = deque.steal()) {
          taken[item->id].fetch_add(1, std::memory_order_relaxed);
        } else if (owner_done.load(std::memory_order_acquire) && deque.empty()) {
          return;
        }
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
