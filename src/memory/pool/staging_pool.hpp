// staging_pool.hpp — reusable page-locked host buffers for device transfers.
//
// A transfer stages its bytes in page-locked memory (pinned_allocator.hpp, or a backend's own pinned
// allocator such as cudaHostAlloc, given as the NodeAllocator). Locking and unlocking pages costs
// system calls and page faults, so buffers are pooled: a request is rounded up to a power of two (at
// least a page) and served by a free buffer of that size when there is one, else by a new block within
// the pool's limit. StagingBuffer gives the buffer back when it goes out of scope.
//
// Thread safety: acquire(), compact() and stats() may be called concurrently (one mutex; a staging
// buffer is per transfer, not per object); a StagingBuffer is owned by one thread at a time and must
// not outlive its pool.
// Errors: acquire() throws Error(out_of_memory) naming the node, the size asked, the limit and the
// bytes in use when the limit (after returning free buffers) or the node cannot satisfy it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "memory/pool/node_allocator.hpp"
#include "memory/pool/node_budget.hpp"

namespace nerve::memory {

class StagingPool;

class StagingBuffer {
 public:
  StagingBuffer() = default;
  StagingBuffer(StagingBuffer&& other) noexcept { *this = std::move(other); }
  StagingBuffer& operator=(StagingBuffer&& other) noexcept;
  ~StagingBuffer() { release(); }

  std::byte* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }          // as asked
  std::size_t capacity() const noexcept { return capacity_; }  // as reserved (a power of two)
  explicit operator bool() const noexcept { return data_ != nullptr; }
  // release() gives the buffer back to its pool now (the destructor does it otherwise).
  void release() noexcept;

 private:
  friend class StagingPool;
  StagingPool* pool_ = nullptr;
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  std::size_t capacity_ = 0;
};

struct StagingPoolStats {
  std::string node;
  std::size_t limit_bytes = 0;
  std::size_t bytes_reserved = 0;  // every buffer, free or in use
  std::size_t bytes_in_use = 0;
  std::size_t locked_bytes = 0;  // page-locked among the reserved bytes (the rest could not be locked)
  std::uint64_t acquisitions = 0;
  std::uint64_t reuses = 0;  // acquisitions served by a free buffer
};

class StagingPool {
 public:
  // limit_bytes = 0: no limit. `source` must be host-addressable (free buffers are linked through
  // their first bytes).
  explicit StagingPool(std::unique_ptr<NodeAllocator> source, std::size_t limit_bytes = 0);
  ~StagingPool();
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;

  StagingBuffer acquire(std::size_t bytes);
  // compact() returns every free buffer to the source; gives the bytes returned.
  std::size_t compact();
  StagingPoolStats stats() const;

 private:
  friend class StagingBuffer;
  static constexpr unsigned class_count = 48;
  // The largest buffer a class holds: a larger request is out_of_memory before any class is chosen.
  static constexpr std::size_t max_buffer_bytes = std::size_t{1} << (class_count - 1);
  struct FreeBuffer {
    FreeBuffer* next;
  };
  void give_back(std::byte* data, std::size_t capacity) noexcept;
  [[noreturn]] void throw_out_of_memory(std::size_t bytes, std::size_t capacity) const;

  const std::unique_ptr<NodeAllocator> source_;
  NodeBudget budget_;
  mutable std::mutex mutex_;
  FreeBuffer* free_[class_count] = {};  // by log2(capacity)
  std::size_t bytes_in_use_ = 0;
  std::uint64_t acquisitions_ = 0;
  std::uint64_t reuses_ = 0;
};

}  // namespace nerve::memory
