// allocators.hpp — where a CUDA device's memory comes from, as memory-layer NodeAllocators.
//
//   DeviceBlockAllocator   cudaMalloc / cudaFree: the big blocks DeviceArena (device_arena.hpp)
//                          sub-allocates.
//   ManagedBlockAllocator  cudaMallocManaged (gpu.unified_memory): before each block it asks the
//                          device how much memory is free and refuses (out_of_memory, so the runtime
//                          evicts) a block larger than that: managed memory can be oversubscribed,
//                          and an oversubscribed GPU thrashes pages instead of failing.
//   PinnedCudaAllocator    cudaHostAlloc(portable | mapped): page-locked host memory for the memory
//                          layer's StagingPool and for completion flags.
//
// Thread safety: every member may be called from any thread. Errors: allocate_block() throws
// Error(out_of_memory) when the driver refuses.
#pragma once

#include <atomic>
#include <cstddef>
#include <string>

#include "backend/cuda/driver.hpp"
#include "memory/pool/node_allocator.hpp"

namespace nerve::detail::cuda {

enum class BlockKind { device, managed, pinned };

class CudaBlockAllocator final : public memory::NodeAllocator {
 public:
  CudaBlockAllocator(Driver& driver, BlockKind kind, int device, int node_index, std::string name)
      : driver_(driver), kind_(kind), device_(device), node_(node_index), name_(std::move(name)) {}

  void* allocate_block(std::size_t bytes, std::size_t alignment) override;
  void free_block(void* block, std::size_t bytes) noexcept override;
  int node_index() const noexcept override { return node_; }
  bool host_addressable() const noexcept override { return kind_ == BlockKind::pinned; }
  std::string describe() const override { return name_; }
  memory::NodeAllocatorStats stats() const override;

 private:
  Driver& driver_;
  const BlockKind kind_;
  const int device_;
  const int node_;
  const std::string name_;
  std::atomic<std::size_t> blocks_{0}, bytes_{0};
};

}  // namespace nerve::detail::cuda
