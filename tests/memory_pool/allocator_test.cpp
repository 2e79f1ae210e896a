// memory.allocator: blocks from mmap, jemalloc or tcmalloc, and a clear error when a library is missing.
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "nerve/error.hpp"

#include "memory/pool/malloc_library.hpp"
#include "pool_test_support.hpp"

// tcmalloc registers its MallocExtension with `new` when it is loaded and keeps the pointer where
// LeakSanitizer does not look: a one-time allocation of the library, not a leak of nerve's.
extern "C" const char* __lsan_default_suppressions() { return "leak:MallocExtension::Register\n"; }

namespace nerve::memory::testing {
namespace {

using ::testing::HasSubstr;

// exercise() allocates and frees small and large blocks through a pool on `config`'s allocator.
void exercise(const Config& config) {
  auto pool = make_pool(config);
  std::vector<std::pair<void*, std::size_t>> blocks;
  for (std::size_t bytes : {std::size_t{24}, std::size_t{4096}, std::size_t{60000}, std::size_t{300000}}) {
    for (int i = 0; i < 50; ++i) {
      void* p = pool->allocate(bytes);
      fill(p, bytes, blocks.size() + 1);
      blocks.emplace_back(p, bytes);
    }
  }
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    EXPECT_TRUE(check(blocks[i].first, blocks[i].second, i + 1));
    pool->deallocate(blocks[i].first, blocks[i].second);
  }
  EXPECT_EQ(pool->stats().bytes_in_use, 0u);
  EXPECT_GT(pool->node().stats().blocks, 0u);
  pool->compact();
  EXPECT_EQ(pool->node().stats().blocks, 0u) << "every block went back to " << pool->node().describe();
}

TEST(Allocator, SystemMapsBlocks) {
  const Config config = config_with({{"memory.allocator", "system"}});
  EXPECT_EQ(config.memory.allocator, MemoryAllocator::system);
  exercise(config);
  EXPECT_THAT(make_pool(config)->node().describe(), HasSubstr("system allocator"));
}

TEST(Allocator, TcmallocIsLoadedAtRunTime) {
  const Config config = config_with({{"memory.allocator", "tcmalloc"}});
  auto pool = make_pool(config);
  EXPECT_THAT(pool->node().describe(), HasSubstr("tcmalloc allocator libtcmalloc"));
  exercise(config);
}

// resident_kib(): the process's resident memory (VmRSS), in KiB.
long resident_kib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

// compact() gives blocks back through jemalloc or tcmalloc, which keep freed memory in their own free
// lists: the pool also asks the library to return that memory, or the process stayed 160 MB larger
// (black-box audit).
void expect_compact_returns_memory_to_the_system(const char* allocator) {
  std::unique_ptr<HostPool> pool;
  try {
    pool = make_pool(config_with({{"memory.allocator", allocator}}));
  } catch (const ConfigError& error) {
    GTEST_SKIP() << allocator << " does not load here: " << error.what();
  }
  constexpr std::size_t block = std::size_t{8} << 20;
  std::vector<void*> blocks;
  for (int i = 0; i < 20; ++i) {
    blocks.push_back(pool->allocate(block));
    std::memset(blocks.back(), 1, block);  // resident
  }
  const long filled = resident_kib();
  for (void* p : blocks) pool->deallocate(p, block);
  EXPECT_GT(pool->compact(), 0u);
  const long after = resident_kib();
  ASSERT_GT(filled, 0);
  EXPECT_LT(after, filled - 100 * 1024)
      << allocator << ": resident KiB: " << filled << " filled, " << after << " after compact()";
}

TEST(Allocator, CompactUnderTcmallocReturnsTheMemoryToTheSystem) {
  expect_compact_returns_memory_to_the_system("tcmalloc");
}

TEST(Allocator, CompactUnderJemallocReturnsTheMemoryToTheSystem) {
  expect_compact_returns_memory_to_the_system("jemalloc");
}

TEST(Allocator, JemallocIsLoadedAtRunTime) {
  const Config config = config_with({{"memory.allocator", "jemalloc"}});
  try {
    auto pool = make_pool(config);
    EXPECT_THAT(pool->node().describe(), HasSubstr("jemalloc allocator libjemalloc.so.2"));
  } catch (const ConfigError& error) {
    // Without the static-TLS tunable (CTest sets it), glibc refuses to dlopen jemalloc: the error
    // must say so and how to fix it.
    const char* tunables = std::getenv("GLIBC_TUNABLES");
    if (tunables != nullptr && std::string(tunables).find("optional_static_tls") != std::string::npos) throw;
    EXPECT_THAT(error.what(), HasSubstr("static TLS"));
    EXPECT_THAT(error.what(), HasSubstr("GLIBC_TUNABLES=glibc.rtld.optional_static_tls"));
    GTEST_SKIP() << "jemalloc needs GLIBC_TUNABLES=glibc.rtld.optional_static_tls=16384: " << error.what();
  }
  exercise(config);
}

TEST(Allocator, AMissingLibraryIsAClearConfigError) {
  set_malloc_library_files_for_testing(MemoryAllocator::tcmalloc, {"libnerve-no-such-allocator.so.9"});
  try {
    make_pool(config_with({{"memory.allocator", "tcmalloc"}}));
    ADD_FAILURE() << "a pool on a missing library";
  } catch (const ConfigError& error) {
    EXPECT_EQ(error.key(), "memory.allocator");
    EXPECT_EQ(error.code(), ErrorCode::invalid_config);
    const std::string message = error.what();
    EXPECT_THAT(message,
                HasSubstr("memory.allocator: tcmalloc: cannot load libnerve-no-such-allocator.so.9"));
    EXPECT_THAT(message, HasSubstr("cannot open shared object file")) << "dlerror()'s text";
    EXPECT_THAT(message, HasSubstr("memory.allocator: system")) << "how to get going";
  }
  set_malloc_library_files_for_testing(MemoryAllocator::tcmalloc, {});
}

TEST(Allocator, ALibraryWithoutItsOwnMallocIsRejected) {
  // libm has no malloc of its own; dlsym would find glibc's through its dependencies.
  set_malloc_library_files_for_testing(MemoryAllocator::jemalloc, {"libm.so.6"});
  try {
    malloc_library(MemoryAllocator::jemalloc);
    ADD_FAILURE() << "libm accepted as jemalloc";
  } catch (const ConfigError& error) {
    EXPECT_THAT(error.what(), HasSubstr("libm.so.6: exports no aligned_alloc/free of its own"));
  }
  set_malloc_library_files_for_testing(MemoryAllocator::jemalloc, {});
}

}  // namespace
}  // namespace nerve::memory::testing
