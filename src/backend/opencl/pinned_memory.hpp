// pinned_memory.hpp — page-locked host memory the OpenCL way, as a memory-layer NodeAllocator.
//
// OpenCL has no "pin these pages" call; pinned memory is a buffer created with CL_MEM_ALLOC_HOST_PTR
// and mapped, which drivers back with page-locked pages their DMA engines read directly. Each block is
// one such buffer, mapped for its whole life. The OpenCL memory node hands this allocator to the
// memory layer's StagingPool (memory/pool/staging_pool.hpp), which pools and reuses the blocks.
//
// Thread safety: every member may be called from any thread.
// Errors: allocate_block() throws Error(out_of_memory) when the driver cannot create or map the buffer.
#pragma once

#include <map>
#include <mutex>
#include <string>

#include "backend/opencl/cl.hpp"
#include "memory/pool/node_allocator.hpp"

namespace nerve::detail::opencl {

class Engine;

class PinnedOpenclAllocator final : public memory::NodeAllocator {
 public:
  explicit PinnedOpenclAllocator(Engine& engine) : engine_(engine) {}
  ~PinnedOpenclAllocator() override;
  PinnedOpenclAllocator(const PinnedOpenclAllocator&) = delete;
  PinnedOpenclAllocator& operator=(const PinnedOpenclAllocator&) = delete;

  void* allocate_block(std::size_t bytes, std::size_t alignment) override;
  void free_block(void* block, std::size_t bytes) noexcept override;
  int node_index() const noexcept override { return 0; }  // host memory
  bool host_addressable() const noexcept override { return true; }
  std::string describe() const override;
  memory::NodeAllocatorStats stats() const override;

 private:
  void release(void* block, cl_mem mem) noexcept;

  Engine& engine_;
  mutable std::mutex mutex_;
  std::map<void*, std::pair<cl_mem, std::size_t>> blocks_;  // mapped pointer -> buffer, bytes
};

}  // namespace nerve::detail::opencl
