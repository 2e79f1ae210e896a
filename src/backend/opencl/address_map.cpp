#include "backend/opencl/address_map.hpp"

#include <atomic>
#include <mutex>

namespace nerve::detail::opencl {
namespace {

constexpr std::uintptr_t reservation_page = 4096;

// Process-wide, so that an address names one allocation of one device for the process's life.
std::atomic<std::uintptr_t> next_address{AddressMap::first_address};

}  // namespace

std::byte* AddressMap::insert(cl_mem mem, std::size_t bytes) {
  const std::uintptr_t reserved =
      (bytes + reservation_page - 1) / reservation_page * reservation_page + reservation_page;
  const std::uintptr_t base = next_address.fetch_add(reserved, std::memory_order_relaxed);
  std::unique_lock lock(mutex_);
  entries_.emplace(base, Entry{mem, bytes});
  return reinterpret_cast<std::byte*>(base);
}

cl_mem AddressMap::erase(const std::byte* address) {
  std::unique_lock lock(mutex_);
  const auto it = entries_.find(reinterpret_cast<std::uintptr_t>(address));
  if (it == entries_.end()) return nullptr;
  const cl_mem mem = it->second.mem;
  entries_.erase(it);
  return mem;
}

std::optional<AddressMap::Location> AddressMap::find(const std::byte* address) const {
  const auto value = reinterpret_cast<std::uintptr_t>(address);
  std::shared_lock lock(mutex_);
  auto it = entries_.upper_bound(value);
  if (it == entries_.begin()) return std::nullopt;
  --it;
  const std::size_t offset = value - it->first;
  if (offset > it->second.size) return std::nullopt;
  return Location{it->second.mem, offset, it->second.size};
}

std::size_t AddressMap::size() const {
  std::shared_lock lock(mutex_);
  return entries_.size();
}

}  // namespace nerve::detail::opencl
