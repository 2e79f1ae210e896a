// waiter_registry.hpp — which parked threads wait for which object (task, group, context).
//
// A completing task must wake the threads waiting for it without touching the object it completed
// (a TaskGroup may be destroyed the moment its counter reaches zero), so waiters register the
// object's address with their Parker here, and the completer looks the address up. A stale match
// (a new object at a recycled address) only causes a spurious wake-up, which waiters tolerate.
// This is the slow path: it is used only when a waiter actually parks.
#pragma once

#include <mutex>
#include <vector>

#include "util/parker.hpp"

namespace nerve::detail {

class WaiterRegistry {
 public:
  void add(const void* target, Parker* parker) {
    std::lock_guard lock(mutex_);
    entries_.push_back({target, parker});
  }
  void remove(const void* target, Parker* parker) noexcept {
    std::lock_guard lock(mutex_);
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->target == target && it->parker == parker) {
        *it = entries_.back();
        entries_.pop_back();
        return;
      }
    }
  }
  void wake(const void* target) noexcept {
    std::lock_guard lock(mutex_);
    for (const Entry& entry : entries_) {
      if (entry.target == target) entry.parker->unpark();
    }
  }
  void wake_all() noexcept {
    std::lock_guard lock(mutex_);
    for (const Entry& entry : entries_) entry.parker->unpark();
  }

 private:
  struct Entry {
    const void* target;
    Parker* parker;
  };
  std::mutex mutex_;
  std::vector<Entry> entries_;
};

}  // namespace nerve::detail
