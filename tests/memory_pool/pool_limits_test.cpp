// Limits, compaction, large blocks, and thread caches outliving their pool or their thread.
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "nerve/error.hpp"

#include "pool_test_support.hpp"

namespace nerve::memory::testing {
namespace {

using ::testing::HasSubstr;

TEST_F(PoolFixture, ALimitIsAClearOutOfMemoryErrorNotACrash) {
  const Config config = config_with({});
  auto pool = make_pool(config, 1 << 20);
  std::vector<void*> chunks;
  try {
    for (int i = 0; i < 10000; ++i) chunks.push_back(pool->allocate(4096));
    FAIL() << "1 MiB held 10000 chunks of 4 KiB";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::out_of_memory);
    const std::string message = error.what();
    EXPECT_THAT(message, HasSubstr("NUMA node 0")) << "names the node";
    EXPECT_THAT(message, HasSubstr("cannot allocate 4096 bytes")) << "names the size";
    EXPECT_THAT(message, HasSubstr("limit is 1048576 bytes")) << "names the limit";
    EXPECT_THAT(message, HasSubstr(std::to_string(chunks.size() * 4096) + " bytes are in use"))
        << "says what is in use: " << message;
  }
  EXPECT_GT(chunks.size(), 200u);
  EXPECT_LE(pool->stats().bytes_reserved, std::size_t{1} << 20);
  for (void* chunk : chunks) pool->deallocate(chunk, 4096);
  // The pool works again once memory is back.
  void* again = pool->allocate(4096);
  pool->deallocate(again, 4096);
  EXPECT_THROW(pool->allocate(2 << 20), Error) << "a large block above the limit";
  expect_nothing_in_use(*pool);
}

// A block of 1 MiB and more carries colour padding, which does not count against the limit: the
// stats and the error say what does, so a full pool never looks past its limit (it said "1052672
// bytes are in use" under a limit of 1048576).
TEST_F(PoolFixture, WhatCountsAgainstTheLimitIsReportedWithoutThePadding) {
  constexpr std::size_t mib = std::size_t{1} << 20;
  auto pool = make_pool(config_with({}), mib);
  void* block = pool->allocate(mib);
  const MemoryPoolStats stats = pool->stats();
  EXPECT_EQ(stats.bytes_charged, mib);
  EXPECT_GT(stats.bytes_reserved, mib) << "the padding is real memory";
  try {
    void* more = pool->allocate(4096);
    pool->deallocate(more, 4096);
    ADD_FAILURE() << "a full pool gave 4 KiB more";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("limit is 1048576 bytes, 1048576 bytes count against it"))
        << error.what();
  }
  pool->deallocate(block, mib);
  pool->compact();
  EXPECT_EQ(pool->stats().bytes_charged, 0u);
  expect_nothing_in_use(*pool);
}

TEST_F(PoolFixture, AnUncappedPoolSaysItHasNoLimit) {
  auto pool = make_pool(config_with({}), 0);
  try {
    void* block = pool->allocate(SIZE_MAX - 4096);  // its block size overflows: never available
    pool->deallocate(block, SIZE_MAX - 4096);
    FAIL() << "SIZE_MAX - 4096 bytes were allocated";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::out_of_memory);
    const std::string message = error.what();
    EXPECT_THAT(message, HasSubstr("the pool has no limit")) << message;
    EXPECT_THAT(message, ::testing::Not(HasSubstr("limit is 0"))) << message;
    EXPECT_THAT(message, HasSubstr("more than any node can hold"))
        << "no saturated 'block size': " << message;
  }
}

