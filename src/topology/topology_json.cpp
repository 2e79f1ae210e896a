#include "topology/topology_json.hpp"

namespace nerve::topology {
namespace {

nlohmann::json packages_json(const Topology& topology) {
  nlohmann::json packages = nlohmann::json::array();
  for (const Package& package : topology.packages()) {
    packages.push_back(
        {{"index", package.index}, {"numa_nodes", package.numa_nodes}, {"cores", package.cores}});
  }
  return packages;
}

nlohmann::json numa_nodes_json(const Topology& topology) {
  nlohmann::json nodes = nlohmann::json::array();
  for (const NumaNode& node : topology.numa_nodes()) {
    nodes.push_back({{"index", node.index},
                     {"os_index", node.os_index},
                     {"package", node.package},
                     {"memory_bytes", node.memory_bytes},
                     {"cores", node.cores}});
  }
  return nodes;
}

nlohmann::json cores_json(const Topology& topology) {
  nlohmann::json cores = nlohmann::json::array();
  for (const Core& core : topology.cores()) {
    cores.push_back({{"index", core.index},
                     {"package", core.package},
                     {"numa_node", core.numa_node},
                     {"pu_os_indices", core.pu_os_indices}});
  }
  return cores;
}

nlohmann::json caches_json(const Topology& topology) {
  nlohmann::json caches = nlohmann::json::array();
  for (const Cache& cache : topology.caches()) {
    caches.push_back({{"level", cache.level}, {"size_bytes", cache.size_bytes}, {"cores", cache.cores}});
  }
  return caches;
}

template <class Distance>
nlohmann::json matrix_json(int size, Distance distance) {
  nlohmann::json matrix = nlohmann::json::array();
  for (int row = 0; row < size; ++row) {
    nlohmann::json values = nlohmann::json::array();
    for (int column = 0; column < size; ++column) values.push_back(distance(row, column));
    matrix.push_back(std::move(values));
  }
  return matrix;
}

}  // namespace

nlohmann::json topology_to_json(const Topology& topology) {
  const int cores = static_cast<int>(topology.cores().size());
  const int nodes = static_cast<int>(topology.numa_nodes().size());
  return {
      {"description", topology.description()},
      {"synthetic", topology.synthetic()},
      {"pu_count", topology.pu_count()},
      {"packages", packages_json(topology)},
      {"numa_nodes", numa_nodes_json(topology)},
      {"cores", cores_json(topology)},
      {"caches", caches_json(topology)},
      {"core_distances", matrix_json(cores, [&](int a, int b) { return topology.distance(a, b); })},
      {"numa_distances", matrix_json(nodes, [&](int a, int b) { return topology.numa_distance(a, b); })},
  };
}

}  // namespace nerve::topology
