// memory.numa_policy: intended placement on simulated two-node machines, real binding on this one.
#include <hwloc.h>

#include "nerve/error.hpp"

#include "pool_test_support.hpp"

namespace nerve::memory::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr const char* two_nodes = "pack:1 numa:2 core:2 pu:1";

// Blocks of every kind a pool obtains: a small-class slab, a large-class slab, a large block.
std::vector<std::pair<void*, std::size_t>> allocate_mix(HostPool& pool) {
  std::vector<std::pair<void*, std::size_t>> blocks;
  for (std::size_t bytes : {std::size_t{64}, std::size_t{32768}, std::size_t{1} << 20}) {
    blocks.emplace_back(pool.allocate(bytes), bytes);
  }
  return blocks;
}

void free_all(HostPool& pool, const std::vector<std::pair<void*, std::size_t>>& blocks) {
  for (const auto& [pointer, bytes] : blocks) pool.deallocate(pointer, bytes);
}

TEST(NumaPolicy, PreferredRecordsTheNodeOnASyntheticMachine) {
  const Config config =
      config_with({{"topology.synthetic", two_nodes}, {"memory.numa_policy", "preferred:1"}});
  auto pool = make_pool(config, 0, /*numa_node=*/1);
  const auto blocks = allocate_mix(*pool);
  for (const auto& [pointer, bytes] : blocks) {
    const BlockPlacement placement = pool->placement_of(pointer);
    EXPECT_EQ(placement.policy, NumaPolicy::Kind::preferred) << bytes;
    EXPECT_EQ(placement.node, 1) << bytes;
    EXPECT_EQ(placement.intended_node(pointer), 1);
    EXPECT_FALSE(placement.bound) << "nothing is bound on a simulated machine";
  }
  EXPECT_EQ(pool->stats().numa_binding_failures, 0u) << "and binding is not even attempted";
  free_all(*pool, blocks);
}

// Regression: under preferred:<n> (and interleave) every pool bound its blocks to the policy's node
// (or interleaved them), so a buffer asked for on node 1 (BufferOptions::numa_node, which picks the
// pool of node 1) had its pages on node 0 while its tasks ran on node 1. The pool of a node other
// than the policy's holds only buffers asked for there: its pages go to its node.
TEST(NumaPolicy, APoolOfAnotherNodeBindsToItsOwnNode) {
  for (const char* policy : {"preferred:0", "interleave"}) {
    SCOPED_TRACE(policy);
    const Config config = config_with({{"topology.synthetic", two_nodes}, {"memory.numa_policy", policy}});
    auto pool = make_pool(config, 0, /*numa_node=*/1);
    const auto blocks = allocate_mix(*pool);
    for (const auto& [pointer, bytes] : blocks) {
      const BlockPlacement placement = pool->placement_of(pointer);
      EXPECT_EQ(placement.node, 1) << bytes;
      EXPECT_EQ(placement.intended_node(pointer), 1) << bytes;
      const auto* last_page = static_cast<const std::byte*>(pointer) + bytes - 1;
      EXPECT_EQ(placement.intended_node(last_page), 1) << bytes;
    }
    free_all(*pool, blocks);
  }
}

TEST(NumaPolicy, InterleaveAttributesPagesRoundRobin) {
  const Config config =
      config_with({{"topology.synthetic", two_nodes}, {"memory.numa_policy", "interleave"}});
  auto pool = make_pool(config);
  const auto blocks = allocate_mix(*pool);
  auto* large = static_cast<std::byte*>(blocks.back().first);
  const BlockPlacement placement = pool->placement_of(large);
  EXPECT_EQ(placement.policy, NumaPolicy::Kind::interleave);
  EXPECT_EQ(placement.interleave_nodes, 2) << "both nodes";
  EXPECT_FALSE(placement.bound);
  const std::size_t page = page_size();
  for (std::size_t offset = 0; offset + page < (std::size_t{1} << 20); offset += page) {
    EXPECT_NE(placement.intended_node(large + offset), placement.intended_node(large + offset + page))
        << "neighbouring pages alternate between the two nodes";
  }
  free_all(*pool, blocks);
}

TEST(NumaPolicy, LocalAttributesBlocksToThePoolsNode) {
  const Config config = config_with({{"topology.synthetic", two_nodes}});
  EXPECT_EQ(config.memory.numa_policy.kind, NumaPolicy::Kind::local);
  auto pool = make_pool(config, 0, /*numa_node=*/1);
  const auto blocks = allocate_mix(*pool);
  for (const auto& [pointer, bytes] : blocks) {
    EXPECT_EQ(pool->placement_of(pointer).policy, NumaPolicy::Kind::local);
    EXPECT_EQ(pool->placement_of(pointer).node, 1) << bytes;
  }
  free_all(*pool, blocks);
}

TEST(NumaPolicy, APreferredNodeTheMachineLacksIsAConfigError) {
  const Config config =
      config_with({{"topology.synthetic", two_nodes}, {"memory.numa_policy", "preferred:2"}});
  try {
    make_pool(config);
    ADD_FAILURE() << "preferred:2 on a two-node machine";
  } catch (const ConfigError& error) {
    EXPECT_EQ(error.key(), "memory.numa_policy");
    EXPECT_THAT(error.what(), HasSubstr("preferred:2 names NUMA node 2"));
    EXPECT_THAT(error.what(), HasSubstr("has 2 NUMA nodes (0..1)"));
    EXPECT_THAT(error.what(), StartsWith("api")) << "where the policy was set";
  }
  EXPECT_THROW(make_pool(config_with({{"topology.synthetic", two_nodes}}), 0, 5), Error) << "no node 5";
}

// On the real machine: the OS places a preferred:0 block on node 0 (first touch is by this thread,
// wherever it runs), as hwloc reports after the pages are written.
TEST(NumaPolicy, PreferredBindsOnTheRealMachine) {
  const Config config = config_with({{"memory.numa_policy", "preferred:0"}});
  const Topology topology = Topology::discover(config);
  auto pool = make_pool(config);
  const std::size_t bytes = std::size_t{4} << 20;
  auto* block = static_cast<std::byte*>(pool->allocate(bytes));
  std::memset(block, 1, bytes);  // first touch
  const BlockPlacement placement = pool->placement_of(block);
  EXPECT_EQ(placement.node, 0);
  if (!placement.bound) {
    pool->deallocate(block, bytes);
    GTEST_SKIP() << "the operating system refused memory binding here";
  }
  hwloc_topology_t hwloc = nullptr;
  ASSERT_EQ(hwloc_topology_init(&hwloc), 0);
  ASSERT_EQ(hwloc_topology_load(hwloc), 0);
  hwloc_bitmap_t where = hwloc_bitmap_alloc();
  const int result = hwloc_get_area_memlocation(hwloc, block, bytes, where, HWLOC_MEMBIND_BYNODESET);
  if (result == 0) {
    const int os_node = topology.numa_nodes()[0].os_index;
    EXPECT_TRUE(hwloc_bitmap_isset(where, static_cast<unsigned>(os_node)));
    EXPECT_EQ(hwloc_bitmap_weight(where), 1) << "every page on node 0";
  }
  hwloc_bitmap_free(where);
  hwloc_topology_destroy(hwloc);
  pool->deallocate(block, bytes);
  if (result != 0) GTEST_SKIP() << "hwloc cannot report page locations here";
}

}  // namespace
}  // namespace nerve::memory::testing
