#include "util/fork_generation.hpp"

#include <atomic>

#include <pthread.h>

namespace nerve::detail {
namespace {

// A fact of the process, not of any context: the child handler has nowhere else to write.
std::atomic<std::uint64_t> forks_below{0};

void count_fork_in_child() noexcept { forks_below.fetch_add(1, std::memory_order_relaxed); }

}  // namespace

std::uint64_t fork_generation() noexcept {
  [[maybe_unused]] static const bool registered = pthread_atfork(nullptr, nullptr, count_fork_in_child) == 0;
  return forks_below.load(std::memory_order_relaxed);
}

}  // namespace nerve::detail