// A request no node could ever hold fails without first flushing the pool's caches (it emptied every
// cached block and slab for nothing, and the error then reported "0 reserved"; memory audit).
TEST_F(PoolFixture, AnImpossibleRequestLeavesTheCachesAlone) {
  auto pool = make_pool(config_with({}), 0);
  constexpr std::size_t mib = std::size_t{1} << 20;
  void* block = pool->allocate(mib);
  pool->deallocate(block, mib);  // cached for reuse
  const std::uint64_t reserved = pool->stats().bytes_reserved;
  ASSERT_GT(reserved, 0u);
  EXPECT_THROW((void)pool->allocate(SIZE_MAX), Error);
  EXPECT_EQ(pool->stats().bytes_reserved, reserved) << "the cached block was given back";
  pool->compact();
  expect_nothing_in_use(*pool);
}

TEST_F(PoolFixture, AlignedAllocations) {
  struct Block {
    void* pointer;
    std::size_t bytes;
    std::size_t alignment;
  };
  auto pool = make_pool(config_with({}));
  std::vector<Block> blocks;
  for (std::size_t alignment : {1, 16, 32, 64, 128, 4096}) {
    for (std::size_t bytes : {1, 24, 100, 160, 1000, 5000, 70000}) {
      void* p = pool->allocate_aligned(bytes, alignment);
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % alignment, 0u) << bytes << " aligned to " << alignment;
      fill(p, bytes, blocks.size() + 1);
      blocks.push_back({p, bytes, alignment});
    }
  }
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    EXPECT_TRUE(check(blocks[i].pointer, blocks[i].bytes, i + 1));
    pool->deallocate_aligned(blocks[i].pointer, blocks[i].bytes, blocks[i].alignment);
  }
  EXPECT_THROW(pool->allocate_aligned(64, 48), Error);
  EXPECT_THROW(pool->allocate_aligned(64, 2 * page_size()), Error);
  expect_nothing_in_use(*pool);
}

TEST_F(PoolFixture, TryAllocateReturnsNullAtTheLimit) {
  auto pool = make_pool(config_with({}), 1 << 20);
  void* big = pool->try_allocate(768 << 10);
  ASSERT_NE(big, nullptr);
  EXPECT_EQ(pool->try_allocate(512 << 10), nullptr) << "the caller may evict and retry";
  pool->deallocate(big, 768 << 10);
  void* again = pool->try_allocate(512 << 10);
  EXPECT_NE(again, nullptr);
  pool->deallocate(again, 512 << 10);
  expect_nothing_in_use(*pool);
}

TEST_F(PoolFixture, ALimitMakesRoomByReturningCachedMemoryFirst) {
  auto pool = make_pool(config_with({}), 4 << 20);
  void* big = pool->allocate(3 << 20);
  pool->deallocate(big, 3 << 20);              // kept in the large-block cache: still reserved
  const std::size_t colour = 8 * page_size();  // big blocks carry up to 8 pages of colouring
  EXPECT_GE(pool->stats().bytes_reserved, std::size_t{3} << 20);
  EXPECT_LE(pool->stats().bytes_reserved, (std::size_t{3} << 20) + colour);
  void* other = pool->allocate(2 << 20);  // does not fit beside it: the cache is returned first
  EXPECT_GE(pool->stats().bytes_reserved, std::size_t{2} << 20);
  EXPECT_LE(pool->stats().bytes_reserved, (std::size_t{2} << 20) + colour);
  pool->deallocate(other, 2 << 20);
  expect_nothing_in_use(*pool);
}

// The colour padding of big blocks does not count against the limit: a limit of exactly 3 MiB holds
// a 1 MiB and a 2 MiB block whatever colours they drew (it used to fail every time: the first block's
// padding took the room of the second).
TEST_F(PoolFixture, ColourPaddingDoesNotCountAgainstTheLimit) {
  auto pool = make_pool(config_with({}), 3 << 20);
  for (int round = 0; round < 16; ++round) {  // the colours rotate through 8 paddings
    void* first = pool->allocate(1 << 20);
    void* second = nullptr;
    EXPECT_NO_THROW(second = pool->allocate(2 << 20)) << "round " << round;
    EXPECT_GE(pool->stats().bytes_reserved, std::size_t{3} << 20) << "round " << round;  // padding included
    pool->deallocate(first, 1 << 20);
    if (second != nullptr) pool->deallocate(second, 2 << 20);
    pool->compact();  // fresh blocks, fresh colours, next round
  }
  expect_nothing_in_use(*pool);
}

