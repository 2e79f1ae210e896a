// The devices nerve-info reports: the CPU workers, then every accelerator the context opened (the
// OpenCL backend's, plugins'; gpu.devices selects them), with its memory node and where it hangs.
#include <fmt/format.h>

#include "report.hpp"

namespace nerve::info {

std::vector<DeviceInfo> list_devices(const Report& report) {
  std::vector<DeviceInfo> devices;
  DeviceInfo cpu;
  cpu.kind = "cpu";
  cpu.name = "CPU workers";
  cpu.count = report.pool.count;
  devices.push_back(std::move(cpu));
  devices.insert(devices.end(), report.accelerators.begin(), report.accelerators.end());
  return devices;
}

std::string print_host_memory(const std::vector<std::string>& pools) {
  std::string out = "Host memory (memory node 0: a pool per NUMA node)\n";
  for (const std::string& pool : pools) out += "  " + pool + "\n";
  return out;
}

std::string print_devices(const std::vector<DeviceInfo>& devices) {
  // "device N" is the context's number (TaskOptions::device; 0 = the CPU workers), "gpu.devices M"
  // the accelerator's number among those the backends found (what gpu.devices selects by).
  std::string out = "Devices\n";
  for (const DeviceInfo& device : devices) {
    if (device.kind == "cpu") {
      out += fmt::format("  {} ({}), memory node 0 'host' (host memory)\n", device.name, device.count);
      continue;
    }
    const std::string selection =
        device.gpu_devices_index >= 0 ? fmt::format(" (gpu.devices {})", device.gpu_devices_index) : "";
    // 0 is a size the backend does not know (a plugin's device may not say), not an empty memory.
    const std::string memory = device.memory_bytes != 0 ? format_bytes(device.memory_bytes) : "unknown";
    out += fmt::format("  device {}{}: {} '{}' ({}), memory node {} '{}', {} memory, {} compute units\n",
                       device.index, selection, device.kind, printable(device.name), device.backend,
                       device.memory_node, printable(device.memory_node_name), memory, device.compute_units);
    const std::string numa =
        device.numa_node >= 0 ? fmt::format("NUMA node {}", device.numa_node) : "NUMA node unknown";
    const std::string pci = device.pci_bus_id.empty() ? "no PCI address" : "PCI " + device.pci_bus_id;
    out += fmt::format("    locality: {}, {}; {} memory; {} queues, at most {} transfers in flight\n", numa,
                       pci, device.unified_memory ? "unified (shared with the host)" : "separate",
                       device.queues, device.max_pending_transfers);
    if (device.shares_host_cores)
      out += "    computes on the host's CPU cores (shared with the CPU workers)\n";
  }
  return out;
}

}  // namespace nerve::info
