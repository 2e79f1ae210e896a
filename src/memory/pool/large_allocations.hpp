// large_allocations.hpp — requests above the largest size class: one node block each, plus a small
// cache of recently freed blocks.
//
// A large request is rounded up to whole pages and served by a cached block of at least that size and
// at most 1/8 more (best fit), else by a new block from the node. Freed blocks are cached (most
// recent first) up to `max_cached_blocks` and `max_cached_bytes`; older ones go back to the node.
// All bookkeeping (live blocks and their real sizes, the cache) is kept out of band, so this works for
// memory the CPU cannot address too.
//
// Thread safety: every member may be called concurrently (one mutex; large allocations are rare and
// cost a node call anyway when the cache misses). The node is called outside the mutex.
// Errors: try_allocate() returns null when the pool's limit forbids a new block, or when the node
// refuses it with out_of_memory (kept in `refusal`): the pool then makes room or reports; the node's
// other errors propagate. A block with colour padding the node refuses is asked again without it. A
// free of a pointer that is not a live block (never given, or freed already) or with a wrong size is
// logged and ignored: the block stays the caller's. A size is wrong when it does not round up to the
// same whole pages as the size asked for (rounded_size()): the block's own size may be larger (a
// cached block, colour padding).
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "memory/pool/node_budget.hpp"

namespace nerve::memory {

class LargeAllocations {
 public:
  struct Stats {
    std::uint64_t allocations = 0;
    std::uint64_t from_cache = 0;
    std::size_t bytes_in_use = 0;  // whole blocks handed out
    std::size_t bytes_cached = 0;
  };

  LargeAllocations(NodeBudget& budget, std::size_t alignment, std::size_t max_cached_bytes,
                   std::size_t max_cached_blocks)
      : budget_(budget),
        alignment_(alignment),
        max_cached_bytes_(max_cached_bytes),
        max_cached_blocks_(max_cached_blocks) {}
  ~LargeAllocations();
  LargeAllocations(const LargeAllocations&) = delete;
  LargeAllocations& operator=(const LargeAllocations&) = delete;

  // try_allocate() returns a block of at least `bytes`, or null when the limit or the node forbids a
  // new block (the node's out_of_memory in `refusal`). `*from_cache` says whether it was a recently
  // freed block.
  void* try_allocate(std::size_t bytes, bool* from_cache, std::exception_ptr& refusal);
  // free() takes back a block from try_allocate(); `bytes` is the size that was asked for (or one of
  // the same whole pages).
  void free(void* block, std::size_t bytes) noexcept;
  // release_cached() returns every cached block to the node; gives the bytes returned.
  std::size_t release_cached() noexcept;
  Stats stats() const;

  // rounded_size() is what a request of `bytes` reserves: whole pages.
  static std::size_t rounded_size(std::size_t bytes) noexcept;

 private:
  // uncount_request(): a request that got no block is not an allocation.
  void uncount_request() noexcept;

  struct CachedBlock {
    void* block;
    std::size_t bytes;
    std::size_t charged;  // what the budget counts: the bytes without the colour padding
  };
  struct LiveBlock {
    std::size_t bytes;
    std::size_t charged;
    std::size_t requested;  // rounded_size() of the request: what free() checks its size against
  };

  NodeBudget& budget_;
  const std::size_t alignment_;
  const std::size_t max_cached_bytes_;
  const std::size_t max_cached_blocks_;
  mutable std::mutex mutex_;
  std::unordered_map<void*, LiveBlock> live_;  // block -> its real size, charge and request
  unsigned next_color_ = 0;                    // guarded by mutex_
  std::vector<CachedBlock> cache_;             // most recently freed last
  std::size_t cached_bytes_ = 0;
  std::size_t live_bytes_ = 0;
  std::uint64_t allocations_ = 0;
  std::uint64_t from_cache_ = 0;
};

}  // namespace nerve::memory
