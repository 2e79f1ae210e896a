// topology_builder.hpp — assembles an immutable nerve::Topology from discovered (or hand-made) parts.
//
// hwloc discovery fills a Builder with what it reads; tests may fill one by hand to describe machines
// that hwloc's synthetic syntax cannot express. finish() completes and checks the description.
#pragma once

#include <string>
#include <vector>

#include "nerve/topology.hpp"

namespace nerve {

struct Topology::Builder {
  std::vector<Package> packages;     // Package::index is set by finish(); numa_nodes/cores are derived
  std::vector<NumaNode> numa_nodes;  // package -1 = unknown; `cores` is derived by finish()
  std::vector<Core> cores;           // index is set by finish(); package and numa_node must be valid
  std::vector<Cache> caches;         // cores must be valid core indices
  // numa_distances is numa × numa, row-major, hwloc-style (10 = local); empty = 10 local / 20 remote.
  std::vector<int> numa_distances;
  bool synthetic = false;
  std::string description;

  // finish() adds a package and a NUMA node when there are none, derives the membership lists
  // (Package::numa_nodes/cores, NumaNode::cores), numbers everything 0..n-1, precomputes the core
  // distance matrix and returns the Topology. Throws Error(internal) for an inconsistent description
  // (no cores, an index out of range).
  Topology finish() &&;
};

}  // namespace nerve
