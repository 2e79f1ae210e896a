#include "memory/memory_node.hpp"

#include <cstring>

namespace nerve::detail {

std::byte* MemoryNode::try_allocate(std::size_t bytes) {
  std::size_t used = used_.load(std::memory_order_relaxed);
  do {
    if (bytes > limit_ - used) return nullptr;
  } while (!used_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
  std::byte* data = nullptr;
  try {
    data = allocate_storage(bytes);
  } catch (...) {
    used_.fetch_sub(bytes, std::memory_order_relaxed);
    throw;
  }
  if (data == nullptr) used_.fetch_sub(bytes, std::memory_order_relaxed);
  return data;
}

void MemoryNode::deallocate(std::byte* data, std::size_t bytes) noexcept {
  if (data == nullptr) return;
  free_storage(data, bytes);
  used_.fetch_sub(bytes, std::memory_order_relaxed);
}

void MemoryNode::copy(MemoryNode& from, const std::byte* source, MemoryNode& to, std::byte* destination,
                      std::size_t bytes, CopyCompletion& completion) {
  // The device side drives the copy: its engine knows how to reach host memory (and peers).
  MemoryNode& engine = to.is_host() ? from : to;
  engine.start_copy(from, source, to, destination, bytes, completion);
}

void MemoryNode::copy_sync(MemoryNode& /*from*/, const std::byte* source, MemoryNode& /*to*/,
                           std::byte* destination, std::size_t bytes) {
  std::memcpy(destination, source, bytes);
}

}  // namespace nerve::detail
