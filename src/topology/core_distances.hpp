// core_distances.hpp — the cores × cores distance matrix behind Topology::distance().
#pragma once

#include <vector>

#include "nerve/topology.hpp"

namespace nerve::topology {

// compute_core_distances() returns the row-major cores × cores matrix of core_distance values (see
// nerve/topology.hpp for the ordering contract). `numa_distances` is the complete numa × numa matrix
// (10 = local). The result is symmetric with a zero diagonal.
std::vector<int> compute_core_distances(const std::vector<Core>& cores, const std::vector<Cache>& caches,
                                        const std::vector<int>& numa_distances, int numa_count);

// default_numa_distances() is hwloc's convention without a matrix: 10 on the diagonal, 20 elsewhere.
std::vector<int> default_numa_distances(int numa_count);

}  // namespace nerve::topology