// Buffers of one power-of-two size, allocated one after another, must not start exactly 2^k bytes
// apart: a[i], b[i] and c[i] would then share cache sets and DRAM banks (half the bandwidth, W5).
TEST_F(PoolFixture, BigBlocksAreColouredSoEqualSizesDoNotAlias) {
  auto pool = make_pool(config_with({}));
  constexpr std::size_t bytes = std::size_t{4} << 20;
  std::vector<void*> blocks;
  std::set<std::uintptr_t> offsets;  // start address modulo 64 KiB
  for (int i = 0; i < 8; ++i) {
    blocks.push_back(pool->allocate(bytes));
    offsets.insert(reinterpret_cast<std::uintptr_t>(blocks.back()) % (std::uintptr_t{64} << 10));
  }
  EXPECT_GT(offsets.size(), 1u) << "every block at the same offset modulo 64 KiB";
  for (void* block : blocks) pool->deallocate(block, bytes);
  expect_nothing_in_use(*pool);
}

// A deallocate() of a large block with a wrong size is logged and ignored, like a double free: it
// used to free the block, and the next request of its size got it while the caller still held it.
// Wrong means not rounding up to the pages the request did; a cached block reused for a smaller
// request is deallocated with that request's size, not its own.
TEST_F(PoolFixture, ALargeBlockDeallocatedWithAWrongSizeIsLoggedAndKept) {
  auto pool = make_pool(config_with({}));
  const std::size_t bytes = 48 * page_size();  // a large block below the colouring threshold
  void* block = pool->allocate(bytes);
  const std::size_t in_use = pool->stats().bytes_in_use;
  ::testing::internal::CaptureStderr();
  pool->deallocate(block, bytes / 2);
  pool->deallocate(block, 4 << 20);
  const std::string logged = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(pool->stats().bytes_in_use, in_use) << "the block is still the caller's";
  const std::string allocated_for = " of a block allocated for " + std::to_string(bytes - page_size() + 1) +
                                    " to " + std::to_string(bytes) + " bytes: a wrong size; ignored";
  EXPECT_THAT(logged, HasSubstr(", " + std::to_string(bytes / 2) + ")" + allocated_for));
  EXPECT_THAT(logged, HasSubstr(", 4194304)" + allocated_for));
  void* other = pool->allocate(bytes);
  EXPECT_NE(other, block) << "a block still held was handed out again";
  pool->deallocate(other, bytes);

  pool->deallocate(block, bytes - 1);  // the same pages: right
  EXPECT_EQ(pool->stats().bytes_in_use, 0u);
  void* reused = pool->allocate(46 * page_size());  // a cached block of 48 pages
  EXPECT_EQ(pool->stats().large_from_cache, 1u);
  ::testing::internal::CaptureStderr();
  pool->deallocate(reused, 46 * page_size());
  pool->deallocate(reused, 46 * page_size());  // a double free: logged and ignored, as before
  EXPECT_THAT(::testing::internal::GetCapturedStderr(), HasSubstr("does not have live; ignored"));
  expect_nothing_in_use(*pool);
}

TEST_F(PoolFixture, CompactReturnsFreeSlabsAndCachedBlocks) {
  for (const char* global_pool : {"true", "false"}) {
    SCOPED_TRACE(global_pool);
    auto pool = make_pool(config_with({{"memory.global_pool", global_pool}}));
    std::vector<void*> chunks;
    for (int i = 0; i < 5000; ++i) chunks.push_back(pool->allocate(i % 2 ? 4096 : 100));
    void* large = pool->allocate(1 << 20);
    for (std::size_t i = 0; i < chunks.size(); ++i) pool->deallocate(chunks[i], i % 2 ? 4096 : 100);
    pool->deallocate(large, 1 << 20);
    const std::size_t reserved = pool->stats().bytes_reserved;
    EXPECT_GT(reserved, std::size_t{9} << 20);
    const std::size_t returned = pool->compact();
    EXPECT_EQ(returned, reserved);
    EXPECT_EQ(pool->stats().bytes_reserved, 0u);
    EXPECT_EQ(pool->compact(), 0u) << "nothing left to return";
    expect_nothing_in_use(*pool);
  }
}

