#include "backend/cuda/device_pools.hpp"

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include <fmt/format.h>

#include "nerve/error.hpp"

namespace nerve::detail::cuda {

PoolKind pool_kind_from_environment() {
  const char* value = std::getenv("NERVE_CUDA_POOL");
  if (value != nullptr && std::string_view(value) == "stream_ordered") return PoolKind::stream_ordered;
  return PoolKind::arena;
}

StreamOrderedPool::StreamOrderedPool(Driver& driver, int device,
                                     std::unique_ptr<memory::NodeAllocator> describe, std::size_t limit_bytes)
    : driver_(driver), device_(device), describe_(std::move(describe)), limit_(limit_bytes) {
  int least = 0, greatest = 0;
  driver_.priority_range(device_, least, greatest);
  stream_ = driver_.create_stream(device_, least);
}

StreamOrderedPool::~StreamOrderedPool() { driver_.destroy_stream(device_, stream_); }

void* StreamOrderedPool::allocate(std::size_t bytes) {
  std::lock_guard lock(mutex_);
  if (limit_ != 0 && in_use_ + bytes > limit_) {
    throw Error(ErrorCode::out_of_memory, fmt::format("{}: {} bytes asked, {} of the limit {} in use",
                                                      describe_->describe(), bytes, in_use_, limit_));
  }
  void* pointer = driver_.malloc_async(device_, std::max<std::size_t>(bytes, 1), stream_);
  // Synchronised here so that work on any other stream may use it (allocations are per replica,
  // not per task: the wait is rare).
  try {
    driver_.synchronize_stream(stream_);
  } catch (...) {
    driver_.free_async(device_, pointer, stream_);  // nobody else has it: no leak
    throw;
  }
  in_use_ += bytes;
  ++allocations_;
  return pointer;
}

void StreamOrderedPool::deallocate(void* pointer, std::size_t bytes) noexcept {
  if (pointer == nullptr) return;
  std::lock_guard lock(mutex_);
  // The runtime frees a replica only after every copy and task using it completed on the host's
  // side, so freeing in this stream's order is safe.
  driver_.free_async(device_, pointer, stream_);
  in_use_ -= bytes;
}

MemoryPoolStats StreamOrderedPool::stats() const {
  std::lock_guard lock(mutex_);
  MemoryPoolStats s;
  s.node = describe_->describe();
  s.limit_bytes = limit_;
  s.bytes_reserved = in_use_;
  s.bytes_in_use = in_use_;
  s.allocations = allocations_;
  s.from_node = allocations_;
  return s;
}

}  // namespace nerve::detail::cuda
