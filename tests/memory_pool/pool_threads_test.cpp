// Pools under concurrent use: random sizes on 1..8 threads, frees on other threads, and what
// memory.global_pool and memory.per_thread_pool_size change.
#include <atomic>
#include <deque>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "pool_test_support.hpp"

namespace nerve::memory::testing {
namespace {

struct Allocation {
  void* pointer;
  std::size_t bytes;
  std::uint64_t id;
};

// random_size(): mostly small objects, some up to 16 KiB, a few large (above the classes).
std::size_t random_size(std::mt19937_64& random) {
  const unsigned kind = random() % 100;
  if (kind < 70) return random() % 257;
  if (kind < 97) return 257 + random() % (16 * 1024);
  return max_small_size + 1 + random() % (192 * 1024);
}

// A shared mailbox through which threads hand allocations to other threads to free (the mutex also
// orders the writes of the allocating thread before the checks of the freeing one).
class Mailbox {
 public:
  void post(const Allocation& allocation) {
    std::lock_guard lock(mutex_);
    items_.push_back(allocation);
  }
  bool take(Allocation& allocation) {
    std::lock_guard lock(mutex_);
    if (items_.empty()) return false;
    allocation = items_.front();
    items_.pop_front();
    return true;
  }

 private:
  std::mutex mutex_;
  std::deque<Allocation> items_;
};

struct Scenario {
  unsigned threads;
  bool global_pool;
  const char* thread_cache;
};

class PoolThreads : public PoolFixture, public ::testing::WithParamInterface<Scenario> {};

TEST_P(PoolThreads, RandomSizesNeverOverlapAndEverythingComesBack) {
  const Scenario scenario = GetParam();
  const Config config = config_with({{"memory.global_pool", scenario.global_pool ? "true" : "false"},
                                     {"memory.per_thread_pool_size", scenario.thread_cache}});
  auto pool = make_pool(config);
  Mailbox mailbox;
  std::atomic<std::uint64_t> next_id{1};
  std::atomic<int> corrupted{0};
  constexpr int operations = 6000;

  auto worker = [&](unsigned index) {
    std::mt19937_64 random(1234 + index);
    std::vector<Allocation> held;
    auto release = [&](const Allocation& a) {
      if (!check(a.pointer, a.bytes, a.id)) corrupted.fetch_add(1);
      pool->deallocate(a.pointer, a.bytes);
    };
    for (int op = 0; op < operations; ++op) {
      const unsigned action = random() % 10;
      if (action < 5 || held.empty()) {
        const std::size_t bytes = random_size(random);
        const Allocation a{pool->allocate(bytes), bytes, next_id.fetch_add(1)};
        ASSERT_EQ(reinterpret_cast<std::uintptr_t>(a.pointer) % 16, 0u);
        fill(a.pointer, a.bytes, a.id);
        held.push_back(a);
      } else if (action < 8) {
        const std::size_t victim = random() % held.size();
        release(held[victim]);
        held[victim] = held.back();
        held.pop_back();
      } else if (action < 9) {
        const std::size_t victim = random() % held.size();
        mailbox.post(held[victim]);  // another thread frees it
        held[victim] = held.back();
        held.pop_back();
      } else {
        Allocation a;
        if (mailbox.take(a)) release(a);
      }
    }
    for (const Allocation& a : held) release(a);
  };
  std::vector<std::thread> threads;
  for (unsigned i = 0; i < scenario.threads; ++i) threads.emplace_back(worker, i);
  for (auto& thread : threads) thread.join();
  Allocation left;
  while (mailbox.take(left)) {
    if (!check(left.pointer, left.bytes, left.id)) corrupted.fetch_add(1);
    pool->deallocate(left.pointer, left.bytes);
  }
  EXPECT_EQ(corrupted.load(), 0);
  expect_nothing_in_use(*pool);
  const MemoryPoolStats stats = pool->stats();
  EXPECT_EQ(stats.allocations, stats.from_thread_cache + stats.from_central + stats.from_node);
  // Every thread has exited: their caches went back, so compaction returns every byte.
  pool->compact();
  EXPECT_EQ(pool->stats().bytes_reserved, 0u);
}

INSTANTIATE_TEST_SUITE_P(, PoolThreads,
                         ::testing::Values(Scenario{1, true, "1048576"}, Scenario{2, true, "1048576"},
                                           Scenario{4, true, "65536"}, Scenario{8, true, "1048576"},
                                           Scenario{1, false, "1048576"}, Scenario{2, false, "1048576"},
                                           Scenario{4, false, "65536"}, Scenario{8, false, "1048576"},
                                           Scenario{4, true, "0"}, Scenario{4, false, "0"}),
                         [](const auto& info) {
                           return std::to_string(info.param.threads) + "Threads" +
                                  (info.param.global_pool ? "GlobalPool" : "PerThreadHeaps") + "Cache" +
                                  info.param.thread_cache;
                         });

// allocate_and_free_pairs() runs `pairs` allocate+free pairs of `bytes` on the calling thread.
void allocate_and_free_pairs(HostPool& pool, std::size_t bytes, int pairs) {
  for (int i = 0; i < pairs; ++i) {
    void* pointer = pool.allocate(bytes);
    static_cast<char*>(pointer)[0] = 1;
    pool.deallocate(pointer, bytes);
  }
}

TEST_F(PoolFixture, PerThreadPoolSizeZeroMeansNoThreadCache) {
  auto uncached = make_pool(config_with({{"memory.per_thread_pool_size", "0"}}));
  allocate_and_free_pairs(*uncached, 64, 1000);
  const MemoryPoolStats none = uncached->stats();
  EXPECT_EQ(none.from_thread_cache, 0u);
  EXPECT_EQ(none.from_central + none.from_node, 1000u);

  auto cached = make_pool(config_with({{"memory.per_thread_pool_size", "1048576"}}));
  allocate_and_free_pairs(*cached, 64, 1000);
  const MemoryPoolStats hits = cached->stats();
  EXPECT_EQ(hits.allocations, 1000u);
  EXPECT_GE(hits.from_thread_cache, 999u) << "after the first refill every pair hits the cache";
  EXPECT_EQ(hits.from_node, 1u);
  expect_nothing_in_use(*uncached);
  expect_nothing_in_use(*cached);
}

TEST_F(PoolFixture, PerThreadPoolSizeBoundsWhatAThreadKeeps) {
  // 64 KiB of cache holds at most 16 free 4 KiB chunks: freeing 200 sends the rest back to the
  // central list, where another thread finds them without a new slab.
  auto pool = make_pool(config_with({{"memory.per_thread_pool_size", "65536"}}));
  std::vector<void*> chunks;
  for (int i = 0; i < 200; ++i) chunks.push_back(pool->allocate(4096));
  for (void* chunk : chunks) pool->deallocate(chunk, 4096);
  const std::size_t reserved = pool->stats().bytes_reserved;
  std::thread other([&] {
    std::vector<void*> again;
    for (int i = 0; i < 150; ++i) again.push_back(pool->allocate(4096));
    for (void* chunk : again) pool->deallocate(chunk, 4096);
  });
  other.join();
  EXPECT_EQ(pool->stats().bytes_reserved, reserved) << "the other thread reused the returned chunks";
  expect_nothing_in_use(*pool);
}

// This thread allocates, a second thread frees everything, a third allocates as much: with the
// global pool the third reuses the freed memory; with per-thread heaps the chunks went back to this
// thread's heap (it stays alive, so nobody adopts it) and the third needs new slabs — the documented
// trade-off.
std::size_t reserved_growth_for_third_thread(const char* global_pool) {
  auto pool =
      make_pool(config_with({{"memory.global_pool", global_pool}, {"memory.per_thread_pool_size", "0"}}));
  std::vector<void*> chunks(2000);
  for (void*& chunk : chunks) chunk = pool->allocate(256);
  std::thread([&] {
    for (void* chunk : chunks) pool->deallocate(chunk, 256);
  }).join();
  const std::size_t before = pool->stats().bytes_reserved;
  std::thread([&] {
    std::vector<void*> again(chunks.size());
    for (void*& chunk : again) chunk = pool->allocate(256);
    for (void* chunk : again) pool->deallocate(chunk, 256);
  }).join();
  return pool->stats().bytes_reserved - before;
}

TEST(PoolSharing, GlobalPoolSharesFreedMemoryAcrossThreads) {
  EXPECT_EQ(reserved_growth_for_third_thread("true"), 0u);
}

TEST(PoolSharing, PerThreadHeapsDoNotShareFreedChunks) {
  EXPECT_GT(reserved_growth_for_third_thread("false"), 0u);
}

TEST_F(PoolFixture, PerThreadHeapGetsItsChunksBackFromOtherThreads) {
  auto pool = make_pool(config_with({{"memory.global_pool", "false"}}));
  std::vector<void*> chunks(3000);
  for (void*& chunk : chunks) chunk = pool->allocate(128);
  const std::size_t reserved = pool->stats().bytes_reserved;
  std::thread([&] {
    for (void* chunk : chunks) pool->deallocate(chunk, 128);  // remote frees to this thread's heap
  }).join();
  for (void*& chunk : chunks) chunk = pool->allocate(128);  // served from the remote-free stacks
  EXPECT_EQ(pool->stats().bytes_reserved, reserved);
  for (void* chunk : chunks) pool->deallocate(chunk, 128);
  expect_nothing_in_use(*pool);
}

}  // namespace
}  // namespace nerve::memory::testing
