// Pinned staging buffers: acquire, release, reuse, locking or its absence, limits.
#include "memory/pool/staging_pool.hpp"

#include <cstring>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "nerve/error.hpp"

#include "memory/pool/pinned_allocator.hpp"

namespace nerve::memory {
namespace {

using ::testing::HasSubstr;

TEST(StagingPool, ReleasedBuffersAreReused) {
  StagingPool pool(std::make_unique<PinnedHostAllocator>());
  std::byte* first = nullptr;
  {
    StagingBuffer buffer = pool.acquire(10000);
    ASSERT_TRUE(buffer);
    EXPECT_EQ(buffer.size(), 10000u);
    EXPECT_EQ(buffer.capacity(), 16384u) << "rounded up to a power of two";
    std::memset(buffer.data(), 7, buffer.size());
    first = buffer.data();
    EXPECT_EQ(pool.stats().bytes_in_use, 16384u);
  }
  EXPECT_EQ(pool.stats().bytes_in_use, 0u);
  StagingBuffer again = pool.acquire(12000);
  EXPECT_EQ(again.data(), first) << "the same class reuses the released buffer";
  StagingBuffer other = pool.acquire(12000);
  EXPECT_NE(other.data(), first);
  StagingBuffer moved = std::move(other);
  EXPECT_FALSE(other);  // NOLINT(bugprone-use-after-move): the moved-from state is the contract
  const StagingPoolStats stats = pool.stats();
  EXPECT_EQ(stats.acquisitions, 3u);
  EXPECT_EQ(stats.reuses, 1u);
  EXPECT_EQ(stats.bytes_reserved, 2u * 16384u);
}

TEST(StagingPool, ReportsWhetherBuffersArePageLocked) {
  auto source = std::make_unique<PinnedHostAllocator>();
  PinnedHostAllocator& pinned = *source;
  StagingPool pool(std::move(source));
  StagingBuffer small = pool.acquire(4096);
  const StagingPoolStats locked = pool.stats();
  // The first 4 KiB fit any RLIMIT_MEMLOCK above zero.
  EXPECT_TRUE(locked.locked_bytes == 4096u || locked.locked_bytes == 0u);
  pinned.refuse_locking_for_testing(true);  // as with `ulimit -l 0`: used unlocked, with a warning
  StagingBuffer unlocked = pool.acquire(8192);
  std::memset(unlocked.data(), 1, unlocked.size());
  const StagingPoolStats after = pool.stats();
  EXPECT_EQ(after.bytes_reserved, 4096u + 8192u);
  EXPECT_EQ(after.locked_bytes, locked.locked_bytes) << "the new buffer is not locked";
}

TEST(StagingPool, ALimitIsAnOutOfMemoryError) {
  StagingPool pool(std::make_unique<PinnedHostAllocator>(), 64 * 1024);
  StagingBuffer a = pool.acquire(40000);
  try {
    StagingBuffer b = pool.acquire(40000);
    ADD_FAILURE() << "two 64 KiB buffers within a 64 KiB limit";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::out_of_memory);
    EXPECT_THAT(error.what(), HasSubstr("staging buffer of 40000 bytes"));
    EXPECT_THAT(error.what(), HasSubstr("limit is 65536 bytes and 65536 bytes are in use"));
  }
  a.release();
  StagingBuffer b = pool.acquire(40000);  // the released buffer serves it
  EXPECT_TRUE(b);
}

TEST(StagingPool, CompactReturnsFreeBuffers) {
  StagingPool pool(std::make_unique<PinnedHostAllocator>());
  { StagingBuffer a = pool.acquire(1 << 20), b = pool.acquire(4096); }
  StagingBuffer kept = pool.acquire(100);
  EXPECT_EQ(pool.compact(), std::size_t{1} << 20) << "the free 1 MiB buffer (the 4 KiB one is reused)";
  EXPECT_EQ(pool.stats().bytes_reserved, 4096u);
}

}  // namespace
}  // namespace nerve::memory
