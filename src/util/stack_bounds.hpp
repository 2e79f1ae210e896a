// stack_bounds.hpp — where the calling thread's stack lies, so that waits nested inside tasks can
// stop with an error before they overflow it (ContextImpl::check_wait_depth).
#pragma once

#include <cstdint>

namespace nerve::detail {

struct StackBounds {
  std::uintptr_t low = 0;  // the lowest usable address (stacks grow down towards it)
  std::uintptr_t high = 0;
  // nearly_full(): fewer than `reserve` bytes left below `position`. One subtraction: a position
  // below the stack (a sanitizer's fake frame on the heap) wraps round to "plenty", and so does any
  // position when the bounds are unknown (low = 0).
  bool nearly_full(std::uintptr_t position, std::uintptr_t reserve) const noexcept {
    return position - low < reserve;
  }
};

// current_stack_bounds(): the calling thread's stack (pthread_getattr_np); unknown ({0, 0}) where
// the system does not say. For the main thread this reads /proc/self/maps: call it rarely.
StackBounds current_stack_bounds() noexcept;

inline std::uintptr_t stack_position() noexcept {
  return reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0));
}

}  // namespace nerve::detail
