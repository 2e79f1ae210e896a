// The memory.* configuration keys: accepted values, defaults, sources and errors.
#include <filesystem>
#include <fstream>
#include <map>
#include <tuple>

#include <unistd.h>

#include "nerve/error.hpp"

#include "pool_test_support.hpp"

namespace nerve::memory::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(MemoryConfig, Defaults) {
  const Config config = config_with({});
  EXPECT_EQ(config.memory.allocator, MemoryAllocator::system);
  EXPECT_EQ(config.memory.per_thread_pool_size, std::size_t{1} << 20);
  EXPECT_TRUE(config.memory.global_pool);
  EXPECT_EQ(config.memory.numa_policy, (NumaPolicy{NumaPolicy::Kind::local, 0}));
}

TEST(MemoryConfig, ValuesFromTheApi) {
  const Config config = config_with({{"memory.allocator", "tcmalloc"},
                                     {"memory.per_thread_pool_size", "0"},
                                     {"memory.global_pool", "off"},
                                     {"memory.numa_policy", "preferred:3"}});
  EXPECT_EQ(config.memory.allocator, MemoryAllocator::tcmalloc);
  EXPECT_EQ(config.memory.per_thread_pool_size, 0u);
  EXPECT_FALSE(config.memory.global_pool);
  EXPECT_EQ(config.memory.numa_policy, (NumaPolicy{NumaPolicy::Kind::preferred, 3}));
  EXPECT_EQ(config_with({{"memory.numa_policy", " interleave "}}).memory.numa_policy.kind,
            NumaPolicy::Kind::interleave);
  EXPECT_EQ(config_with({{"memory.per_thread_pool_size", "1073741824"}}).memory.per_thread_pool_size,
            std::size_t{1} << 30);
}

TEST(MemoryConfig, ValuesFromTheEnvironmentAndAFile) {
  const std::map<std::string, std::string> environment{{"NERVE_MEMORY_ALLOCATOR", "jemalloc"},
                                                       {"NERVE_MEMORY_NUMA_POLICY", "interleave"}};
  const Config from_environment = Config::load(Settings(), environment);
  EXPECT_EQ(from_environment.memory.allocator, MemoryAllocator::jemalloc);
  EXPECT_EQ(from_environment.memory.numa_policy.kind, NumaPolicy::Kind::interleave);
  EXPECT_EQ(from_environment.origin("memory.allocator").describe(), "env NERVE_MEMORY_ALLOCATOR");

  const auto file =
      std::filesystem::temp_directory_path() / ("nerve-memory-" + std::to_string(getpid()) + ".yaml");
  std::ofstream(file) << "memory:\n  per_thread_pool_size: 65536\n  global_pool: false\n";
  const Config from_file = Config::load(Settings().use_environment(false).config_file(file));
  std::filesystem::remove(file);
  EXPECT_EQ(from_file.memory.per_thread_pool_size, 65536u);
  EXPECT_FALSE(from_file.memory.global_pool);
  EXPECT_EQ(from_file.origin("memory.global_pool").line, 3);
}

// expect_config_error() loads `key = value` and checks the ConfigError names the key and says `what`.
void expect_config_error(const std::string& key, const std::string& value, const std::string& what) {
  try {
    config_with({{key, value}});
    ADD_FAILURE() << key << " = " << value << " was accepted";
  } catch (const ConfigError& error) {
    EXPECT_EQ(error.key(), key);
    EXPECT_THAT(error.what(), HasSubstr(what)) << key << " = " << value;
  }
}

TEST(MemoryConfig, BadValuesAreErrorsThatNameTheKey) {
  expect_config_error("memory.allocator", "jemaloc", "did you mean 'jemalloc'?");
  expect_config_error("memory.allocator", "mimalloc", "one of system, jemalloc, tcmalloc");
  expect_config_error("memory.per_thread_pool_size", "1073741825",
                      "out of range (expected an integer 0..1073741824)");
  expect_config_error("memory.per_thread_pool_size", "-1", "out of range");
  expect_config_error("memory.per_thread_pool_size", "1MiB", "is not an integer");
  expect_config_error("memory.global_pool", "sometimes", "is not a boolean");
  expect_config_error("memory.host_node_limit", "65536", "is below 131072 bytes");
  expect_config_error("memory.host_node_limit", "1", "is below 131072 bytes");
  expect_config_error("memory.numa_policy", "interleaved", "did you mean 'interleave'?");
  expect_config_error("memory.numa_policy", "prefered:1", "did you mean 'preferred:1'?");
  expect_config_error("memory.numa_policy", "preferred:", "is not local, interleave or preferred:<node>");
  expect_config_error("memory.numa_policy", "preferred:one", "a NUMA node number 0..4095");
  expect_config_error("memory.numa_policy", "preferred:-1", "is not local, interleave or preferred:<node>");
  expect_config_error("memory.numa_policy", "preferred:4096", "is not local, interleave or preferred:<node>");
}

// A suggestion is never the value itself: 'preferred' is spelt right and lacks its node, and
// 'zstd:' lacks its threshold; a wrong letter case still gets the right spelling.
TEST(MemoryConfig, NoSuggestionRepeatsTheValue) {
  for (const auto& [key, value, says] :
       {std::tuple{"memory.numa_policy", "preferred", "preferred needs the node: preferred:0"},
        std::tuple{"distributed.compression", "zstd:", "zstd:<threshold bytes>"},
        std::tuple{"distributed.compression", "zstd:x", "zstd:<threshold bytes>"}}) {
    try {
      config_with({{key, value}});
      ADD_FAILURE() << key << " = " << value << " was accepted";
    } catch (const ConfigError& error) {
      EXPECT_THAT(error.what(), HasSubstr(says));
      EXPECT_THAT(error.what(), Not(HasSubstr("did you mean"))) << key << " = " << value;
    }
  }
  expect_config_error("memory.numa_policy", "LOCAL", "did you mean 'local'?");
}

}  // namespace
}  // namespace nerve::memory::testing
