#include "memory/host_pinning.hpp"

#include "util/log.hpp"

namespace nerve::detail {

HostPinning::~HostPinning() {
  // Registrars forget() before they go (devices close before the host node): an entry still
  // registered here has no registrar left to call.
  std::lock_guard lock(mutex_);
  for (const auto& [data, allocation] : allocations_) {
    if (allocation.registrar != nullptr)
      log::error("host pinning: {} bytes at {} still registered with a device that is gone", allocation.bytes,
                 static_cast<const void*>(data));
  }
}

void HostPinning::track(std::byte* data, std::size_t bytes) {
  if (bytes < min_bytes || data == nullptr) return;
  std::lock_guard lock(mutex_);
  allocations_[data] = Allocation{.bytes = bytes};
  tracked_.store(allocations_.size(), std::memory_order_relaxed);
}

void HostPinning::untrack(std::byte* data, std::size_t bytes) noexcept {
  if (bytes < min_bytes || data == nullptr) return;
  Allocation gone;
  {
    std::lock_guard lock(mutex_);
    const auto found = allocations_.find(data);
    if (found == allocations_.end()) return;
    gone = found->second;
    allocations_.erase(found);
    tracked_.store(allocations_.size(), std::memory_order_relaxed);
  }
  // Outside the lock: the driver may take its time (and no copy of this memory can be in flight: the
  // buffer is being freed, and a copy holds a reference to it).
  if (gone.registrar != nullptr) gone.registrar->unregister_host(data);
}

bool HostPinning::pinned_for_dma(const std::byte* data, std::size_t bytes, DmaRegistrar& registrar) {
  if (tracked_.load(std::memory_order_relaxed) == 0) return false;  // no large buffer at all
  std::byte* start = nullptr;
  std::size_t size = 0;
  {
    std::lock_guard lock(mutex_);
    // The allocation starting at or below `data` (the map is ordered highest first).
    const auto found = allocations_.lower_bound(const_cast<std::byte*>(data));
    if (found == allocations_.end()) return false;
    Allocation& allocation = found->second;
    if (data + bytes > found->first + allocation.bytes) return false;  // not inside one tracked allocation
    if (allocation.registrar != nullptr) return allocation.registrar->dma_domain() == registrar.dma_domain();
    // Refused before, or another copy is registering it right now (this one is staged meanwhile).
    if (allocation.refused || allocation.registering) return false;
    allocation.registering = true;
    start = found->first;
    size = allocation.bytes;
  }
  // The registration runs without the lock (a GiB takes tens of milliseconds): other copies, and
  // the frees that completion threads do, do not wait for it.
  const bool registered = registrar.register_host(start, size);
  std::lock_guard lock(mutex_);
  const auto found = allocations_.find(start);  // still there: a copy holds the buffer
  if (found == allocations_.end()) {
    if (registered) registrar.unregister_host(start);
    return false;
  }
  Allocation& allocation = found->second;
  allocation.registering = false;
  if (!registered) {
    allocation.refused = true;
    ++failures_;  // the registrar logged why
    return false;
  }
  allocation.registrar = &registrar;
  ++registrations_;
  return true;
}

void HostPinning::forget(const DmaRegistrar& registrar) noexcept {
  std::lock_guard lock(mutex_);
  for (auto& [data, allocation] : allocations_) {
    if (allocation.registrar != &registrar) continue;
    allocation.registrar->unregister_host(data);
    allocation.registrar = nullptr;
  }
}

HostPinningStats HostPinning::stats() const {
  std::lock_guard lock(mutex_);
  HostPinningStats stats{.registrations = registrations_, .failures = failures_};
  for (const auto& [data, allocation] : allocations_) {
    if (allocation.registrar == nullptr) continue;
    ++stats.pinned_allocations;
    stats.pinned_bytes += allocation.bytes;
  }
  return stats;
}

}  // namespace nerve::detail
