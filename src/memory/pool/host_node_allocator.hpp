// host_node_allocator.hpp — host memory blocks of one NUMA node, per memory.allocator and
// memory.numa_policy.
//
// Blocks come from mmap/munmap (system: page aligned; larger alignments by mapping more and unmapping
// the excess) or from jemalloc/tcmalloc's aligned_alloc/free (malloc_library.hpp); with
// memory.huge_pages, mapped blocks of two huge pages and more are advised to use transparent huge
// pages (huge_pages.hpp; not the libraries' blocks, whose pages they reuse); then they are bound per the NUMA
// policy (numa_binding.hpp). Every live block is recorded with its intended placement, so placement_of()
// answers for any address inside a block, and a free_block() of something that is not a live block is
// reported instead of corrupting the source.
//
// Thread safety: all members may be called concurrently (a mutex guards the block map; block calls are
// pool slow paths).
// Errors: the constructor throws ConfigError for an allocator library that cannot be loaded
// (memory.allocator) or a preferred NUMA node the topology lacks (memory.numa_policy);
// allocate_block() throws Error(out_of_memory) when the source has no memory.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>

#include "nerve/config.hpp"
#include "nerve/topology.hpp"

#include "memory/pool/malloc_library.hpp"
#include "memory/pool/node_allocator.hpp"
#include "memory/pool/numa_binding.hpp"

namespace nerve::memory {

class HostNodeAllocator final : public NodeAllocator {
 public:
  // The allocator of NUMA node `numa_node` (a logical index of `topology`).
  HostNodeAllocator(const Config& config, const Topology& topology, int numa_node);
  ~HostNodeAllocator() override;
  HostNodeAllocator(const HostNodeAllocator&) = delete;
  HostNodeAllocator& operator=(const HostNodeAllocator&) = delete;

  void* allocate_block(std::size_t bytes, std::size_t alignment) override;
  void free_block(void* block, std::size_t bytes) noexcept override;
  int node_index() const noexcept override { return numa_node_; }
  bool host_addressable() const noexcept override { return true; }
  std::string describe() const override;
  BlockPlacement placement_of(const void* address) const override;
  NodeAllocatorStats stats() const override;
  void release_free_memory() noexcept override {
    if (library_ != nullptr) library_->release_free_memory();
  }

  MemoryAllocator kind() const noexcept { return kind_; }

 private:
  struct Block {
    std::size_t bytes;
    BlockPlacement placement;
    bool huge_pages;  // advised MADV_HUGEPAGE
  };
  void* allocate_from_source(std::size_t bytes, std::size_t alignment);
  void free_to_source(void* block, std::size_t bytes) noexcept;

  MemoryAllocator kind_;
  const MallocLibrary* library_ = nullptr;  // jemalloc/tcmalloc
  int numa_node_;
  NumaBinder binder_;
  std::size_t huge_page_min_block_ = 0;  // 0: no huge pages (memory.huge_pages false, or none here)
  std::string description_;
  mutable std::mutex mutex_;
  std::map<std::uintptr_t, Block> blocks_;  // by start address
  std::size_t bytes_ = 0;
  std::size_t huge_page_bytes_ = 0;
};

}  // namespace nerve::memory
