// device_arena.hpp — a device memory node's pool: big driver blocks carved best-fit into aligned ranges.
//
// Device memory is taken from the node in chunks (64 MiB by default, or a larger request rounded up to
// 2 MiB, never more than the node's largest single allocation) and carved best fit into ranges aligned
// to `alignment`; a freed range coalesces with its free neighbours in the same chunk. All bookkeeping
// lives in host memory (a chunk is never read or written), so it serves cudaMalloc blocks and
// clCreateBuffer objects alike (an OpenCL node names its objects by fake addresses). No node call
// happens unless a new chunk is needed; compact() and an allocation that cannot be met return wholly
// empty chunks to the node. When a standard chunk does not fit (a small limit, a nearly full device) a
// chunk of just the request is tried before giving up.
//
// Unlike OutOfBandPool (size classes and slabs, for many small objects), ranges here are per replica:
// few, of any size, and worth packing tightly into the device's memory.
//
// Thread safety: every member may be called from any thread (one mutex).
// Errors: allocate() throws Error(out_of_memory) when the pool's limit or the node is exhausted;
// NodePool::try_allocate() turns that into nullptr for the runtime's evict-and-retry.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <mutex>

#include "memory/pool/node_budget.hpp"
#include "memory/pool/pool.hpp"

namespace nerve::memory {

struct DeviceArenaOptions {
  std::size_t limit_bytes = 0;                      // bytes taken from the node; 0 = no limit
  std::size_t alignment = 256;                      // of every range; a power of two
  std::size_t chunk_bytes = std::size_t{64} << 20;  // the usual chunk
  std::size_t max_chunk_bytes = std::numeric_limits<std::size_t>::max();  // the node's largest block
};

class DeviceArena final : public NodePool {
 public:
  static constexpr std::size_t chunk_granule = std::size_t{2} << 20;

  DeviceArena(std::unique_ptr<NodeAllocator> node, const DeviceArenaOptions& options);
  ~DeviceArena() override;
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;

  void* allocate(std::size_t bytes) override;
  void deallocate(void* pointer, std::size_t bytes) noexcept override;
  std::size_t compact() override;
  MemoryPoolStats stats() const override;
  NodeAllocator& node() const noexcept override { return *node_; }
  std::size_t alignment() const noexcept { return alignment_; }
  std::size_t chunks() const;

 private:
  struct Chunk {
    std::size_t bytes = 0;
    std::size_t used = 0;
  };
  std::size_t rounded(std::size_t bytes) const noexcept {
    return (bytes + alignment_ - 1) & ~(alignment_ - 1);
  }
  void* take(std::size_t bytes);  // best fit from the free ranges; nullptr when none fits
  void add_free(std::uintptr_t start, std::size_t bytes);
  void remove_free(std::map<std::uintptr_t, std::size_t>::iterator range);
  std::size_t release_empty_chunks();
  bool new_chunk(std::size_t bytes);
  bool try_chunk(std::size_t size);

  const std::unique_ptr<NodeAllocator> node_;
  NodeBudget budget_;
  const std::size_t alignment_;
  const std::size_t chunk_bytes_;
  const std::size_t max_chunk_bytes_;
  mutable std::mutex mutex_;
  std::map<std::uintptr_t, Chunk> chunks_;              // by start address
  std::map<std::uintptr_t, std::size_t> free_;          // free ranges by start address
  std::multimap<std::size_t, std::uintptr_t> by_size_;  // the same ranges by size (best fit)
  std::size_t in_use_ = 0;
  std::uint64_t allocations_ = 0, from_node_ = 0;
};

}  // namespace nerve::memory
