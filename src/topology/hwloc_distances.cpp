// read_numa_distances(): hwloc's NUMA distance matrix, normalised to relative latencies (10 = local).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include <hwloc.h>

#include "topology/core_distances.hpp"
#include "topology/hwloc_reader.hpp"

namespace nerve::topology {
namespace {

HwlocDistances first_matrix(hwloc_topology_t topology, unsigned long kind) {
  unsigned count = 1;
  hwloc_distances_s* distances = nullptr;
  if (hwloc_distances_get_by_type(topology, HWLOC_OBJ_NUMANODE, &count, &distances, kind, 0) != 0 ||
      count == 0) {
    return HwlocDistances(topology, nullptr);
  }
  return HwlocDistances(topology, distances);
}

// reference_value() is the value that means "local": the smallest (latency) or largest (bandwidth)
// positive diagonal entry, or of all entries when the diagonal is unset. 0 when the matrix is empty.
std::uint64_t reference_value(const hwloc_distances_s& matrix, bool latency) {
  std::uint64_t best = 0;
  const auto consider = [&](std::uint64_t value) {
    if (value != 0 && (best == 0 || (latency ? value < best : value > best))) best = value;
  };
  for (unsigned i = 0; i < matrix.nbobjs; ++i) consider(matrix.values[i * matrix.nbobjs + i]);
  if (best == 0) {
    for (unsigned i = 0; i < matrix.nbobjs * matrix.nbobjs; ++i) consider(matrix.values[i]);
  }
  return best;
}

// relative() converts one entry: latency / local latency, or local bandwidth / bandwidth (lower
// bandwidth means farther), in tenths. 0 when the entry carries no information. hwloc's values are
// 64-bit: a ratio past max_numa_distance saturates there rather than wrapping round to "near".
int relative(std::uint64_t value, std::uint64_t reference, bool latency) {
  if (value == 0) return 0;
  const double ratio = latency ? static_cast<double>(value) / static_cast<double>(reference)
                               : static_cast<double>(reference) / static_cast<double>(value);
  const double tenths = std::min(10.0 * ratio, static_cast<double>(core_distance::max_numa_distance));
  return std::max(1, static_cast<int>(std::lround(tenths)));
}

// Entries the matrix does not cover (nodes missing from it, zero values) keep the 10/20 defaults.
std::vector<int> normalise(const hwloc_distances_s& matrix, int numa_count, bool latency) {
  std::vector<int> result = default_numa_distances(numa_count);
  const std::uint64_t reference = reference_value(matrix, latency);
  if (reference == 0) return result;
  for (unsigned i = 0; i < matrix.nbobjs; ++i) {
    for (unsigned j = 0; j < matrix.nbobjs; ++j) {
      const hwloc_obj_t from = matrix.objs[i];
      const hwloc_obj_t to = matrix.objs[j];
      if (from == nullptr || to == nullptr) continue;
      const int value = relative(matrix.values[i * matrix.nbobjs + j], reference, latency);
      if (value == 0) continue;
      result[static_cast<std::size_t>(from->logical_index) * numa_count + to->logical_index] = value;
    }
  }
  return result;
}

}  // namespace

std::vector<int> read_numa_distances(hwloc_topology_t topology) {
  const int numa_count = hwloc_get_nbobjs_by_type(topology, HWLOC_OBJ_NUMANODE);
  if (numa_count <= 0) return {};
  if (const HwlocDistances latency = first_matrix(topology, HWLOC_DISTANCES_KIND_MEANS_LATENCY)) {
    return normalise(*latency.get(), numa_count, true);
  }
  if (const HwlocDistances bandwidth = first_matrix(topology, HWLOC_DISTANCES_KIND_MEANS_BANDWIDTH)) {
    return normalise(*bandwidth.get(), numa_count, false);
  }
  return {};
}

}  // namespace nerve::topology
