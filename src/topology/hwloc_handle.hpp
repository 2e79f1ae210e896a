// hwloc_handle.hpp — RAII ownership of hwloc topologies, bitmaps and distance matrices.
//
// hwloc is a C library whose objects must be freed by matching calls; these wrappers make every exit
// path (including exceptions thrown while reading a topology) release them.
#pragma once

#include <memory>

#include <hwloc.h>

namespace nerve::topology {

struct HwlocTopologyDeleter {
  void operator()(hwloc_topology_t topology) const noexcept { hwloc_topology_destroy(topology); }
};
using HwlocTopology = std::unique_ptr<hwloc_topology, HwlocTopologyDeleter>;

struct HwlocBitmapDeleter {
  void operator()(hwloc_bitmap_t bitmap) const noexcept { hwloc_bitmap_free(bitmap); }
};
using HwlocBitmap = std::unique_ptr<hwloc_bitmap_s, HwlocBitmapDeleter>;

// make_hwloc_topology() initialises an empty (not yet loaded) topology; throws Error(internal) when
// hwloc cannot allocate one.
HwlocTopology make_hwloc_topology();

// HwlocDistances owns one distance matrix obtained from hwloc_distances_get*(); the matrix belongs to
// `topology`, which must outlive it.
class HwlocDistances {
 public:
  HwlocDistances(hwloc_topology_t topology, hwloc_distances_s* distances) noexcept
      : topology_(topology), distances_(distances) {}
  HwlocDistances(const HwlocDistances&) = delete;
  HwlocDistances& operator=(const HwlocDistances&) = delete;
  ~HwlocDistances() {
    if (distances_ != nullptr) hwloc_distances_release(topology_, distances_);
  }

  const hwloc_distances_s* get() const noexcept { return distances_; }
  explicit operator bool() const noexcept { return distances_ != nullptr; }

 private:
  hwloc_topology_t topology_;
  hwloc_distances_s* distances_;
};

}  // namespace nerve::topology