// With per-thread heaps, chunks a thread allocated and others freed go back to that thread's heap,
// which took them in only when it next ran short: an idle thread kept their slabs for ever, compact()
// could not return them, and under a limit a block was refused with nothing in use.
TEST_F(PoolFixture, CompactReturnsSlabsOtherThreadsEmptiedInAnIdleThreadsHeap) {
  constexpr std::size_t limit = std::size_t{4} << 20;
  auto pool = make_pool(config_with({{"memory.global_pool", "false"}}), limit);
  std::vector<void*> chunks;
  std::mutex mutex;
  std::condition_variable changed;
  bool allocated = false, done = false;
  std::thread owner([&] {
    std::vector<void*> mine;
    for (int i = 0; i < 3000; ++i) mine.push_back(pool->allocate(1000));
    std::unique_lock lock(mutex);
    chunks = std::move(mine);
    allocated = true;
    changed.notify_all();
    changed.wait(lock, [&] { return done; });  // stays alive and idle: its heap stays attached
  });
  {
    std::unique_lock lock(mutex);
    changed.wait(lock, [&] { return allocated; });
  }
  for (void* chunk : chunks) pool->deallocate(chunk, 1000);  // remote frees to the owner's heap
  EXPECT_EQ(pool->stats().bytes_in_use, 0u);
  EXPECT_GT(pool->stats().bytes_reserved, std::size_t{2} << 20);
  void* whole = nullptr;
  EXPECT_NO_THROW(whole = pool->allocate(limit)) << "the limit admits it: nothing is in use";
  if (whole != nullptr) pool->deallocate(whole, limit);
  pool->compact();
  EXPECT_EQ(pool->stats().bytes_reserved, 0u);
  {
    std::lock_guard lock(mutex);
    done = true;
  }
  changed.notify_all();
  owner.join();
  expect_nothing_in_use(*pool);
}

TEST_F(PoolFixture, CompactKeepsWhatIsInUse) {
  auto pool = make_pool(config_with({}));
  std::vector<void*> chunks;
  for (int i = 0; i < 1000; ++i) chunks.push_back(pool->allocate(512));
  fill(chunks[0], 512, 7);
  for (std::size_t i = 1; i < chunks.size(); ++i) pool->deallocate(chunks[i], 512);
  pool->compact();
  EXPECT_EQ(pool->stats().bytes_reserved, slab_bytes(size_class_of(512)))
      << "the slab of the live chunk stays";
  EXPECT_TRUE(check(chunks[0], 512, 7));
  pool->deallocate(chunks[0], 512);
  expect_nothing_in_use(*pool);
}

// A thread that stays alive keeps its cache until its next slow-path operation after compact().
TEST_F(PoolFixture, OtherThreadsHandTheirCachesBackAfterCompact) {
  auto pool = make_pool(config_with({}));
  std::mutex mutex;
  std::condition_variable changed;
  int step = 0;
  auto wait_for = [&](int value) {
    std::unique_lock lock(mutex);
    changed.wait(lock, [&] { return step >= value; });
  };
  auto advance = [&] {
    std::lock_guard lock(mutex);
    ++step;
    changed.notify_all();
  };
  std::thread other([&] {
    std::vector<void*> chunks;
    for (int i = 0; i < 100; ++i) chunks.push_back(pool->allocate(1024));
    for (void* chunk : chunks) pool->deallocate(chunk, 1024);  // all in this thread's cache
    advance();                                                 // step 1
    wait_for(2);
    void* miss = pool->allocate(48);  // a cache miss: the slow path sees the compaction request
    pool->deallocate(miss, 48);
    advance();  // step 3
    wait_for(4);
  });
  wait_for(1);
  pool->compact();
  EXPECT_GT(pool->stats().bytes_reserved, 0u) << "chunks in another live thread's cache keep their slab";
  advance();
  wait_for(3);
  pool->compact();
  EXPECT_LE(pool->stats().bytes_reserved, slab_bytes(size_class_of(48)));
  advance();
  other.join();
  pool->compact();
  EXPECT_EQ(pool->stats().bytes_reserved, 0u);
  expect_nothing_in_use(*pool);
}

