// spin_lock.hpp — a test-and-test-and-set lock for very short critical sections.
//
// Used where the protected work is a handful of instructions (a buffer's dependency state, a waiter
// list) and a futex-based mutex would cost more than the section itself. Spins with PAUSE, then
// yields, so a preempted holder does not burn the waiter's whole time slice.
// Memory ordering: lock() acquires, unlock() releases.
#pragma once

#include <atomic>
#include <thread>

#include "util/cpu.hpp"

namespace nerve {

class SpinLock {
 public:
  void lock() noexcept {
    for (int spins = 0;; ++spins) {
      if (!locked_.exchange(true, std::memory_order_acquire)) return;
      while (locked_.load(std::memory_order_relaxed)) {
        if (++spins < 64) {
          cpu_relax();
        } else {
          std::this_thread::yield();
        }
      }
    }
  }
  bool try_lock() noexcept {
    return !locked_.load(std::memory_order_relaxed) && !locked_.exchange(true, std::memory_order_acquire);
  }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

}  // namespace nerve
