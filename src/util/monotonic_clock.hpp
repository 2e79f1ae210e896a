// monotonic_clock.hpp — monotonic_ns(): steady-clock nanoseconds, the time base of perf records.
#pragma once

#include <chrono>
#include <cstdint>

namespace nerve::detail {

inline std::int64_t monotonic_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace nerve::detail
