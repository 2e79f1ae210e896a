#include "backend/locality.hpp"

#include <cstdio>
#include <mutex>

#include <fmt/format.h>
#include <hwloc.h>

namespace nerve::detail {
namespace {

// The machine with its PCI devices. nerve's own Topology leaves I/O objects out (they cost a scan
// of sysfs that CPU-only programs do not need), so devices with a PCI address load this once.
hwloc_topology_t io_topology() {
  static std::once_flag once;
  static hwloc_topology_t topology = nullptr;
  std::call_once(once, [] {
    hwloc_topology_t loaded = nullptr;
    if (hwloc_topology_init(&loaded) != 0) return;
    hwloc_topology_set_io_types_filter(loaded, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    if (hwloc_topology_load(loaded) != 0) {
      hwloc_topology_destroy(loaded);
      return;
    }
    topology = loaded;  // kept for the process's life: device locality never changes
  });
  return topology;
}

}  // namespace

std::string format_pci_bus_id(unsigned domain, unsigned bus, unsigned device, unsigned function) {
  return fmt::format("{:04x}:{:02x}:{:02x}.{:x}", domain, bus, device, function);
}

int pci_numa_node(const std::string& bus_id, const Topology& topology) {
  if (bus_id.empty() || topology.synthetic()) return -1;
  unsigned domain = 0, bus = 0, device = 0, function = 0;
  if (std::sscanf(bus_id.c_str(), "%x:%x:%x.%x", &domain, &bus, &device, &function) != 4) return -1;
  hwloc_topology_t machine = io_topology();
  if (machine == nullptr) return -1;
  hwloc_obj_t pci = hwloc_get_pcidev_by_busid(machine, domain, bus, device, function);
  if (pci == nullptr) return -1;
  hwloc_obj_t parent = hwloc_get_non_io_ancestor_obj(machine, pci);
  if (parent == nullptr || parent->nodeset == nullptr || hwloc_bitmap_weight(parent->nodeset) != 1) return -1;
  const int os_index = hwloc_bitmap_first(parent->nodeset);
  for (const NumaNode& node : topology.numa_nodes()) {
    if (node.os_index == os_index) return node.index;
  }
  return -1;
}

}  // namespace nerve::detail
