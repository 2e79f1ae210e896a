// node_allocator.hpp — where a memory node's big blocks come from.
//
// A NodeAllocator hands out large blocks (pool slabs of 64 KiB–2 MiB, large allocations, staging
// buffers) of one memory node: a NUMA node's host memory (HostNodeAllocator, with memory.allocator
// and memory.numa_policy), page-locked host memory (PinnedHostAllocator), or, through backends, a
// device's memory (OpenCL/CUDA: clCreateBuffer/cudaMalloc, cudaHostAlloc for pinned memory). The pools
// above it (pool.hpp) make small allocations cheap; a NodeAllocator call may be a system or driver
// call and is only made on a pool's slow path.
//
// host_addressable() tells the pool whether it may keep its bookkeeping inside the blocks (free lists
// threaded through free chunks, slab headers): true for host memory; false for device memory, which
// the pool then manages with metadata kept in host memory only (OutOfBandPool) and never touches.
//
// Thread safety: every member may be called from any thread concurrently.
// Errors: allocate_block() throws nerve::Error(out_of_memory) when the node has no memory left;
// free_block() never throws.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "nerve/config.hpp"

namespace nerve::memory {

// BlockPlacement is where a host block was meant to go among NUMA nodes (memory.numa_policy) and
// whether that was applied. On synthetic and XML topologies nothing is ever bound, but the intended
// placement is recorded the same way, so placement decisions can be tested on any machine.
struct BlockPlacement {
  NumaPolicy::Kind policy = NumaPolicy::Kind::local;
  // local: the pool's node (an attribution: pages land where they are first written);
  // preferred: the node the block is bound to; interleave: -1 (see intended_node()).
  int node = -1;
  int interleave_nodes = 0;  // interleave: the node count (every node, 0..n-1, in order)
  bool bound = false;        // the operating system accepted a binding for this block

  // intended_node() is the node a byte of the block should be on: for interleave, Linux's rule for
  // anonymous memory, node[(address / page size) mod node count]; else `node`.
  int intended_node(const void* address) const noexcept;
};

struct NodeAllocatorStats {
  std::size_t blocks = 0;           // blocks currently allocated
  std::size_t bytes = 0;            // their bytes
  std::size_t locked_bytes = 0;     // of which page-locked (pinned)
  std::size_t huge_page_bytes = 0;  // of which advised to use transparent huge pages
  std::uint64_t binding_failures =
      0;  // blocks the OS refused to bind (they stay where first touch puts them)
};

class NodeAllocator {
 public:
  virtual ~NodeAllocator() = default;

  // allocate_block() returns `bytes` (a multiple of the page size) aligned to `alignment`, a power of
  // two up to max_slab_bytes (0 = the allocator's natural alignment). Device allocators may ignore
  // `alignment`; the pools ask for it only when host_addressable().
  virtual void* allocate_block(std::size_t bytes, std::size_t alignment) = 0;
  // free_block() returns a block with the `bytes` it was allocated with.
  virtual void free_block(void* block, std::size_t bytes) noexcept = 0;

  // node_index() is the memory node this allocator serves (for host memory: the logical NUMA node).
  virtual int node_index() const noexcept = 0;
  // host_addressable() is true when the CPU may read and write the blocks directly.
  virtual bool host_addressable() const noexcept = 0;
  // describe() names the node for messages: "host memory of NUMA node 0 (system allocator, ...)".
  virtual std::string describe() const = 0;

  // placement_of() is the intended NUMA placement of the block containing `address` (host memory);
  // a default BlockPlacement for other allocators or unknown addresses.
  virtual BlockPlacement placement_of(const void* /*address*/) const { return {}; }
  virtual NodeAllocatorStats stats() const = 0;
  // release_free_memory(): after blocks went back (compact()), ask the source to return what it
  // keeps of them to the system; nothing for a source that unmaps at once.
  virtual void release_free_memory() noexcept {}
};

// page_size() is the system's page size (host_node_allocator.cpp).
std::size_t page_size() noexcept;

}  // namespace nerve::memory
