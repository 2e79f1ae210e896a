// pinned_allocator.hpp — page-locked host memory for DMA staging (mmap + mlock).
//
// A device copies to and from page-locked memory directly (its pages cannot move or be swapped out);
// other host memory goes through a driver's bounce buffer. Blocks are mapped, then locked with
// mlock(); when RLIMIT_MEMLOCK (ulimit -l) forbids it, the block is used unlocked — transfers still
// work, only slower — with one warning per allocator, and stats().locked_bytes says how much is
// really locked. A backend with its own pinned memory (cudaHostAlloc, which also registers the pages
// with the driver) supplies another NodeAllocator to the StagingPool instead of this one.
//
// Thread safety: every member may be called concurrently.
// Errors: allocate_block() throws Error(out_of_memory) when mmap fails.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>

#include "memory/pool/node_allocator.hpp"

namespace nerve::memory {

class PinnedHostAllocator final : public NodeAllocator {
 public:
  // numa_node: the host memory node the staging memory is attributed to.
  explicit PinnedHostAllocator(int numa_node = 0);
  ~PinnedHostAllocator() override;
  PinnedHostAllocator(const PinnedHostAllocator&) = delete;
  PinnedHostAllocator& operator=(const PinnedHostAllocator&) = delete;

  void* allocate_block(std::size_t bytes, std::size_t alignment) override;
  void free_block(void* block, std::size_t bytes) noexcept override;
  int node_index() const noexcept override { return numa_node_; }
  bool host_addressable() const noexcept override { return true; }
  std::string describe() const override;
  NodeAllocatorStats stats() const override;

  // Test hook: pretend mlock() fails with EPERM (as under a zero RLIMIT_MEMLOCK).
  void refuse_locking_for_testing(bool refuse) noexcept { refuse_locking_.store(refuse); }

 private:
  int numa_node_;
  std::atomic<bool> refuse_locking_{false};
  std::atomic_flag warned_ = ATOMIC_FLAG_INIT;
  mutable std::mutex mutex_;
  std::map<void*, std::pair<std::size_t, bool>> blocks_;  // block -> bytes, locked
  std::size_t bytes_ = 0;
  std::size_t locked_bytes_ = 0;
};

}  // namespace nerve::memory
