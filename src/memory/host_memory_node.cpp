#include "memory/host_memory_node.hpp"

#include <algorithm>
#include <cstring>

#include "memory/pool/host_node_allocator.hpp"
#include "memory/pool/host_pool.hpp"
#include "memory/pool/numa_binding.hpp"
#include "memory/pool/pinned_allocator.hpp"

namespace nerve::detail {
namespace {

// Buffers hold elements of any type: a cache line keeps them aligned for SIMD and free of false
// sharing with neighbours; from 64 KiB on the pool's blocks are page aligned anyway.
constexpr std::size_t buffer_alignment = 64;

}  // namespace

HostMemoryNode::HostMemoryNode(const Config& config, const Topology& topology)
    : MemoryNode(0, "host", static_cast<std::size_t>(-1), true), policy_(config.memory.numa_policy) {
  const auto nodes = std::max<std::size_t>(1, topology.numa_nodes().size());
  const memory::PoolOptions options = memory::PoolOptions::from_config(config, config.memory.host_node_limit);
  pools_.reserve(nodes);
  for (std::size_t node = 0; node < nodes; ++node) {
    pools_.push_back(std::make_unique<memory::HostPool>(
        std::make_unique<memory::HostNodeAllocator>(config, topology, static_cast<int>(node)), options));
  }
}

HostMemoryNode::~HostMemoryNode() = default;

int HostMemoryNode::pool_for(int numa_node, int worker_numa) const noexcept {
  const auto count = static_cast<int>(pools_.size());
  int node = numa_node;
  if (node < 0 && policy_.kind == NumaPolicy::Kind::preferred) node = policy_.node;
  if (node < 0 && policy_.kind == NumaPolicy::Kind::local) node = worker_numa;
  if (node < 0 && policy_.kind == NumaPolicy::Kind::interleave) node = memory::NumaBinder::interleaved_pool;
  return node >= 0 && node < count ? node : 0;
}

HostBlock HostMemoryNode::allocate_buffer(std::size_t bytes, int numa_node, int worker_numa) {
  const int pool = pool_for(numa_node, worker_numa);
  auto* data = static_cast<std::byte*>(pools_[pool]->allocate_aligned(bytes, buffer_alignment));
  try {
    pinning_.track(data, bytes);
  } catch (...) {
    pools_[pool]->deallocate_aligned(data, bytes, buffer_alignment);
    throw;
  }
  return {data, pool};
}

void HostMemoryNode::free_buffer(const HostBlock& block, std::size_t bytes) noexcept {
  if (block.data == nullptr) return;
  pinning_.untrack(block.data, bytes);
  pools_[block.pool]->deallocate_aligned(block.data, bytes, buffer_alignment);
}

memory::StagingPool& HostMemoryNode::staging() {
  std::lock_guard lock(staging_mutex_);
  if (staging_ == nullptr)
    staging_ = std::make_unique<memory::StagingPool>(std::make_unique<memory::PinnedHostAllocator>(0));
  return *staging_;
}

std::size_t HostMemoryNode::compact() {
  std::size_t returned = 0;
  for (auto& pool : pools_) returned += pool->compact();
  std::lock_guard lock(staging_mutex_);
  if (staging_ != nullptr) returned += staging_->compact();
  return returned;
}

HostMemoryStats HostMemoryNode::memory_stats() const {
  HostMemoryStats stats;
  for (const auto& pool : pools_) {
    stats.pools.push_back(pool->stats());
    stats.bytes_reserved += stats.pools.back().bytes_reserved;
    stats.bytes_in_use += stats.pools.back().bytes_in_use;
  }
  std::lock_guard lock(staging_mutex_);
  if (staging_ != nullptr) stats.staging = staging_->stats();
  return stats;
}

std::byte* HostMemoryNode::allocate_storage(std::size_t bytes) { return allocate_buffer(bytes, 0, 0).data; }

void HostMemoryNode::free_storage(std::byte* data, std::size_t bytes) noexcept {
  free_buffer({data, 0}, bytes);
}

void HostMemoryNode::start_copy(MemoryNode& /*from*/, const std::byte* source, MemoryNode& /*to*/,
                                std::byte* destination, std::size_t bytes, CopyCompletion& completion) {
  std::memcpy(destination, source, bytes);  // host to host: only reachable through tests
  completion.copy_done(true, {});
}

}  // namespace nerve::detail
