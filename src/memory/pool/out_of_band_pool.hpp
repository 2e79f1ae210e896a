// out_of_band_pool.hpp — the pool of a memory node the CPU cannot address (device memory).
//
// The same size classes and slab sizes as HostPool, but every piece of bookkeeping lives in host
// memory: a map from slab start to its record (class, carved count, free chunk indices), per-class
// lists of slabs with a free chunk, and LargeAllocations for requests above 64 KiB. The node's memory
// is never read or written, so it works for clCreateBuffer/cudaMalloc blocks (and is tested with a
// node whose "memory" is an inaccessible mapping). One mutex guards it all: device allocations are
// per buffer, not per object, so this path is not the nanosecond one — but it makes no driver call
// unless it needs a new slab or block.
//
// Slabs need no special alignment; a chunk's slab is found by an ordered-map lookup.
//
// Thread safety: every member may be called concurrently. Errors: as HostPool.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "memory/pool/large_allocations.hpp"
#include "memory/pool/node_budget.hpp"
#include "memory/pool/pool.hpp"
#include "memory/pool/size_classes.hpp"

namespace nerve::memory {

class OutOfBandPool final : public NodePool {
 public:
  OutOfBandPool(std::unique_ptr<NodeAllocator> node, const PoolOptions& options);
  ~OutOfBandPool() override;
  OutOfBandPool(const OutOfBandPool&) = delete;
  OutOfBandPool& operator=(const OutOfBandPool&) = delete;

  void* allocate(std::size_t bytes) override;
  void deallocate(void* pointer, std::size_t bytes) noexcept override;
  std::size_t compact() override;
  MemoryPoolStats stats() const override;
  NodeAllocator& node() const noexcept override { return *node_; }

 private:
  struct Slab {
    std::uintptr_t start = 0;
    std::size_t bytes = 0;
    unsigned size_class = 0;
    std::uint32_t capacity = 0;
    std::uint32_t carved = 0;
    std::vector<std::uint32_t> free;  // indices of returned chunks
    bool listed = false;              // in partial_[size_class]
    std::size_t live() const noexcept { return carved - free.size(); }
  };

  void* allocate_small(std::size_t bytes, unsigned size_class);
  // release_empty_slabs() gives every slab without a live chunk back to the node (compact()).
  std::size_t release_empty_slabs();
  [[noreturn]] void throw_out_of_memory(std::size_t requested, std::size_t block_bytes);

  const std::unique_ptr<NodeAllocator> node_;
  NodeBudget budget_;
  LargeAllocations large_;

  mutable std::mutex mutex_;
  std::map<std::uintptr_t, std::unique_ptr<Slab>> slabs_;  // by start address
  std::vector<Slab*> partial_[size_class_count];           // slabs with a free or uncarved chunk
  std::uint64_t allocations_[size_class_count] = {};
  std::uint64_t in_use_[size_class_count] = {};
  std::uint64_t from_node_ = 0;
};

}  // namespace nerve::memory
