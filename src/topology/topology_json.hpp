// topology_json.hpp — the Topology as JSON, for `nerve-info --json` and reports.
//
// Kept internal because nlohmann::json is a private dependency of the library.
#pragma once

#include <nlohmann/json.hpp>

#include "nerve/topology.hpp"

namespace nerve::topology {

// topology_to_json() gives
//   {"description", "synthetic", "pu_count",
//    "packages":   [{"index", "numa_nodes": [...], "cores": [...]}],
//    "numa_nodes": [{"index", "os_index", "package", "memory_bytes", "cores": [...]}],
//    "cores":      [{"index", "package", "numa_node", "pu_os_indices": [...]}],
//    "caches":     [{"level", "size_bytes", "cores": [...]}],
//    "core_distances": [[...], ...]   (cores × cores, see core_distance)
//    "numa_distances": [[...], ...]}  (numa × numa, 10 = local)
nlohmann::json topology_to_json(const Topology& topology);

}  // namespace nerve::topology
