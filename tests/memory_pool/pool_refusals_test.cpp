// When a block is refused — by the pool's limit or by the machine — the pools give back what they
// hold before they give up, and a refusal leaves nothing behind (a white-box review's findings).
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "nerve/error.hpp"

#include "memory/pool/node_budget.hpp"
#include "memory/pool/out_of_band_pool.hpp"
#include "memory/pool/pinned_allocator.hpp"
#include "memory/pool/staging_pool.hpp"
#include "pool_test_support.hpp"

namespace nerve::memory::testing {
namespace {

// fill_with(): how many `bytes` allocations the pool gives before out_of_memory (kept in `held`).
std::size_t fill_with(HostPool& pool, std::size_t bytes, std::vector<void*>& held) {
  for (;;) {
    try {
      held.push_back(pool.allocate(bytes));
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::out_of_memory) << error.what();
      return held.size();
    }
  }
}

std::string slabs_per_class(const HostPool& pool) {
  std::string text;
  for (const auto& size_class : pool.stats().size_classes) {
    if (size_class.slabs != 0)
      text +=
          std::to_string(size_class.chunk_bytes) + " B: " + std::to_string(size_class.slabs) + " slab(s); ";
  }
  return text;
}

// docs/CONFIG.md (memory.host_node_limit): a 1 MiB limit holds fifteen 64 KiB buffers — also after
// a small allocation came and went. Its emptied slab stays in its class as the spare, which the
// pool did not count as memory to give back: the 64 KiB class then took 512, 256 and 128 KiB slabs
// instead of compacting first, and 12 fitted.
class LimitAfterASmallChunk : public PoolFixture, public ::testing::WithParamInterface<bool> {};

TEST_P(LimitAfterASmallChunk, AOneMiBLimitStillHoldsFifteen64KiBBuffers) {
  auto pool = make_pool(config_with({{"memory.global_pool", GetParam() ? "true" : "false"}}), 1 << 20);
  pool->deallocate(pool->allocate(16), 16);  // its slab stays as the 16-byte class's spare
  std::vector<void*> held;
  EXPECT_EQ(fill_with(*pool, 65536, held), 15u) << slabs_per_class(*pool);
  for (void* pointer : held) pool->deallocate(pointer, 65536);
  expect_nothing_in_use(*pool);
}
INSTANTIATE_TEST_SUITE_P(GlobalPool, LimitAfterASmallChunk, ::testing::Bool());

// A host node on a "machine" of `capacity` bytes: past it allocate_block() throws out_of_memory, as
// HostNodeAllocator does when mmap fails.
class MachineOfCapacity final : public NodeAllocator {
 public:
  MachineOfCapacity(std::unique_ptr<NodeAllocator> inner, std::size_t capacity)
      : inner_(std::move(inner)), capacity_(capacity) {}
  void* allocate_block(std::size_t bytes, std::size_t alignment) override {
    if (used_.fetch_add(bytes) + bytes > capacity_) {
      used_.fetch_sub(bytes);
      throw Error(ErrorCode::out_of_memory, "test machine: out of memory");
    }
    try {
      return inner_->allocate_block(bytes, alignment);
    } catch (...) {
      used_.fetch_sub(bytes);
      throw;
    }
  }
  void free_block(void* block, std::size_t bytes) noexcept override {
    inner_->free_block(block, bytes);
    used_.fetch_sub(bytes);
  }
  int node_index() const noexcept override { return inner_->node_index(); }
  bool host_addressable() const noexcept override { return inner_->host_addressable(); }
  std::string describe() const override { return "test machine"; }
  NodeAllocatorStats stats() const override { return inner_->stats(); }

