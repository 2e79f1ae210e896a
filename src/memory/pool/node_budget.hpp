// node_budget.hpp — a pool's share of a memory node: its byte limit and what it has reserved.
//
// Every block a pool obtains (slab, large block, staging buffer) goes through a NodeBudget, which
// refuses a block that would take the pool's reservations past its limit, so that a full pool is an
// error the pool can report (or make room for, by compacting) instead of a crash.
//
// Thread safety: try_acquire() and release() may be called concurrently; the reservation is a
// relaxed atomic counter raised by compare-and-swap only when the request fits, so concurrent callers
// never overshoot the limit together, and a request that does not fit never makes one that does
// look over the limit while it is being refused.
// Errors: try_acquire() returns null for "over the limit" and lets the node's own errors
// (Error(out_of_memory) when the node is exhausted) propagate, with nothing reserved — or, given a
// `refusal`, keeps the node's out_of_memory there and returns null as well: a machine out of memory
// is, like the limit, a reason to give cached memory back and try again (retry_after_compacting()).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>

#include "nerve/error.hpp"

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
    if (bytes > max_block_bytes || !charge(charged)) return nullptr;
    try {
      void* block = node_.allocate_block(bytes, alignment);
      reserved_.fetch_add(bytes, std::memory_order_relaxed);
      return block;
    } catch (...) {
      charged_.fetch_sub(charged, std::memory_order_relaxed);
      throw;
    }
  }
  // The node's out_of_memory goes to `refusal` (replaced), any other error propagates.
  void* try_acquire(std::size_t bytes, std::size_t alignment, std::size_t charged,
                    std::exception_ptr& refusal) {
    try {
      return try_acquire(bytes, alignment, charged);
    } catch (const Error& error) {
      if (error.code() != ErrorCode::out_of_memory) throw;
      refusal = std::current_exception();
      return nullptr;
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
  bool charge(std::size_t charged) noexcept {
    if (limit_ == 0) {
      charged_.fetch_add(charged, std::memory_order_relaxed);
      return true;
    }
    if (charged > limit_) return false;
    std::size_t now = charged_.load(std::memory_order_relaxed);
    do {
      if (now > limit_ - charged) return false;
    } while (!charged_.compare_exchange_weak(now, now + charged, std::memory_order_relaxed));
    return true;
  }

  NodeAllocator& node_;
  const std::size_t limit_;
  std::atomic<std::size_t> reserved_{0};
  std::atomic<std::size_t> charged_{0};  // against limit_
  std::atomic<std::uint64_t> released_{0};
};

// retry_after_compacting() is the pools' answer to a refused block: attempt(refusal) (a
// try_acquire() with a refusal, or something built on one) once; if it gives nothing, compact() —
// cached and empty memory goes back to the node — and attempt again. Null when the second attempt
// was refused by the limit (the caller reports it, naming the limit), the node's own out_of_memory
// when the node refused it.
template <class Attempt, class Compact>
void* retry_after_compacting(Attempt&& attempt, Compact&& compact) {
  std::exception_ptr refusal;
  if (void* block = attempt(refusal)) return block;
  compact();
  refusal = nullptr;
  if (void* block = attempt(refusal)) return block;
  if (refusal) std::rethrow_exception(refusal);
  return nullptr;
}

// describe_limit(): a pool limit for error messages; 0 means the pool is uncapped.
inline std::string describe_limit(std::size_t limit) {
  return limit == 0 ? std::string("has no limit") : "limit is " + std::to_string(limit) + " bytes";
}

}  // namespace nerve::memory
