// nerve::MemoryPool: the public face of one host pool.
#include "nerve/memory.hpp"

#include "memory/pool/host_node_allocator.hpp"
#include "memory/pool/host_pool.hpp"

namespace nerve {

MemoryPool::MemoryPool(const Config& config, const Topology& topology, int numa_node, std::size_t limit_bytes)
    : pool_(std::make_unique<memory::HostPool>(
          std::make_unique<memory::HostNodeAllocator>(config, topology, numa_node),
          memory::PoolOptions::from_config(config, limit_bytes))) {}

MemoryPool::~MemoryPool() = default;

// The pool is a HostPool (final): these calls are direct, and its fast paths inline here.
void* MemoryPool::allocate(std::size_t bytes) {
  return static_cast<memory::HostPool&>(*pool_).allocate(bytes);
}

void MemoryPool::deallocate(void* pointer, std::size_t bytes) noexcept {
  static_cast<memory::HostPool&>(*pool_).deallocate(pointer, bytes);
}

void* MemoryPool::allocate(std::size_t bytes, std::size_t alignment) {
  return pool_->allocate_aligned(bytes, alignment);
}

void MemoryPool::deallocate(void* pointer, std::size_t bytes, std::size_t alignment) noexcept {
  pool_->deallocate_aligned(pointer, bytes, alignment);
}

std::size_t MemoryPool::compact() { return pool_->compact(); }

MemoryPoolStats MemoryPool::stats() const { return pool_->stats(); }

}  // namespace nerve
