// nerve::MemoryPool, the public API, used as a program would.
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "nerve/config.hpp"
#include "nerve/error.hpp"
#include "nerve/memory.hpp"
#include "nerve/topology.hpp"

namespace nerve {
namespace {

TEST(MemoryPoolApi, AllocateDeallocateCompactStats) {
  const Config config = Config::load(Settings().use_environment(false));
  const Topology topology = Topology::discover(config);
  MemoryPool pool(config, topology);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&pool] {
      for (int i = 0; i < 10000; ++i) {
        void* small = pool.allocate(64);
        void* page = pool.allocate(4096);
        static_cast<char*>(small)[63] = 1;
        static_cast<char*>(page)[4095] = 1;
        pool.deallocate(small, 64);
        pool.deallocate(page, 4096);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  void* zero = pool.allocate(0);
  EXPECT_NE(zero, nullptr);
  pool.deallocate(zero, 0);
  pool.deallocate(nullptr, 64);

  MemoryPoolStats stats = pool.stats();
  EXPECT_EQ(stats.allocations, 80001u);
  EXPECT_GT(stats.from_thread_cache, 79000u) << "pairs on one thread hit that thread's cache";
  EXPECT_EQ(stats.bytes_in_use, 0u);
  EXPECT_GT(stats.bytes_reserved, 0u);
  EXPECT_EQ(stats.size_classes.size(), 44u);
  EXPECT_EQ(stats.size_classes[3].chunk_bytes, 64u);
  EXPECT_EQ(stats.size_classes[3].allocations, 40000u);
  EXPECT_GT(pool.compact(), 0u);
  EXPECT_EQ(pool.stats().bytes_reserved, 0u);
}

TEST(MemoryPoolApi, LimitErrors) {
  const Config config = Config::load(Settings().use_environment(false));
  MemoryPool pool(config, Topology::discover(config), 0, 1 << 20);
  try {
    pool.allocate(8 << 20);
    ADD_FAILURE() << "8 MiB within a 1 MiB limit";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::out_of_memory);
  }
  EXPECT_THROW(MemoryPool(config, Topology::discover(config), 99), Error);
}

}  // namespace
}  // namespace nerve
