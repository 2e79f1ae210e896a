// parker.hpp — one thread's sleep/wake permit, built on a futex.
//
// park() returns once a permit is available (consuming it) or the timeout passes; unpark() makes a
// permit available and wakes the parked thread. A permit given before park() is not lost, so the
// usual "check condition, then park" pattern cannot miss a wake-up as long as the waker changes the
// condition before calling unpark(). Any thread may call unpark(); only the owner calls park().
// Memory ordering: everything before unpark() happens-before the return of the park() it ends.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

#include "util/futex.hpp"

namespace nerve {

class Parker {
 public:
  // Returns false on timeout.
  bool park(std::chrono::nanoseconds timeout = std::chrono::nanoseconds::max()) noexcept {
    if (permit_.exchange(0, std::memory_order_acquire) == 1) return true;
    futex_wait(permit_, 0, timeout);
    return permit_.exchange(0, std::memory_order_acquire) == 1;
  }

  void unpark() noexcept {
    if (permit_.exchange(1, std::memory_order_release) == 0) futex_wake(permit_, 1);
  }

 private:
  std::atomic<std::uint32_t> permit_{0};
};

}  // namespace nerve
