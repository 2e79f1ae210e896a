#include "util/stack_bounds.hpp"

#include <algorithm>

#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace nerve::detail {

StackBounds current_stack_bounds(std::uintptr_t most_reserve) noexcept {
  // The main thread's stack grows on demand up to RLIMIT_STACK; without a limit glibc reports the
  // room up to the next mapping, which the kernel's guard gap keeps the stack from reaching.
  if (syscall(SYS_gettid) == getpid()) {
    rlimit limit{};
    if (getrlimit(RLIMIT_STACK, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return {};
  }
  pthread_attr_t attributes;
  if (pthread_getattr_np(pthread_self(), &attributes) != 0) return {};
  void* address = nullptr;
  std::size_t size = 0;
  const bool found = pthread_attr_getstack(&attributes, &address, &size) == 0;
  pthread_attr_destroy(&attributes);
  if (!found || address == nullptr || size == 0) return {};
  const auto low = reinterpret_cast<std::uintptr_t>(address);
  return {low, low + size, std::min<std::uintptr_t>(most_reserve, size / 4)};
}

}  // namespace nerve::detail
