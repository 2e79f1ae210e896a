// DeviceArena: replicas carved from big blocks of memory the CPU cannot touch (CUDA and OpenCL nodes).
#include "memory/pool/device_arena.hpp"

#include <random>
#include <string>
#include <vector>

#include "nerve/error.hpp"

#include "separate_memory_node.hpp"

namespace nerve::memory::testing {
namespace {

constexpr std::size_t mib = std::size_t{1} << 20;

TEST(DeviceArena, RangesAreAlignedWithinTheirBlockAndNeverOverlap) {
  for (const std::size_t alignment : {std::size_t{256}, std::size_t{1024}, std::size_t{4096}}) {
    auto owned = std::make_unique<SeparateMemoryNode>();
    SeparateMemoryNode& node = *owned;
    DeviceArena arena(std::move(owned), DeviceArenaOptions{.alignment = alignment, .chunk_bytes = 4 * mib});
    std::mt19937_64 random(alignment);
    std::map<std::uintptr_t, std::size_t> live;
    for (int step = 0; step < 2000; ++step) {
      if (!live.empty() && random() % 3 == 0) {
        auto victim = live.begin();
        std::advance(victim, static_cast<long>(random() % live.size()));
        arena.deallocate(reinterpret_cast<void*>(victim->first), victim->second);
        live.erase(victim);
        continue;
      }
      const std::size_t bytes = 1 + random() % 20000;
      void* range = arena.allocate(bytes);  // touching it would fault: the arena must not
      ASSERT_EQ(node.offset_in_block(range) % alignment, 0u) << alignment << " " << bytes;
      const auto start = reinterpret_cast<std::uintptr_t>(range);
      const auto after = live.upper_bound(start);
      if (after != live.end()) ASSERT_LE(start + bytes, after->first);
      if (after != live.begin()) ASSERT_LE(std::prev(after)->first + std::prev(after)->second, start);
      live.emplace(start, bytes);
    }
    EXPECT_LE(node.live_blocks(), 3u) << "small ranges share blocks";
    for (const auto& [start, bytes] : live) arena.deallocate(reinterpret_cast<void*>(start), bytes);
    EXPECT_EQ(arena.stats().bytes_in_use, 0u);
    EXPECT_GT(arena.compact(), 0u);
    EXPECT_EQ(node.live_blocks(), 0u);
  }
}

TEST(DeviceArena, ASmallLimitOrAFullNodeStillServesWhatFits) {
  // Under a 1 MiB limit a 64 MiB block is refused; a block of just the request is not.
  auto owned = std::make_unique<SeparateMemoryNode>();
  SeparateMemoryNode& node = *owned;
  DeviceArena limited(std::move(owned), DeviceArenaOptions{.limit_bytes = mib});
  void* range = limited.allocate(300 * 1024);
  EXPECT_EQ(node.largest_block(), 300u * 1024) << "a block of just the request, in whole pages";
  EXPECT_THROW((void)limited.allocate(800 * 1024), Error) << "over the limit";
  EXPECT_EQ(limited.try_allocate(800 * 1024), nullptr);
  limited.deallocate(range, 300 * 1024);
  void* larger = limited.allocate(800 * 1024);  // the empty block goes back to make room
  limited.deallocate(larger, 800 * 1024);

  // A node with 10 MiB left: the usual chunk does not fit, the request does.
  DeviceArena nearly_full(std::make_unique<SeparateMemoryNode>(10 * mib), DeviceArenaOptions{});
  void* piece = nearly_full.allocate(3 * mib);
  EXPECT_NE(piece, nullptr);
  nearly_full.deallocate(piece, 3 * mib);
}

TEST(DeviceArena, BlocksStayWithinTheNodesLargestBlock) {
  auto owned = std::make_unique<SeparateMemoryNode>();
  SeparateMemoryNode& node = *owned;
  DeviceArena arena(std::move(owned), DeviceArenaOptions{.max_chunk_bytes = 8 * mib});
  void* small = arena.allocate(1000);
  EXPECT_EQ(node.largest_block(), 8 * mib) << "the usual 64 MiB block is capped at the largest allowed";
  void* whole = arena.allocate(7 * mib);
  EXPECT_LE(node.largest_block(), 8 * mib);
  try {
    (void)arena.allocate(9 * mib);
    FAIL() << "no block can hold 9 MiB";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::out_of_memory);
    EXPECT_NE(std::string(error.what()).find("largest single block is 8388608 bytes"), std::string::npos)
        << error.what();
  }
  try {
    (void)arena.allocate(SIZE_MAX - 10);  // must not wrap while rounding
    FAIL() << "no node holds that";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::out_of_memory);
  }
  arena.deallocate(small, 1000);
  arena.deallocate(whole, 7 * mib);
}

TEST(DeviceArena, AnAlignmentThatIsNotAPowerOfTwoIsRefused) {
  EXPECT_THROW(DeviceArena(std::make_unique<SeparateMemoryNode>(), DeviceArenaOptions{.alignment = 384}),
               Error);
  EXPECT_THROW(DeviceArena(std::make_unique<SeparateMemoryNode>(),
                           DeviceArenaOptions{.alignment = 4096, .chunk_bytes = 1024}),
               Error);
}

}  // namespace
}  // namespace nerve::memory::testing