 private:
  std::unique_ptr<NodeAllocator> inner_;
  const std::size_t capacity_;
  std::atomic<std::size_t> used_{0};
};

std::unique_ptr<HostPool> make_pool_on_machine(std::size_t capacity, const Config& config = config_with({})) {
  const Topology topology = Topology::discover(config);
  return std::make_unique<HostPool>(
      std::make_unique<MachineOfCapacity>(std::make_unique<HostNodeAllocator>(config, topology, 0), capacity),
      PoolOptions::from_config(config, 0));
}

// expect_allocates(): the pool gives `bytes` (then they go back).
void expect_allocates(HostPool& pool, std::size_t bytes) {
  try {
    pool.deallocate(pool.allocate(bytes), bytes);
  } catch (const Error& error) {
    ADD_FAILURE() << bytes << " bytes refused: " << error.what() << "; " << slabs_per_class(pool);
  }
}

// include/nerve/memory.hpp: out_of_memory when the limit "(or the machine) cannot satisfy the request
// even after returning cached memory". The machine's refusal used to propagate at once.
TEST_F(PoolFixture, AMachineOutOfMemoryGetsTheCachedBlocksBackFirst) {
  auto pool = make_pool_on_machine(std::size_t{4} << 20);
  pool->deallocate(pool->allocate(3 << 20), 3 << 20);  // cached: the machine has 1 MiB left
  expect_allocates(*pool, 2 << 20);
  expect_nothing_in_use(*pool);
}

TEST_F(PoolFixture, AMachineOutOfMemoryGetsTheEmptySlabsBackFirst) {
  auto pool = make_pool_on_machine(std::size_t{12} << 20);
  std::vector<void*> small;
  for (int i = 0; i < 1500; ++i) small.push_back(pool->allocate(4096));  // ~6.4 MB of slabs
  for (void* pointer : small) pool->deallocate(pointer, 4096);           // cached, spare or empty: still held
  expect_allocates(*pool, 8 << 20);
  expect_nothing_in_use(*pool);
}

// docs/MEMORY.md: the colour padding "is dropped where the node cannot give it" — a refusal by the
// machine included: a block as large as the whole machine fits it.
TEST_F(PoolFixture, AMachineThatRefusesThePaddingGetsAskedForTheExactSize) {
  auto pool = make_pool_on_machine(std::size_t{1} << 20);
  expect_allocates(*pool, 1 << 20);
  expect_nothing_in_use(*pool);
}

// What the machine cannot give at all is the machine's error, and no allocation in the statistics.
TEST_F(PoolFixture, AMachineRefusalIsItsOwnErrorAndCountsNoAllocation) {
  auto pool = make_pool_on_machine(std::size_t{1} << 20);
  try {
    pool->allocate(2 << 20);
    ADD_FAILURE() << "2 MiB from a 1 MiB machine";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::out_of_memory);
    EXPECT_THAT(error.what(), ::testing::HasSubstr("test machine"));
  }
  const MemoryPoolStats stats = pool->stats();
  EXPECT_EQ(stats.allocations, 0u);
  EXPECT_EQ(stats.large_allocations, 0u);
  EXPECT_EQ(stats.from_node, 0u);
  EXPECT_EQ(pool->try_allocate(2 << 20), nullptr) << "try_allocate(): null for the machine too";
}

TEST_F(PoolFixture, AMachineOutOfMemoryWithoutAnythingCachedStillFailsCleanly) {
  auto pool = make_pool_on_machine(std::size_t{1} << 20);
  std::vector<void*> held;
  EXPECT_GT(fill_with(*pool, 100000, held), 0u);  // large blocks until the machine is full
  for (void* pointer : held) pool->deallocate(pointer, 100000);
  expect_nothing_in_use(*pool);
}

// StagingPool: a request beyond its largest class used to index past its free lists (a crash or a
// wild pointer handed out) instead of being out_of_memory.
TEST(StagingPoolRefusals, AHugeRequestIsAnOutOfMemoryError) {
  StagingPool pool(std::make_unique<PinnedHostAllocator>());
  for (const std::size_t bytes : {std::size_t{1} << 48, std::size_t{1} << 49, SIZE_MAX}) {
    try {
      (void)pool.acquire(bytes);
      ADD_FAILURE() << bytes << " bytes acquired";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::out_of_memory) << bytes;
    }
  }
  EXPECT_EQ(pool.stats().bytes_in_use, 0u);
}

TEST(StagingPoolRefusals, AMachineOutOfMemoryGetsTheFreeBuffersBackFirst) {
  const Config config = config_with({});
  const Topology topology = Topology::discover(config);
  StagingPool pool(std::make_unique<MachineOfCapacity>(
      std::make_unique<HostNodeAllocator>(config, topology, 0), std::size_t{4} << 20));
  { StagingBuffer kept = pool.acquire(2 << 20); }  // back in the pool's free list
  StagingBuffer other = pool.acquire(4 << 20);     // needs the machine whole
  EXPECT_NE(other.data(), nullptr);
}

// NodeBudget: a request that does not fit, being refused on another thread, must not make a request
// that fits look over the limit (it used to be counted for a moment: most fitting requests failed).
TEST(NodeBudgetRefusals, ARequestThatFitsIsNeverRefusedBecauseAnotherDoesNot) {
  const Config config = config_with({});
  const Topology topology = Topology::discover(config);
  HostNodeAllocator node(config, topology, 0);
  NodeBudget budget(node, std::size_t{1} << 20);
  void* held = budget.try_acquire(512 << 10, 0);
  ASSERT_NE(held, nullptr);
  std::atomic<bool> stop{false};
  std::atomic<int> refused_greedy{0};
  std::thread greedy([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      if (void* block = budget.try_acquire(768 << 10, 0)) {
        budget.release(block, 768 << 10);
      } else {
        refused_greedy.fetch_add(1, std::memory_order_relaxed);
      }
    }
  });
  int refused = 0;
  constexpr int rounds = 5000;
  for (int i = 0; i < rounds; ++i) {
    void* block = budget.try_acquire(256 << 10, 0);  // 512 + 256 KiB: always fits by itself
    if (block == nullptr) {
      ++refused;
    } else {
      budget.release(block, 256 << 10);
    }
    if (i == rounds / 2) {
      while (refused_greedy.load(std::memory_order_relaxed) == 0) std::this_thread::yield();
    }
  }
  stop = true;
  greedy.join();
  budget.release(held, 512 << 10);
  EXPECT_EQ(refused, 0) << "of " << rounds;
  EXPECT_GT(refused_greedy.load(), 0) << "the request that does not fit ran alongside";
  EXPECT_EQ(budget.charged(), 0u);
}

}  // namespace
}  // namespace nerve::memory::testing
