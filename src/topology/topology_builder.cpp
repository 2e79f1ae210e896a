#include "topology/topology_builder.hpp"

#include <algorithm>
#include <cstddef>
#include <set>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "nerve/error.hpp"

#include "topology/core_distances.hpp"

namespace nerve {
namespace {

void require(bool condition, const std::string& what) {
  if (!condition) throw Error(ErrorCode::internal, "inconsistent topology description: " + what);
}

bool in_range(int index, std::size_t size) { return index >= 0 && static_cast<std::size_t>(index) < size; }

// add_missing_levels() gives machines without packages or NUMA nodes (hwloc reports neither on some
// virtual machines and synthetic descriptions) a single one holding every core.
void add_missing_levels(Topology::Builder& builder) {
  if (builder.packages.empty()) {
    builder.packages.emplace_back();
    for (Core& core : builder.cores) core.package = 0;
  }
  if (builder.numa_nodes.empty()) {
    builder.numa_nodes.emplace_back();
    for (Core& core : builder.cores) core.numa_node = 0;
  }
}

void check_references(const Topology::Builder& builder) {
  require(!builder.cores.empty(), "no cores (neither Core nor PU objects)");
  for (const Core& core : builder.cores) {
    require(in_range(core.package, builder.packages.size()), fmt::format("core package {}", core.package));
    require(in_range(core.numa_node, builder.numa_nodes.size()),
            fmt::format("core NUMA node {}", core.numa_node));
  }
  for (const NumaNode& node : builder.numa_nodes) {
    require(node.package == -1 || in_range(node.package, builder.packages.size()),
            fmt::format("NUMA node package {}", node.package));
  }
  for (const Cache& cache : builder.caches) {
    for (int core : cache.cores)
      require(in_range(core, builder.cores.size()), fmt::format("cache core {}", core));
  }
}

// derive_membership() numbers every object and rebuilds the lists that follow from the cores.
void derive_membership(Topology::Builder& builder) {
  for (std::size_t i = 0; i < builder.packages.size(); ++i) {
    builder.packages[i] = Package{.index = static_cast<int>(i), .numa_nodes = {}, .cores = {}};
  }
  for (std::size_t i = 0; i < builder.numa_nodes.size(); ++i) {
    builder.numa_nodes[i].index = static_cast<int>(i);
    builder.numa_nodes[i].cores.clear();
  }
  std::vector<std::set<int>> nodes_of_package(builder.packages.size());
  for (std::size_t i = 0; i < builder.cores.size(); ++i) {
    Core& core = builder.cores[i];
    core.index = static_cast<int>(i);
    builder.packages[core.package].cores.push_back(core.index);
    builder.numa_nodes[core.numa_node].cores.push_back(core.index);
    nodes_of_package[core.package].insert(core.numa_node);
  }
  for (NumaNode& node : builder.numa_nodes) {
    // A node without a package ancestor (it spans packages) belongs to the package of its first core.
    if (node.package == -1) node.package = node.cores.empty() ? 0 : builder.cores[node.cores.front()].package;
    nodes_of_package[node.package].insert(node.index);
  }
  for (Package& package : builder.packages) {
    package.numa_nodes.assign(nodes_of_package[package.index].begin(), nodes_of_package[package.index].end());
  }
}

}  // namespace

Topology Topology::Builder::finish() && {
  add_missing_levels(*this);
  check_references(*this);
  derive_membership(*this);
  const int numa_count = static_cast<int>(numa_nodes.size());
  if (numa_distances.size() != static_cast<std::size_t>(numa_count) * numa_count) {
    numa_distances = topology::default_numa_distances(numa_count);
  }
  for (Cache& cache : caches) std::sort(cache.cores.begin(), cache.cores.end());

  Topology result;
  result.distances_ = topology::compute_core_distances(cores, caches, numa_distances, numa_count);
  result.packages_ = std::move(packages);
  result.numa_nodes_ = std::move(numa_nodes);
  result.cores_ = std::move(cores);
  result.caches_ = std::move(caches);
  result.numa_distances_ = std::move(numa_distances);
  result.synthetic_ = synthetic;
  result.description_ = std::move(description);
  return result;
}

}  // namespace nerve
