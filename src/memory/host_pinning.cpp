#include "memory/host_pinning.hpp"

namespace nerve::detail {

HostPinning::~HostPinning() {
  // Registrars forget() before they go; anything still registered belongs to one that did not.
  std::lock_guard lock(mutex_);
  for (auto& [data, allocation] : allocations_) unregister_locked(data, allocation);
}

void HostPinning::track(std::byte* data, std::size_t bytes) {
  if (bytes < min_bytes || data == nullptr) return;
  std::lock_guard lock(mutex_);
  allocations_[data] = Allocation{.bytes = bytes};
}

void HostPinning::untrack(std::byte* data, std::size_t bytes) noexcept {
  if (bytes < min_bytes || data == nullptr) return;
  std::lock_guard lock(mutex_);
  const auto found = allocations_.find(data);
  if (found == allocations_.end()) return;
  unregister_locked(found->first, found->second);
  allocations_.erase(found);
}

bool HostPinning::pinned_for_dma(const std::byte* data, std::size_t bytes, DmaRegistrar& registrar) {
  std::lock_guard lock(mutex_);
  // The allocation starting at or below `data` (the map is ordered highest first).
  const auto found = allocations_.lower_bound(const_cast<std::byte*>(data));
  if (found == allocations_.end()) return false;
  std::byte* const start = found->first;
  Allocation& allocation = found->second;
  if (data + bytes > start + allocation.bytes) return false;  // not inside one tracked allocation
  if (allocation.registrar != nullptr) return allocation.registrar->dma_domain() == registrar.dma_domain();
  if (allocation.refused) return false;
  if (!registrar.register_host(start, allocation.bytes)) {
    allocation.refused = true;
    ++stats_.failures;  // the registrar logged why
    return false;
  }
  allocation.registrar = &registrar;
  ++stats_.registrations;
  ++stats_.pinned_allocations;
  stats_.pinned_bytes += allocation.bytes;
  return true;
}

void HostPinning::forget(const DmaRegistrar& registrar) noexcept {
  std::lock_guard lock(mutex_);
  for (auto& [data, allocation] : allocations_)
    if (allocation.registrar == &registrar) unregister_locked(data, allocation);
}

HostPinningStats HostPinning::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void HostPinning::unregister_locked(std::byte* data, Allocation& allocation) noexcept {
  if (allocation.registrar == nullptr) return;
  allocation.registrar->unregister_host(data);
  allocation.registrar = nullptr;
  --stats_.pinned_allocations;
  stats_.pinned_bytes -= allocation.bytes;
}

}  // namespace nerve::detail
