// device_blocks.hpp — an OpenCL device's memory as a memory-layer NodeAllocator.
//
// Each block is one clCreateBuffer, named by a range of fake addresses (address_map.hpp); the memory
// node's DeviceArena (memory/pool/device_arena.hpp) carves replicas out of these blocks, so a replica
// is (block, offset) and making one costs no driver call unless the arena needs a new block.
//
// Thread safety: every member may be called from any thread.
// Errors: allocate_block() throws Error(out_of_memory) when the driver has no memory for the buffer,
// and Error(internal) for any other driver failure.
#pragma once

#include <atomic>
#include <cstddef>
#include <string>

#include "backend/opencl/address_map.hpp"
#include "memory/pool/node_allocator.hpp"

namespace nerve::detail::opencl {

class Engine;

class DeviceBlockAllocator final : public memory::NodeAllocator {
 public:
  DeviceBlockAllocator(Engine& engine, AddressMap& addresses, int node_index)
      : engine_(engine), addresses_(addresses), node_index_(node_index) {}
  DeviceBlockAllocator(const DeviceBlockAllocator&) = delete;
  DeviceBlockAllocator& operator=(const DeviceBlockAllocator&) = delete;

  void* allocate_block(std::size_t bytes, std::size_t alignment) override;
  void free_block(void* block, std::size_t bytes) noexcept override;
  int node_index() const noexcept override { return node_index_; }
  bool host_addressable() const noexcept override { return false; }
  std::string describe() const override;
  memory::NodeAllocatorStats stats() const override;

 private:
  Engine& engine_;
  AddressMap& addresses_;
  const int node_index_;
  std::atomic<std::size_t> blocks_{0}, bytes_{0};
};

}  // namespace nerve::detail::opencl
