#include "backend/opencl/backend.hpp"

#include <mutex>

#include <fmt/format.h>

#include "backend/locality.hpp"
#include "backend/opencl/device.hpp"
#include "backend/opencl/platform.hpp"

namespace nerve::detail::opencl {
namespace {

class OpenclBackend final : public Backend {
 public:
  std::string name() const override { return "opencl"; }
  std::optional<DeviceKind> kind() const override { return DeviceKind::opencl; }

  std::vector<DeviceInfo> enumerate(const Topology& topology) override {
    const Platforms& platforms = Platforms::instance();
    std::vector<DeviceInfo> found;
    for (const PlatformDevice& device : platforms.devices()) found.push_back(describe(device, topology));
    {
      std::lock_guard lock(mutex_);
      if (!found.empty())
        why_.clear();
      else
        why_ = platforms.problem().empty() ? "no device" : fmt::format("no device ({})", platforms.problem());
    }
    return found;
  }

  std::unique_ptr<Device> open(std::size_t which, const DeviceOpenOptions& options) override {
    const auto& devices = Platforms::instance().devices();
    if (which >= devices.size()) {
      throw Error(ErrorCode::internal, fmt::format("OpenCL device {} does not exist", which));
    }
    DeviceInfo info = describe(devices[which], *options.topology);
    info.index = options.index;
    return std::make_unique<OpenclDevice>(devices[which], std::move(info), options);
  }

  // unavailable_reason(): as the CUDA backend's, "no device (...)" with what the ICD loader and the
  // platforms said; empty before enumerate() (which initialises OpenCL) and when it found devices.
  std::string unavailable_reason() const override {
    std::lock_guard lock(mutex_);
    return why_;
  }

 private:
  static DeviceInfo describe(const PlatformDevice& device, const Topology& topology) {
    DeviceInfo info;
    info.kind = DeviceKind::opencl;
    info.name = device.name;
    info.memory_bytes = device.global_memory;
    info.compute_units = device.compute_units;
    info.numa_node = pci_numa_node(device.pci_bus_id, topology);
    info.backend = "opencl";
    info.pci_bus_id = device.pci_bus_id;
    info.unified_memory = device.unified_memory;
    info.shares_host_cores = device.cpu_device;
    return info;
  }

  mutable std::mutex mutex_;
  std::string why_;
};

}  // namespace

std::shared_ptr<Backend> make_backend() { return std::make_shared<OpenclBackend>(); }

}  // namespace nerve::detail::opencl
