// Tests of SlotArena (util/slot_arena.hpp): where buffer states live. What matters is that slots
// handed out one after the other sit one after the other, even on a heap that earlier work left
// in pieces, and that a slot given back is reused (last first) and, under ASan, poisoned.
#include "util/slot_arena.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SLOT_ARENA_TEST_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define SLOT_ARENA_TEST_ASAN 1
#endif
#if SLOT_ARENA_TEST_ASAN
#include <sanitizer/asan_interface.h>
#endif

namespace nerve {
namespace {

std::uintptr_t address(const void* pointer) { return reinterpret_cast<std::uintptr_t>(pointer); }

// The heap in pieces, as another library's teardown might leave it: 10^5 small blocks made, half of
// them freed in a random order while the other half stay (the holes consecutive operator new calls
// would be served from, far apart). The destructor frees the rest.
class FragmentedHeap {
 public:
  FragmentedHeap() {
    std::vector<void*> blocks(100'000);
    for (void*& block : blocks) block = std::malloc(448);
    std::mt19937 random(7);
    std::shuffle(blocks.begin(), blocks.end(), random);
    for (std::size_t i = 0; i < blocks.size(); ++i) {
      if (i % 2 == 0) {
        std::free(blocks[i]);
      } else {
        kept_.push_back(blocks[i]);
      }
    }
  }
  ~FragmentedHeap() {
    for (void* block : kept_) std::free(block);
  }
  FragmentedHeap(const FragmentedHeap&) = delete;
  FragmentedHeap& operator=(const FragmentedHeap&) = delete;

 private:
  std::vector<void*> kept_;
};

TEST(SlotArena, ConsecutiveSlotsAreAdjacentWithinASlabWhateverTheHeapWentThrough) {
  const FragmentedHeap heap;
  SlotArena arena(448, 64);
  std::vector<void*> slots;
  for (int i = 0; i < 2000; ++i) slots.push_back(arena.allocate());
  std::size_t adjacent = 0;
  for (std::size_t i = 1; i < slots.size(); ++i) {
    if (address(slots[i]) == address(slots[i - 1]) + 448) ++adjacent;
  }
  // Every slot follows the one before except at a slab's start: 16, 32, ..., 256, then 256 each.
  const std::size_t slab_starts = 5 + (2000 - 496 + 255) / 256;
  EXPECT_GE(adjacent, slots.size() - slab_starts);
  for (void* slot : slots) arena.deallocate(slot);
}

TEST(SlotArena, SlotsAreAlignedDistinctAndWholeSlotsApart) {
  for (const std::size_t alignment : {std::size_t{1}, std::size_t{8}, std::size_t{64}, std::size_t{256}}) {
    SlotArena arena(100, alignment);
    std::set<std::uintptr_t> seen;
    std::vector<void*> slots;
    for (int i = 0; i < 600; ++i) {
      void* slot = arena.allocate();
      ASSERT_EQ(address(slot) % std::max(alignment, alignof(void*)), 0u) << "alignment " << alignment;
      ASSERT_TRUE(seen.insert(address(slot)).second);
      std::fill_n(static_cast<unsigned char*>(slot), 100, static_cast<unsigned char>(i));  // all usable
      slots.push_back(slot);
    }
    // No two slots overlap: sorted, each starts at least 100 bytes after the one before.
    std::vector<std::uintptr_t> sorted(seen.begin(), seen.end());
    for (std::size_t i = 1; i < sorted.size(); ++i) ASSERT_GE(sorted[i] - sorted[i - 1], 100u);
    for (std::size_t i = 0; i < slots.size(); ++i)
      ASSERT_EQ(static_cast<unsigned char*>(slots[i])[99], static_cast<unsigned char>(i));
    EXPECT_EQ(arena.slots_in_use(), 600u);
    for (void* slot : slots) arena.deallocate(slot);
    EXPECT_EQ(arena.slots_in_use(), 0u);
  }
}

TEST(SlotArena, AGivenBackSlotIsReusedLastFirstBeforeAnyNewOne) {
  SlotArena arena(64, 64);
  void* a = arena.allocate();
  void* b = arena.allocate();
  void* c = arena.allocate();
  arena.deallocate(a);
  arena.deallocate(c);
  EXPECT_EQ(arena.allocate(), c);
  EXPECT_EQ(arena.allocate(), a);
  void* d = arena.allocate();  // the free list is empty: the next slot of the slab
  EXPECT_EQ(address(d), address(c) + 64);
  EXPECT_EQ(arena.slots_in_use(), 4u);
  arena.deallocate(nullptr);  // nothing
  EXPECT_EQ(arena.slots_in_use(), 4u);
  for (void* slot : {a, b, c, d}) arena.deallocate(slot);
}

TEST(SlotArena, ThreadsAllocatingAndFreeingAtOnceNeverShareASlot) {
  SlotArena arena(48, 16);
  constexpr int threads = 4;
  constexpr int rounds = 20'000;
  std::vector<std::thread> workers;
  std::vector<int> corrupted(threads, 0);
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      std::vector<int*> held;
      for (int i = 0; i < rounds; ++i) {
        auto* slot = static_cast<int*>(arena.allocate());
        std::fill_n(slot, 12, t * rounds + i);
        held.push_back(slot);
        if (held.size() > 8 || i % 3 == 0) {
          int* victim = held[static_cast<std::size_t>(i) % held.size()];
          if (!std::all_of(victim, victim + 12, [&](int v) { return v == victim[0]; })) ++corrupted[t];
          held.erase(std::find(held.begin(), held.end(), victim));
          arena.deallocate(victim);
        }
      }
      for (int* slot : held) arena.deallocate(slot);
    });
  }
  for (auto& worker : workers) worker.join();
  for (int t = 0; t < threads; ++t) EXPECT_EQ(corrupted[t], 0) << "thread " << t;
  EXPECT_EQ(arena.slots_in_use(), 0u);
}

#if SLOT_ARENA_TEST_ASAN
TEST(SlotArena, AGivenBackSlotIsPoisonedUntilHandedOutAgain) {
  SlotArena arena(448, 64);
  void* slot = arena.allocate();
  EXPECT_FALSE(__asan_address_is_poisoned(slot));
  EXPECT_FALSE(__asan_address_is_poisoned(static_cast<char*>(slot) + 447));
  void* untouched = static_cast<char*>(slot) + 448;  // the slab's next slot, never handed out
  EXPECT_TRUE(__asan_address_is_poisoned(untouched));
  arena.deallocate(slot);
  EXPECT_TRUE(__asan_address_is_poisoned(slot));
  EXPECT_TRUE(__asan_address_is_poisoned(static_cast<char*>(slot) + 447));
  EXPECT_EQ(arena.allocate(), slot);
  EXPECT_FALSE(__asan_address_is_poisoned(static_cast<char*>(slot) + 200));
  arena.deallocate(slot);
}
#endif

}  // namespace
}  // namespace nerve
