// hwloc_reader.hpp — the hwloc side of Topology::discover(): load a topology, read it into a Builder.
//
// Not thread safe on a shared hwloc_topology_t; each discovery owns its own.
#pragma once

#include <string>
#include <vector>

#include "nerve/config.hpp"

#include "topology/hwloc_handle.hpp"
#include "topology/topology_builder.hpp"

namespace nerve::topology {

struct LoadedTopology {
  HwlocTopology handle;
  bool synthetic = false;   // not this machine: a synthetic description or an XML export
  std::string description;  // "real machine", the synthetic text or the XML path
};

// load_hwloc_topology() loads the machine selected by `source`: the synthetic description, the XML
// file, or (both empty) the real machine. Throws ConfigError naming topology.synthetic or
// topology.xml when that source is invalid (or both are set), Error(internal) when hwloc fails on the
// real machine.
LoadedTopology load_hwloc_topology(const Config::TopologySource& source);

// read_hwloc_objects() fills packages, NUMA nodes, cores and caches of `builder` from `topology`.
// Cores are hwloc Core objects, or PUs when hwloc reports no cores.
void read_hwloc_objects(hwloc_topology_t topology, Topology::Builder& builder);

// read_numa_distances() returns hwloc's NUMA distance matrix as numa × numa relative latencies
// (10 = local), preferring a latency matrix and deriving one from a bandwidth matrix otherwise;
// empty when hwloc has neither.
std::vector<int> read_numa_distances(hwloc_topology_t topology);

}  // namespace nerve::topology
