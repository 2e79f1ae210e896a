// node_budget.hpp — a pool's share of a memory node: its byte limit and what it has reserved.
//
// Every block a pool obtains (slab, large block, staging buffer) goes through a NodeBudget, which
// refuses a block that would take the pool's reservations past its limit, so that a full pool is an
// error the pool can report (or make room for, by compacting) instead of a crash.
//
// Thread safety: try_acquire() and release() may be called concurrently; the reservation is a
// relaxed atomic counter checked with fetch_add, so concurrent callers never overshoot the limit
// together.
// Errors: try_acquire() returns null for "over the limit" and lets the node's own errors
// (Error(out_of_memory) when the node is exhausted) propagate, with nothing reserved.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "memory/pool/node_allocator.hpp"

namespace nerve::memory {

class NodeBudget {
 public:
  // limit_bytes = 0: no limit.
  NodeBudget(NodeAllocator& node, std::size_t limit_bytes) : node_(node), limit_(limit_bytes) {}

  // No node holds a quarter of the address space: larger requests (a size that wrapped, or a wild
  // one) are "over the limit" before any arithmetic on them can wrap.
  static constexpr std::size_t max_block_bytes = SIZE_MAX / 4;

  // `charged` (at most `bytes`) is what counts against the limit: a block's speed padding does not
  // (LargeAllocations' colouring), so whether a buffer fits never depends on other blocks' colours.
  void* try_acquire(std::size_t bytes, std::size_t alignment) { return try_acquire(bytes, alignment, bytes); }
  void* try_acquire(std::size_t bytes, std::size_t alignment, std::size_t charged) {
    if (bytes > max_block_bytes || (limit_ != 0 && charged > limit_)) return nullptr;
    const std::size_t after = charged_.fetch_add(charged, std::memory_order_relaxed) + charged;
    if (limit_ != 0 && after > limit_) {
      charged_.fetch_sub(charged, std::memory_order_relaxed);
      return nullptr;
    }
    try {
      void* block = node_.allocate_block(bytes, alignment);
      reserved_.fetch_add(bytes, std::memory_order_relaxed);
      return block;
    } catch (...) {
      charged_.fetch_sub(charged, std::memory_order_relaxed);
      throw;
    }
  }

  void release(void* block, std::size_t bytes) noexcept { release(block, bytes, bytes); }
  void release(void* block, std::size_t bytes, std::size_t charged) noexcept {
    node_.free_block(block, bytes);
    reserved_.fetch_sub(bytes, std::memory_order_relaxed);
    charged_.fetch_sub(charged, std::memory_order_relaxed);
    released_.fetch_add(bytes, std::memory_order_relaxed);
  }

  // reserved(): the bytes obtained from the node; what counts against the limit may be less.
  std::size_t reserved() const noexcept { return reserved_.load(std::memory_order_relaxed); }
  std::size_t limit() const noexcept { return limit_; }
  // charged(): what counts against the limit (reserved() less the blocks' speed padding).
  std::size_t charged() const noexcept { return charged_.load(std::memory_order_relaxed); }
  // released_total() counts every byte ever given back (compact() reports the difference).
  std::uint64_t released_total() const noexcept { return released_.load(std::memory_order_relaxed); }
  NodeAllocator& node() const noexcept { return node_; }

 private:
  NodeAllocator& node_;
  const std::size_t limit_;
  std::atomic<std::size_t> reserved_{0};
  std::atomic<std::size_t> charged_{0};  // against limit_
  std::atomic<std::uint64_t> released_{0};
};

// describe_limit(): a pool limit for error messages; 0 means the pool is uncapped.
inline std::string describe_limit(std::size_t limit) {
  return limit == 0 ? std::string("has no limit") : "limit is " + std::to_string(limit) + " bytes";
}

}  // namespace nerve::memory
