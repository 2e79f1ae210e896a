#include "backend/cuda/allocators.hpp"

#include <fmt/format.h>

#include "nerve/error.hpp"

namespace nerve::detail::cuda {

void* CudaBlockAllocator::allocate_block(std::size_t bytes, std::size_t /*alignment*/) {
  void* block = nullptr;
  switch (kind_) {
    case BlockKind::device: block = driver_.malloc_device(device_, bytes); break;
    case BlockKind::managed: {
      std::size_t free = 0, total = 0;
      driver_.memory_info(device_, free, total);
      if (bytes > free) {
        throw Error(ErrorCode::out_of_memory,
                    fmt::format("{}: a managed block of {} bytes asked, only {} bytes free on the device "
                                "(nerve never oversubscribes managed memory)",
                                name_, bytes, free));
      }
      block = driver_.malloc_managed(device_, bytes);
      break;
    }
    case BlockKind::pinned: {
      // In this device's context (not one the calling thread's current device would create), and the
      // thread's own current device is given back.
      const DeviceScope scope(driver_, device_);
      block = driver_.host_alloc(bytes);
      break;
    }
  }
  blocks_.fetch_add(1, std::memory_order_relaxed);
  bytes_.fetch_add(bytes, std::memory_order_relaxed);
  return block;
}

void CudaBlockAllocator::free_block(void* block, std::size_t bytes) noexcept {
  switch (kind_) {
    case BlockKind::device: driver_.free_device(device_, block); break;
    case BlockKind::managed: driver_.free_managed(device_, block); break;
    case BlockKind::pinned: {
      const QuietDeviceScope scope(driver_, device_);  // as it was allocated: no other device's context
      driver_.host_free(block);
      break;
    }
  }
  blocks_.fetch_sub(1, std::memory_order_relaxed);
  bytes_.fetch_sub(bytes, std::memory_order_relaxed);
}

memory::NodeAllocatorStats CudaBlockAllocator::stats() const {
  memory::NodeAllocatorStats s;
  s.blocks = blocks_.load(std::memory_order_relaxed);
  s.bytes = bytes_.load(std::memory_order_relaxed);
  s.locked_bytes = kind_ == BlockKind::pinned ? s.bytes : 0;
  return s;
}

}  // namespace nerve::detail::cuda
