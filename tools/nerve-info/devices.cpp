// The devices nerve-info reports. Today nerve runs tasks on CPU workers only; each backend (OpenCL,
// CUDA, plugins) adds its devices to list_devices() when it lands, and both outputs pick them up.
#include <fmt/format.h>

#include "report.hpp"

namespace nerve::info {

std::vector<DeviceInfo> list_devices(const Report& report) {
  std::vector<DeviceInfo> devices;
  devices.push_back(DeviceInfo{"cpu", "CPU workers", report.pool.count});
  return devices;
}

std::string print_devices(const std::vector<DeviceInfo>& devices) {
  std::string out = "Devices\n";
  for (const DeviceInfo& device : devices) out += fmt::format("  {} ({})\n", device.name, device.count);
  return out;
}

}  // namespace nerve::info
