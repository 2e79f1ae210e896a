// stack_bounds.hpp — where the calling thread's stack lies, so that waits nested inside tasks can
// stop with an error before they overflow it (ContextImpl::refuse_deep_nesting).
#pragma once

#include <cstdint>

namespace nerve::detail {

struct StackBounds {
  std::uintptr_t low = 0;  // the lowest usable address (stacks grow down towards it)
  std::uintptr_t high = 0;
  // The part of the stack kept back: at most `most_reserve`, and a quarter of a small stack (a thread
  // made with a 128 KiB stack must still run nested tasks). 0 when the bounds are unknown.
  std::uintptr_t reserve = 0;
  // nearly_full(): fewer than `reserve` bytes left below `position`. One subtraction: a position
  // below the stack (a sanitizer's fake frame on the heap) wraps round to "plenty", and with the
  // bounds unknown nothing is below 0 bytes.
  bool nearly_full(std::uintptr_t position) const noexcept { return position - low < reserve; }
};

// current_stack_bounds(): the calling thread's stack (pthread_getattr_np), with a reserve of at most
// `most_reserve`; unknown ({0, 0, 0}) where the system does not say, or for a main thread whose
// stack has no size limit (its end is not where glibc says). For the main thread this reads
// /proc/self/maps: call it rarely.
StackBounds current_stack_bounds(std::uintptr_t most_reserve) noexcept;

inline std::uintptr_t stack_position() noexcept {
  return reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0));
}

}  // namespace nerve::detail
