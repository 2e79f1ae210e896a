// A pool over memory the CPU cannot touch: all bookkeeping must stay out of that memory.
#include "memory/pool/out_of_band_pool.hpp"

#include <map>
#include <random>

#include "nerve/error.hpp"

#include "pool_test_support.hpp"
#include "separate_memory_node.hpp"

namespace nerve::memory::testing {
namespace {

TEST_F(PoolFixture, DeviceMemoryIsManagedWithoutBeingTouched) {
  auto node = std::make_unique<SeparateMemoryNode>();
  SeparateMemoryNode& raw = *node;
  PoolOptions options;
  options.limit_bytes = std::size_t{64} << 20;
  auto pool = make_node_pool(std::move(node), options);
  ASSERT_NE(dynamic_cast<OutOfBandPool*>(pool.get()), nullptr);

  std::mt19937_64 random(5);
  std::map<std::uintptr_t, std::size_t> live;  // start -> bytes, to check that nothing overlaps
  auto overlaps = [&](std::uintptr_t start, std::size_t bytes) {
    auto next = live.lower_bound(start);
    if (next != live.end() && next->first < start + bytes) return true;
    if (next != live.begin() && std::prev(next)->first + std::prev(next)->second > start) return true;
    return false;
  };
  for (int round = 0; round < 4000; ++round) {
    if (live.empty() || random() % 3 != 0) {
      const std::size_t bytes = random() % 10 == 0 ? 70000 + random() % 200000 : 1 + random() % 5000;
      const auto start = reinterpret_cast<std::uintptr_t>(pool->allocate(bytes));
      ASSERT_FALSE(overlaps(start, bytes)) << bytes;
      live.emplace(start, bytes);
    } else {
      auto victim = live.begin();
      std::advance(victim, static_cast<long>(random() % live.size()));
      pool->deallocate(reinterpret_cast<void*>(victim->first), victim->second);
      live.erase(victim);
    }
  }
  for (const auto& [start, bytes] : live) pool->deallocate(reinterpret_cast<void*>(start), bytes);
  expect_nothing_in_use(*pool);
  EXPECT_GT(pool->compact(), 0u);
  EXPECT_EQ(pool->stats().bytes_reserved, 0u);
  EXPECT_EQ(raw.stats().blocks, 0u);
}

TEST_F(PoolFixture, DeviceMemoryHasALimitToo) {
  PoolOptions options;
  options.limit_bytes = std::size_t{1} << 20;
  auto pool = make_node_pool(std::make_unique<SeparateMemoryNode>(), options);
  std::vector<void*> chunks;
  EXPECT_THROW(
      {
        for (int i = 0; i < 1000; ++i) chunks.push_back(pool->allocate(8192));
      },
      Error);
  for (void* chunk : chunks) pool->deallocate(chunk, 8192);
  expect_nothing_in_use(*pool);
}

}  // namespace
}  // namespace nerve::memory::testing
