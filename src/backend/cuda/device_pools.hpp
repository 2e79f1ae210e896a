// device_pools.hpp — the two pools a CUDA device's memory node can allocate replicas from.
//
//   DeviceArena        nerve's own sub-allocator (memory/pool/device_arena.hpp, shared with the
//                      OpenCL backend): big driver blocks carved best fit into 256-byte-aligned
//                      ranges; no driver call unless a new chunk is needed.
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
#include <memory>
#include <mutex>

#include "backend/cuda/driver.hpp"
#include "memory/pool/device_arena.hpp"
#include "memory/pool/pool.hpp"

namespace nerve::detail::cuda {

enum class PoolKind { arena, stream_ordered };
// pool_kind_from_environment(): NERVE_CUDA_POOL, default arena.
PoolKind pool_kind_from_environment();

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
