// device_pools.hpp — the two pools a CUDA device's memory node can allocate replicas from.
//
//   DeviceArena        nerve's own sub-allocator: device memory is taken from the driver in big
//                      chunks (64 MiB, or a larger request rounded to 2 MiB) and carved best-fit
//                      into 256-byte-aligned ranges, freed ranges coalescing with their neighbours.
//                      Its bookkeeping lives in host memory (the chunks are never touched by the
//                      CPU). No driver call happens unless a new chunk is needed; compact() and an
//                      allocation that fails return wholly empty chunks to the driver.
//   StreamOrderedPool  the CUDA stream-ordered allocator (cudaMallocAsync from the device's default
//                      pool, its release threshold unlimited), so the driver caches freed memory.
//                      An allocation is made on a stream of its own and synchronised there, so
//                      every other stream may use it at once.
// Which one a device uses: NERVE_CUDA_POOL = arena (default) | stream_ordered; scripts/gpu-check.sh
// measures both (bench/cuda) so the default follows the measurement.
//
// Thread safety: every member may be called from any thread (one mutex each).
// Errors: allocate() throws Error(out_of_memory) when the pool's limit or the device is exhausted;
// NodePool::try_allocate() turns that into nullptr for the runtime's evict-and-retry.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "backend/cuda/driver.hpp"
#include "memory/pool/node_budget.hpp"
#include "memory/pool/pool.hpp"

namespace nerve::detail::cuda {

enum class PoolKind { arena, stream_ordered };
// pool_kind_from_environment(): NERVE_CUDA_POOL, default arena.
PoolKind pool_kind_from_environment();

class DeviceArena final : public memory::NodePool {
 public:
  static constexpr std::size_t alignment = 256;
  static constexpr std::size_t default_chunk_bytes = std::size_t{64} << 20;

  DeviceArena(std::unique_ptr<memory::NodeAllocator> node, std::size_t limit_bytes,
              std::size_t chunk_bytes = default_chunk_bytes);
  ~DeviceArena() override;

  void* allocate(std::size_t bytes) override;
  void deallocate(void* pointer, std::size_t bytes) noexcept override;
  std::size_t compact() override;
  MemoryPoolStats stats() const override;
  memory::NodeAllocator& node() const noexcept override { return *node_; }
  std::size_t chunks() const;

 private:
  struct Chunk {
    std::size_t bytes = 0;
    std::size_t used = 0;
  };
  static std::size_t rounded(std::size_t bytes) noexcept {
    return (bytes + alignment - 1) / alignment * alignment;
  }
  void* take(std::size_t bytes);  // best fit from the free ranges; nullptr when none fits
  void add_free(std::uintptr_t start, std::size_t bytes);
  void remove_free(std::map<std::uintptr_t, std::size_t>::iterator range);
  std::size_t release_empty_chunks();
  bool new_chunk(std::size_t bytes);

  const std::unique_ptr<memory::NodeAllocator> node_;
  memory::NodeBudget budget_;
  const std::size_t chunk_bytes_;
  mutable std::mutex mutex_;
  std::map<std::uintptr_t, Chunk> chunks_;              // by start address
  std::map<std::uintptr_t, std::size_t> free_;          // free ranges by start address
  std::multimap<std::size_t, std::uintptr_t> by_size_;  // the same ranges by size (best fit)
  std::size_t in_use_ = 0;
  std::uint64_t allocations_ = 0, from_node_ = 0;
};

class StreamOrderedPool final : public memory::NodePool {
 public:
  StreamOrderedPool(Driver& driver, int device, std::unique_ptr<memory::NodeAllocator> describe,
                    std::size_t limit_bytes);
  ~StreamOrderedPool() override;

  void* allocate(std::size_t bytes) override;
  void deallocate(void* pointer, std::size_t bytes) noexcept override;
  std::size_t compact() override { return 0; }  // the driver's pool trims itself
  MemoryPoolStats stats() const override;
  memory::NodeAllocator& node() const noexcept override { return *describe_; }

 private:
  Driver& driver_;
  const int device_;
  const std::unique_ptr<memory::NodeAllocator> describe_;
  const std::size_t limit_;
  Stream stream_ = nullptr;
  mutable std::mutex mutex_;
  std::size_t in_use_ = 0;
  std::uint64_t allocations_ = 0;
};

}  // namespace nerve::detail::cuda
