// topology.hpp — the machine as nerve sees it: packages, NUMA nodes, cores, hardware threads, caches,
// and a distance between any two cores.
//
// A Topology is an immutable value discovered once per context from hwloc: from the real machine, or
// from an hwloc synthetic description ("pack:2 numa:2 core:4 pu:1") or XML export selected by the
// configuration (topology.synthetic / topology.xml), so that topology-aware logic can be exercised on
// machines we do not have. All indices are logical (0..n-1 in topology order); os_index fields carry
// the operating system's numbering where one exists.
//
// Every topology has at least one package, one NUMA node and one core: a machine that hwloc describes
// without packages or NUMA nodes gets a single one holding every core.
//
// Thread safety: a Topology is immutable once discover() returns; any number of threads may call its
// const members concurrently.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nerve/export.hpp"

namespace nerve {

struct Config;

struct NumaNode {
  int index = 0;
  int os_index = 0;
  int package = 0;  // its first core's; a node spanning packages is in each one's Package::numa_nodes
  std::uint64_t memory_bytes = 0;
  std::vector<int> cores;  // logical core indices attached to this node
};

struct Package {
  int index = 0;
  std::vector<int> numa_nodes;
  std::vector<int> cores;
};

struct Core {
  int index = 0;
  int package = 0;
  int numa_node = 0;
  std::vector<int> pu_os_indices;  // hardware threads (OS numbering, as used for binding)
};

struct Cache {
  int level = 0;  // 1, 2, 3, ...
  std::uint64_t size_bytes = 0;
  std::vector<int> cores;  // the cores sharing this cache
};

// Distances between two cores, smaller is closer. Only the order is a contract:
// same core < shared L2 < shared L3 < same NUMA node < other NUMA node on the same package
// < other package; across NUMA nodes hwloc's NUMA distance matrix refines the value when present.
// Sharing a cache ranks before NUMA membership: two cores under one L3 are "shared_l3" even when the
// L3 spans two NUMA nodes (sub-NUMA clustering).
namespace core_distance {
inline constexpr int same_core = 0;
inline constexpr int shared_l2 = 10;  // any shared cache of level 1 or 2
inline constexpr int shared_l3 = 20;  // a shared cache of level 3 or more
inline constexpr int same_numa = 30;
// Cores on different NUMA nodes: other_numa * numa_distance / 10 (200 for the default remote 20),
// never below other_numa.
inline constexpr int other_numa = 100;
// The largest numa_distance(): a matrix entry farther than 10^7 times local memory reads as this.
inline constexpr int max_numa_distance = 100'000'000;
// Added on top of the NUMA part for cores on different packages, so that without a distance matrix
// another package is always farther than another NUMA node of the same package. Cores of one NUMA
// node on different packages (a node spanning packages, as with node interleaving) count as
// other_numa + this: 200.
inline constexpr int other_package_penalty = 100;
}  // namespace core_distance

class NERVE_API Topology {
 public:
  // discover() reads the machine described by config.topology (real machine by default).
  // Throws ConfigError when the synthetic description or XML file is invalid, or the description has
  // more than 8192 PUs (the most Linux supports). An XML file is checked before hwloc reads it, since
  // hwloc crashes on some malformed ones (docs/CONFIG.md, topology.xml).
  static Topology discover(const Config& config);

  const std::vector<Package>& packages() const { return packages_; }
  const std::vector<NumaNode>& numa_nodes() const { return numa_nodes_; }
  const std::vector<Core>& cores() const { return cores_; }
  const std::vector<Cache>& caches() const { return caches_; }
  int pu_count() const;

  // distance() between two logical cores (see core_distance); symmetric, 0 on the diagonal.
  // Throws Error(invalid_argument) for an index out of range (as do the two functions below).
  int distance(int core_a, int core_b) const;
  // cores_by_distance() lists every other core ordered by distance from `core` (ties by index).
  std::vector<int> cores_by_distance(int core) const;
  // numa_distance() is hwloc's relative NUMA latency (10 = local) or 10/20 when hwloc has no matrix,
  // at most core_distance::max_numa_distance. hwloc's matrix may be asymmetric; core distances use
  // the larger of the two directions.
  int numa_distance(int node_a, int node_b) const;

  // synthetic() is true for synthetic and XML topologies: threads are then never bound to their
  // (non-existent) PUs, but placement and distance logic work as on a real machine.
  bool synthetic() const { return synthetic_; }
  // description(): "real machine", the synthetic text, or XML path
  const std::string& description() const { return description_; }

  // tree() renders the machine as an indented text tree (nerve-info).
  std::string tree() const;

  // Internal: filled by the hwloc discovery in src/topology.
  struct Builder;

 private:
  std::vector<Package> packages_;
  std::vector<NumaNode> numa_nodes_;
  std::vector<Core> cores_;
  std::vector<Cache> caches_;
  std::vector<int> distances_;       // cores × cores
  std::vector<int> numa_distances_;  // numa × numa
  bool synthetic_ = false;
  std::string description_;
};

}  // namespace nerve
