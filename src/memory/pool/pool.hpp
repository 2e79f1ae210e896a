// pool.hpp — a memory node's pool: what the runtime keeps per memory node.
//
// NodePool is the interface; make_node_pool() picks the implementation from the node:
//   HostPool (host_pool.hpp)        host-addressable memory: size classes, slabs, per-thread caches
//                                   over a central free list or per-thread heaps; no lock and no
//                                   system call on a thread-cache hit.
//   OutOfBandPool (out_of_band_pool.hpp)  memory the CPU cannot address (a device): the same size
//                                   classes and slabs, bookkeeping kept in host memory under a mutex;
//                                   it never reads or writes the node's memory.
// Both send requests above 64 KiB to LargeAllocations, and both account every block against the
// pool's byte limit (NodeBudget).
//
// Thread safety and errors: as nerve::MemoryPool (include/nerve/memory.hpp), which wraps a HostPool.
#pragma once

#include <cstddef>
#include <memory>

#include "nerve/config.hpp"
#include "nerve/error.hpp"
#include "nerve/memory.hpp"

#include "memory/pool/node_allocator.hpp"

namespace nerve::memory {

struct PoolOptions {
  std::size_t limit_bytes = 0;                                   // 0 = no limit
  std::size_t thread_cache_bytes = std::size_t{1} << 20;         // memory.per_thread_pool_size
  bool global_pool = true;                                       // memory.global_pool
  std::size_t retained_empty_slab_bytes = std::size_t{8} << 20;  // empty slabs kept for reuse
  std::size_t large_cache_bytes = std::size_t{64} << 20;         // recently freed large blocks kept
  std::size_t large_cache_blocks = 16;

  // from_config() takes memory.per_thread_pool_size and memory.global_pool from `config`.
  static PoolOptions from_config(const Config& config, std::size_t limit_bytes = 0);
};

class NodePool {
 public:
  virtual ~NodePool() = default;
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void deallocate(void* pointer, std::size_t bytes) noexcept = 0;
  virtual std::size_t compact() = 0;
  virtual MemoryPoolStats stats() const = 0;
  virtual NodeAllocator& node() const noexcept = 0;
  // placement_of() is the intended NUMA placement of the block holding `pointer` (host pools).
  BlockPlacement placement_of(const void* pointer) const { return node().placement_of(pointer); }

  // try_allocate() is allocate() that returns null instead of throwing out_of_memory (the pool is at
  // its limit even after compacting, or the node is exhausted), for callers that can make room —
  // evict replicas — and retry. Other errors still throw.
  void* try_allocate(std::size_t bytes) {
    try {
      return allocate(bytes);
    } catch (const Error& error) {
      if (error.code() == ErrorCode::out_of_memory) return nullptr;
      throw;
    }
  }
};

// make_node_pool() makes the pool for `node`: a HostPool when it is host-addressable, else an
// OutOfBandPool.
std::unique_ptr<NodePool> make_node_pool(std::unique_ptr<NodeAllocator> node, const PoolOptions& options);

}  // namespace nerve::memory
