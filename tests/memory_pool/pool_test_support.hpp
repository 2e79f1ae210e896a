// pool_test_support.hpp — helpers shared by the memory pool tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "nerve/config.hpp"
#include "nerve/topology.hpp"

#include "memory/pool/host_node_allocator.hpp"
#include "memory/pool/host_pool.hpp"

namespace nerve::memory::testing {

// config_with() loads a hermetic configuration (no environment) with `values` set through the API.
inline Config config_with(const std::vector<std::pair<std::string, std::string>>& values) {
  Settings settings;
  settings.use_environment(false);
  for (const auto& [key, value] : values) settings.set(key, value);
  return Config::load(settings);
}

inline std::unique_ptr<HostPool> make_pool(const Config& config, std::size_t limit_bytes = 0,
                                           int numa_node = 0) {
  const Topology topology = Topology::discover(config);
  return std::make_unique<HostPool>(std::make_unique<HostNodeAllocator>(config, topology, numa_node),
                                    PoolOptions::from_config(config, limit_bytes));
}

// fill() writes an allocation's identity into every byte: its id in the first 8 bytes, a byte
// derived from it in the rest, so overlapping allocations are caught by check().
inline void fill(void* pointer, std::size_t bytes, std::uint64_t id) {
  auto* data = static_cast<unsigned char*>(pointer);
  std::memset(data, static_cast<int>(id % 251 + 1), bytes);
  std::memcpy(data, &id, std::min(bytes, sizeof id));
}

inline bool check(const void* pointer, std::size_t bytes, std::uint64_t id) {
  const auto* data = static_cast<const unsigned char*>(pointer);
  std::uint64_t stored = 0;
  std::memcpy(&stored, data, std::min(bytes, sizeof stored));
  std::uint64_t expected = 0;
  std::memcpy(&expected, &id, std::min(bytes, sizeof id));
  if (stored != expected) return false;
  const auto tag = static_cast<unsigned char>(id % 251 + 1);
  for (std::size_t i = sizeof id; i < bytes; ++i) {
    if (data[i] != tag) return false;
  }
  return true;
}

// PoolFixture's pools must end every test with nothing in use (no leak through the pool).
class PoolFixture : public ::testing::Test {
 protected:
  void expect_nothing_in_use(const NodePool& pool) {
    const MemoryPoolStats stats = pool.stats();
    EXPECT_EQ(stats.bytes_in_use, 0u) << stats.node;
    for (const auto& size_class : stats.size_classes)
      EXPECT_EQ(size_class.in_use, 0u) << size_class.chunk_bytes;
  }
};

}  // namespace nerve::memory::testing
