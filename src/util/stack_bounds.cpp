#include "util/stack_bounds.hpp"

#include <pthread.h>

namespace nerve::detail {

StackBounds current_stack_bounds() noexcept {
  pthread_attr_t attributes;
  if (pthread_getattr_np(pthread_self(), &attributes) != 0) return {};
  void* address = nullptr;
  std::size_t size = 0;
  const bool found = pthread_attr_getstack(&attributes, &address, &size) == 0;
  pthread_attr_destroy(&attributes);
  if (!found || address == nullptr || size == 0) return {};
  const auto low = reinterpret_cast<std::uintptr_t>(address);
  return {low, low + size};
}

}  // namespace nerve::detail