TEST_F(PoolFixture, AnExitingThreadGivesItsCacheBack) {
  for (const char* global_pool : {"true", "false"}) {
    SCOPED_TRACE(global_pool);
    auto pool = make_pool(config_with({{"memory.global_pool", global_pool}}));
    std::vector<void*> kept;
    std::thread([&] {
      std::vector<void*> chunks;
      for (int i = 0; i < 2000; ++i) chunks.push_back(pool->allocate(64));
      for (std::size_t i = 0; i < chunks.size(); ++i) {
        if (i % 10 == 0) {
          kept.push_back(chunks[i]);  // outlives the thread; freed by the main thread
        } else {
          pool->deallocate(chunks[i], 64);
        }
      }
    }).join();
    for (void* chunk : kept) pool->deallocate(chunk, 64);
    pool->compact();
    EXPECT_EQ(pool->stats().bytes_reserved, 0u) << "nothing of the exited thread stays behind";
    expect_nothing_in_use(*pool);
  }
}

// A thread keeps a cache entry for a pool that is destroyed, then uses a new pool (perhaps at the
// same address): the stale entry must never be touched (AddressSanitizer reports it if it is).
TEST(PoolLifetime, AStaleThreadCacheIsNeverTouched) {
  const Config config = config_with({});
  std::mutex mutex;
  std::condition_variable changed;
  HostPool* current = nullptr;
  int generation = 0;
  int done = 0;
  std::thread user([&] {
    for (int seen = 1; seen <= 6; ++seen) {
      std::unique_lock lock(mutex);
      changed.wait(lock, [&] { return generation >= seen; });
      for (int i = 0; i < 100; ++i) {
        void* p = current->allocate(32 + 16 * (i % 8));
        current->deallocate(p, 32 + 16 * (i % 8));
      }
      ++done;
      changed.notify_all();
    }
  });
  for (int round = 1; round <= 6; ++round) {
    auto pool = make_pool(config);
    {
      std::lock_guard lock(mutex);
      current = pool.get();
      generation = round;
      changed.notify_all();
    }
    std::unique_lock lock(mutex);
    changed.wait(lock, [&] { return done >= round; });
    current = nullptr;
    // The pool goes away while the user thread still has a cache entry for it.
  }
  user.join();  // its exit must skip the destroyed pools
}

TEST(PoolLifetime, ThreadsExitingAfterTheirPoolIsGone) {
  std::vector<std::thread> threads;
  std::mutex mutex;
  std::condition_variable changed;
  bool pool_gone = false;
  {
    auto pool = make_pool(config_with({{"memory.global_pool", "false"}}));
    std::atomic<int> ready{0};
    for (int i = 0; i < 4; ++i) {
      threads.emplace_back([&, raw = pool.get()] {
        void* p = raw->allocate(200);
        raw->deallocate(p, 200);
        ready.fetch_add(1);
        std::unique_lock lock(mutex);
        changed.wait(lock, [&] { return pool_gone; });
      });
    }
    while (ready.load() < 4) std::this_thread::yield();
  }
  {
    std::lock_guard lock(mutex);
    pool_gone = true;
    changed.notify_all();
  }
  for (auto& thread : threads) thread.join();
}

}  // namespace
}  // namespace nerve::memory::testing
