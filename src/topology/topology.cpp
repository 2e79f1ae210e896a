// Topology's queries; the object is built by Topology::Builder (topology_builder.cpp) from hwloc
// (hwloc_discovery.cpp).
#include "nerve/topology.hpp"

#include <algorithm>
#include <cstddef>

#include <fmt/format.h>

#include "nerve/error.hpp"

namespace nerve {
namespace {

void check_index(int index, std::size_t size, const char* what) {
  if (index < 0 || static_cast<std::size_t>(index) >= size) {
    throw Error(ErrorCode::invalid_argument, fmt::format("{} index {} is out of range (0..{})", what, index,
                                                         static_cast<long long>(size) - 1));
  }
}

}  // namespace

int Topology::pu_count() const {
  std::size_t count = 0;
  for (const Core& core : cores_) count += core.pu_os_indices.size();
  return static_cast<int>(count);
}

int Topology::distance(int core_a, int core_b) const {
  check_index(core_a, cores_.size(), "core");
  check_index(core_b, cores_.size(), "core");
  return distances_[static_cast<std::size_t>(core_a) * cores_.size() + static_cast<std::size_t>(core_b)];
}

std::vector<int> Topology::cores_by_distance(int core) const {
  check_index(core, cores_.size(), "core");
  std::vector<int> others;
  others.reserve(cores_.size() - 1);
  for (const Core& other : cores_) {
    if (other.index != core) others.push_back(other.index);
  }
  // Stable sort keeps the index order among equally distant cores.
  std::stable_sort(others.begin(), others.end(),
                   [&](int a, int b) { return distance(core, a) < distance(core, b); });
  return others;
}

int Topology::numa_distance(int node_a, int node_b) const {
  check_index(node_a, numa_nodes_.size(), "NUMA node");
  check_index(node_b, numa_nodes_.size(), "NUMA node");
  return numa_distances_[static_cast<std::size_t>(node_a) * numa_nodes_.size() +
                         static_cast<std::size_t>(node_b)];
}

}  // namespace nerve
