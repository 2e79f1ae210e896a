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

  // allocate_aligned() returns `bytes` aligned to `alignment` (a power of two up to the page size):
  // up to 16 as allocate(); up to 64 (a cache line) from a size class whose chunks are multiples of
  // 64 bytes (slabs and their 128-byte headers keep them aligned); above that, from a page-aligned
  // large block. deallocate_aligned() takes the same `bytes` and `alignment`.
  // Throws Error(invalid_argument) for another alignment.
  void* allocate_aligned(std::size_t bytes, std::size_t alignment) {
    return allocate(aligned_request(bytes, alignment));
  }
  void deallocate_aligned(void* pointer, std::size_t bytes, std::size_t alignment) noexcept {
    deallocate(pointer, aligned_request_unchecked(bytes, alignment));
  }
  // aligned_request() is the plain request size that gives `alignment` (see allocate_aligned()).
  static std::size_t aligned_request(std::size_t bytes, std::size_t alignment);
  static std::size_t aligned_request_unchecked(std::size_t bytes, std::size_t alignment) noexcept;

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
