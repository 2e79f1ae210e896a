// memory.huge_pages: big host blocks are advised MADV_HUGEPAGE (the kernel marks such a mapping "hg"
// in /proc/self/smaps); small ones, and every block with the key off, keep 4 KiB pages.
#include "memory/pool/huge_pages.hpp"

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "pool_test_support.hpp"

namespace nerve::memory::testing {
namespace {

using ::testing::HasSubstr;

struct Mapping {
  bool found = false;
  bool advised = false;             // VmFlags has "hg"
  std::size_t anon_huge_bytes = 0;  // AnonHugePages: memory already backed by huge pages
};

// mapping_of() reads the /proc/self/smaps entry of the mapping that holds `address`.
Mapping mapping_of(const void* address) {
  const auto where = reinterpret_cast<std::uintptr_t>(address);
  std::ifstream smaps("/proc/self/smaps");
  Mapping result;
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    std::uintptr_t start = 0, end = 0;
    char dash = 0;
    std::istringstream header(line);
    if (line.find(':') > line.find(' ') && header >> std::hex >> start >> dash >> end && dash == '-') {
      if (inside) break;  // the next mapping
      inside = where >= start && where < end;
      result.found = result.found || inside;
      continue;
    }
    if (!inside) continue;
    if (line.rfind("AnonHugePages:", 0) == 0) {
      result.anon_huge_bytes = std::stoull(line.substr(14)) * 1024;
    } else if (line.rfind("VmFlags:", 0) == 0) {
      result.advised = (line + " ").find(" hg ") != std::string::npos;
    }
  }
  return result;
}

constexpr std::size_t big = std::size_t{16} << 20;

TEST(HugePages, BigBlocksAreAdvised) {
  if (transparent_huge_page_size() == 0)
    GTEST_SKIP() << "this kernel has no transparent huge pages (or they are 'never')";
  const Config config = config_with({});
  EXPECT_TRUE(config.memory.huge_pages) << "on by default";
  auto pool = make_pool(config);
  EXPECT_THAT(pool->node().describe(), HasSubstr("huge pages for blocks of"));
  void* block = pool->allocate(big);
  EXPECT_GE(pool->stats().huge_page_bytes, big);
  const Mapping before = mapping_of(block);
  ASSERT_TRUE(before.found);
  EXPECT_TRUE(before.advised) << "MADV_HUGEPAGE given";
  std::memset(block, 1, big);
  // Whether the kernel found free huge pages depends on the machine's fragmentation: reported only.
  std::printf("16 MiB block: %zu bytes in huge pages after first touch\n", mapping_of(block).anon_huge_bytes);
  pool->deallocate(block, big);
  pool->compact();
  EXPECT_EQ(pool->stats().huge_page_bytes, 0u) << "returned to the system";
}

TEST(HugePages, SmallBlocksKeepSmallPages) {
  if (transparent_huge_page_size() == 0) GTEST_SKIP() << "no transparent huge pages here";
  auto pool = make_pool(config_with({}));
  // Below two huge pages: a large allocation (not a slab), still 4 KiB pages.
  const std::size_t below = huge_page_min_block() - (std::size_t{1} << 20);
  void* block = pool->allocate(below);
  EXPECT_FALSE(mapping_of(block).advised);
  EXPECT_EQ(pool->stats().huge_page_bytes, 0u);
  pool->deallocate(block, below);
}

// jemalloc/tcmalloc reuse a freed block's pages for their own objects: nerve leaves their pages alone.
TEST(HugePages, LibraryBlocksAreLeftToTheLibrary) {
  if (transparent_huge_page_size() == 0) GTEST_SKIP() << "no transparent huge pages here";
  auto pool = make_pool(config_with({{"memory.allocator", "tcmalloc"}}));
  EXPECT_THAT(pool->node().describe(), HasSubstr("huge pages as the library decides"));
  void* block = pool->allocate(big);
  EXPECT_EQ(pool->stats().huge_page_bytes, 0u);
  pool->deallocate(block, big);
}

TEST(HugePages, OffKeepsSmallPages) {
  const Config config = config_with({{"memory.huge_pages", "false"}});
  EXPECT_FALSE(config.memory.huge_pages);
  auto pool = make_pool(config);
  EXPECT_THAT(pool->node().describe(), HasSubstr("huge pages off"));
  void* block = pool->allocate(big);
  const Mapping mapping = mapping_of(block);
  ASSERT_TRUE(mapping.found);
  EXPECT_FALSE(mapping.advised);
  EXPECT_EQ(pool->stats().huge_page_bytes, 0u);
  pool->deallocate(block, big);
}

}  // namespace
}  // namespace nerve::memory::testing
