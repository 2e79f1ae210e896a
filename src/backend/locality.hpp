// locality.hpp — where a device hangs in the machine, from hwloc's I/O objects.
//
// hwloc 2.9 knows PCI devices (and, when built with its OpenCL/CUDA components, OS-device objects
// below them). A backend that can learn its device's PCI bus id from the driver asks here for the
// NUMA node that device is attached to. Everything unknown is -1: a device without a PCI address
// (PoCL's CPU device, a simulated one), a synthetic or XML topology (the device is not part of the
// described machine), or a PCI device hwloc does not see.
//
// Thread safety: callable from any thread; the I/O topology is loaded once per process, on first use.
#pragma once

#include <string>

#include "nerve/topology.hpp"

namespace nerve::detail {

// format_pci_bus_id(): "0000:65:00.0".
std::string format_pci_bus_id(unsigned domain, unsigned bus, unsigned device, unsigned function);

// pci_numa_node(): the logical NUMA node (Topology::numa_nodes() index) nearest to the PCI device
// `bus_id`, or -1 when unknown or when the device is attached above several NUMA nodes.
int pci_numa_node(const std::string& bus_id, const Topology& topology);

}  // namespace nerve::detail
