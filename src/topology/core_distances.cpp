#include "topology/core_distances.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>

namespace nerve::topology {
namespace {

// numa_part() is the distance between cores on two NUMA nodes: the NUMA latency relative to local
// memory, scaled so that the default remote latency (20) gives 2 × other_numa. hwloc matrices may be
// asymmetric; a distance must not be, so the larger direction wins.
int numa_part(const std::vector<int>& numa_distances, int numa_count, int node_a, int node_b) {
  const auto at = [&](int row, int column) {
    return numa_distances[static_cast<std::size_t>(row) * numa_count + column];
  };
  const int relative = std::max(at(node_a, node_b), at(node_b, node_a));
  // In 64 bits: up to max_numa_distance the result (and the package penalty on top) fits an int.
  static_assert(std::int64_t{core_distance::other_numa} * core_distance::max_numa_distance / 10 +
                    core_distance::other_package_penalty <=
                std::numeric_limits<int>::max());
  return static_cast<int>(std::max<std::int64_t>(core_distance::other_numa,
                                                 std::int64_t{core_distance::other_numa} * relative / 10));
}

// uncached_distance() ranks two distinct cores that share no cache.
int uncached_distance(const Core& a, const Core& b, const std::vector<int>& numa_distances, int numa_count) {
  if (a.package == b.package && a.numa_node == b.numa_node) return core_distance::same_numa;
  int distance = core_distance::other_numa;
  if (a.numa_node != b.numa_node) distance = numa_part(numa_distances, numa_count, a.numa_node, b.numa_node);
  if (a.package != b.package) distance += core_distance::other_package_penalty;
  return distance;
}

int cache_distance(int level) { return level <= 2 ? core_distance::shared_l2 : core_distance::shared_l3; }

}  // namespace

std::vector<int> default_numa_distances(int numa_count) {
  std::vector<int> matrix(static_cast<std::size_t>(numa_count) * numa_count, 20);
  for (int node = 0; node < numa_count; ++node)
    matrix[static_cast<std::size_t>(node) * numa_count + node] = 10;
  return matrix;
}

std::vector<int> compute_core_distances(const std::vector<Core>& cores, const std::vector<Cache>& caches,
                                        const std::vector<int>& numa_distances, int numa_count) {
  const std::size_t count = cores.size();
  std::vector<int> matrix(count * count);
  for (std::size_t a = 0; a < count; ++a) {
    for (std::size_t b = 0; b < count; ++b) {
      matrix[a * count + b] = a == b ? core_distance::same_core
                                     : uncached_distance(cores[a], cores[b], numa_distances, numa_count);
    }
  }
  // A shared cache only ever brings two cores closer; the smallest shared level decides.
  for (const Cache& cache : caches) {
    const int distance = cache_distance(cache.level);
    for (int a : cache.cores) {
      for (int b : cache.cores) {
        if (a == b) continue;
        int& entry = matrix[static_cast<std::size_t>(a) * count + static_cast<std::size_t>(b)];
        entry = std::min(entry, distance);
      }
    }
  }
  return matrix;
}

}  // namespace nerve::topology
