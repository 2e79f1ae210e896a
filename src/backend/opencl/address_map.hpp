// address_map.hpp — device addresses for OpenCL memory objects.
//
// The coherence engine works with std::byte* replica addresses plus byte offsets, but OpenCL 1.2
// memory is a cl_mem handle with no address. Each allocation therefore gets a range of fake
// addresses of its own — from a process-wide counter starting at 2^44, each reserving its size
// rounded up to 4 KiB plus a 4 KiB gap, never reused — and this map translates any address inside
// a range back to (cl_mem, offset). Addresses are never dereferenced; one that is not inside a live
// allocation (a stale pointer, one from another node) is reported, not guessed.
//
// Thread safety: all members may be called from any thread (a shared mutex: lookups in parallel).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <shared_mutex>

#include "backend/opencl/cl.hpp"

namespace nerve::detail::opencl {

class AddressMap {
 public:
  struct Location {
    cl_mem mem;
    std::size_t offset;  // of the address within the allocation
    std::size_t size;    // of the whole allocation
  };

  // insert(): a fresh address range for `mem` of `bytes` bytes; returns its first address.
  std::byte* insert(cl_mem mem, std::size_t bytes);
  // erase(): forgets the range starting at `address`; returns its cl_mem (nullptr if none).
  cl_mem erase(const std::byte* address);
  // find(): the allocation holding `address` (one past its end included, for empty accesses).
  std::optional<Location> find(const std::byte* address) const;
  std::size_t size() const;

  static constexpr std::uintptr_t first_address = std::uintptr_t{1} << 44;

 private:
  struct Entry {
    cl_mem mem;
    std::size_t size;
  };
  mutable std::shared_mutex mutex_;
  std::map<std::uintptr_t, Entry> entries_;
};

}  // namespace nerve::detail::opencl
