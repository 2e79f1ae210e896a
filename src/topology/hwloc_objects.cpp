// read_hwloc_objects(): packages, NUMA nodes, cores and caches from an hwloc topology.
#include <cstddef>
#include <iterator>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <hwloc.h>

#include "nerve/error.hpp"

#include "topology/hwloc_reader.hpp"

namespace nerve::topology {
namespace {

int count_of(hwloc_topology_t topology, hwloc_obj_type_t type) {
  const int count = hwloc_get_nbobjs_by_type(topology, type);
  return count < 0 ? 0 : count;
}

// package_of() is the logical index of the package above `object`, or `fallback` when there is none.
int package_of(hwloc_topology_t topology, hwloc_obj_t object, int fallback) {
  const hwloc_obj_t package = hwloc_get_ancestor_obj_by_type(topology, HWLOC_OBJ_PACKAGE, object);
  return package != nullptr ? static_cast<int>(package->logical_index) : fallback;
}

// numa_node_of() is the first NUMA node (in logical order) whose CPUs include some of `object`'s.
// Several nodes may qualify (DDR and high-bandwidth memory over the same cores); the first is the
// conventional "normal" memory.
int numa_node_of(hwloc_topology_t topology, hwloc_obj_t object) {
  for (int node = 0; node < count_of(topology, HWLOC_OBJ_NUMANODE); ++node) {
    const hwloc_obj_t numa = hwloc_get_obj_by_type(topology, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(node));
    if (numa->cpuset != nullptr && hwloc_bitmap_intersects(numa->cpuset, object->cpuset)) return node;
  }
  return 0;
}

void read_numa_nodes(hwloc_topology_t topology, Topology::Builder& builder) {
  for (int i = 0; i < count_of(topology, HWLOC_OBJ_NUMANODE); ++i) {
    const hwloc_obj_t object = hwloc_get_obj_by_type(topology, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(i));
    builder.numa_nodes.push_back(NumaNode{.index = i,
                                          .os_index = static_cast<int>(object->os_index),
                                          .package = package_of(topology, object, -1),
                                          .memory_bytes = object->attr->numanode.local_memory,
                                          .cores = {}});
  }
}

// A core's PUs, and a cache's cores, are found by walking up from each PU or core once: asking
// hwloc for the objects inside each core's or cache's cpuset scans every object of the type per
// query, and an 8,192-PU machine took ~2 s of nerve-info's start in those scans.
void read_cores(hwloc_topology_t topology, hwloc_obj_type_t core_type, Topology::Builder& builder) {
  const int core_count = count_of(topology, core_type);
  for (int i = 0; i < core_count; ++i) {
    const hwloc_obj_t object = hwloc_get_obj_by_type(topology, core_type, static_cast<unsigned>(i));
    builder.cores.push_back(Core{.index = i,
                                 .package = package_of(topology, object, 0),
                                 .numa_node = numa_node_of(topology, object),
                                 .pu_os_indices = {}});
  }
  // PUs in logical order, each under its core: a core's list comes out in logical order.
  for (int i = 0; i < count_of(topology, HWLOC_OBJ_PU); ++i) {
    const hwloc_obj_t pu = hwloc_get_obj_by_type(topology, HWLOC_OBJ_PU, static_cast<unsigned>(i));
    const hwloc_obj_t core =
        core_type == HWLOC_OBJ_PU ? pu : hwloc_get_ancestor_obj_by_type(topology, core_type, pu);
    if (core == nullptr || core->logical_index >= static_cast<unsigned>(core_count)) continue;
    builder.cores[core->logical_index].pu_os_indices.push_back(static_cast<int>(pu->os_index));
  }
}

// read_caches() keeps data and unified CPU caches; instruction caches do not hold task data and
// memory-side caches belong to NUMA nodes, not cores.
void read_caches(hwloc_topology_t topology, hwloc_obj_type_t core_type, Topology::Builder& builder) {
  constexpr hwloc_obj_type_t levels[] = {HWLOC_OBJ_L1CACHE, HWLOC_OBJ_L2CACHE, HWLOC_OBJ_L3CACHE,
                                         HWLOC_OBJ_L4CACHE, HWLOC_OBJ_L5CACHE};
  // cores_of[level][cache's logical index]: the cores under that cache, in logical order.
  std::vector<std::vector<int>> cores_of[std::size(levels)];
  for (std::size_t level = 0; level < std::size(levels); ++level)
    cores_of[level].resize(static_cast<std::size_t>(count_of(topology, levels[level])));
  for (int i = 0; i < count_of(topology, core_type); ++i) {
    const hwloc_obj_t core = hwloc_get_obj_by_type(topology, core_type, static_cast<unsigned>(i));
    for (hwloc_obj_t above = core->parent; above != nullptr; above = above->parent) {
      for (std::size_t level = 0; level < std::size(levels); ++level) {
        if (above->type == levels[level] && above->logical_index < cores_of[level].size())
          cores_of[level][above->logical_index].push_back(i);
      }
    }
  }
  for (std::size_t level = 0; level < std::size(levels); ++level) {
    for (std::size_t i = 0; i < cores_of[level].size(); ++i) {
      const hwloc_obj_t object = hwloc_get_obj_by_type(topology, levels[level], static_cast<unsigned>(i));
      if (object->attr->cache.type == HWLOC_OBJ_CACHE_INSTRUCTION || cores_of[level][i].empty()) continue;
      builder.caches.push_back(Cache{.level = static_cast<int>(object->attr->cache.depth),
                                     .size_bytes = object->attr->cache.size,
                                     .cores = std::move(cores_of[level][i])});
    }
  }
}

}  // namespace

void read_hwloc_objects(hwloc_topology_t topology, Topology::Builder& builder) {
  // An XML file may nest objects of one type inside each other (a PU in a PU), which hwloc loads
  // but counts as no objects of that type at all: say so, rather than "no cores".
  for (const hwloc_obj_type_t type : {HWLOC_OBJ_PACKAGE, HWLOC_OBJ_CORE, HWLOC_OBJ_PU}) {
    if (hwloc_get_type_depth(topology, type) == HWLOC_TYPE_DEPTH_MULTIPLE) {
      throw Error(ErrorCode::internal,
                  fmt::format("inconsistent topology description: {} objects at several depths of the "
                              "tree (one inside another)",
                              hwloc_obj_type_string(type)));
    }
  }
  // Some machines (and synthetic descriptions such as "pu:4") have PUs but no Core objects.
  const hwloc_obj_type_t core_type = count_of(topology, HWLOC_OBJ_CORE) > 0 ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
  builder.packages.resize(static_cast<std::size_t>(count_of(topology, HWLOC_OBJ_PACKAGE)));
  read_numa_nodes(topology, builder);
  read_cores(topology, core_type, builder);
  read_caches(topology, core_type, builder);
}

}  // namespace nerve::topology
