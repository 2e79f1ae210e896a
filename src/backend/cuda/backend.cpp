#include "backend/cuda/backend.hpp"

#include <mutex>

#include <fmt/format.h>

#include "nerve/error.hpp"

#include "backend/cuda/device.hpp"
#include "backend/locality.hpp"
#include "util/log.hpp"

namespace nerve::detail::cuda {
namespace {

class CudaBackend final : public Backend {
 public:
  CudaBackend(std::shared_ptr<Driver> driver, std::string name)
      : driver_(std::move(driver)), name_(std::move(name)) {}

  std::string name() const override { return name_; }
  std::optional<DeviceKind> kind() const override { return DeviceKind::cuda; }

  std::vector<DeviceInfo> enumerate(const Topology& topology) override {
    std::string why;
    const int count = driver_->device_count(why);
    {
      std::lock_guard lock(mutex_);
      why_ = count > 0 ? std::string{} : fmt::format("{}: no device ({})", driver_->describe(), why);
    }
    if (count <= 0) {
      log::debug("CUDA backend '{}': no device ({})", name_, why);
      return {};
    }
    std::vector<DeviceInfo> found;
    found.reserve(static_cast<std::size_t>(count));
    for (int ordinal = 0; ordinal < count; ++ordinal) found.push_back(describe(ordinal, topology));
    return found;
  }

  std::unique_ptr<Device> open(std::size_t which, const DeviceOpenOptions& options) override {
    const int ordinal = static_cast<int>(which);
    DeviceInfo info = describe(ordinal, *options.topology);
    info.index = options.index;
    CudaDeviceOptions cuda;
    if (options.config != nullptr) {
      const Config& config = *options.config;
      cuda.reserved_high_streams = config.scheduler.high_priority_streams_for(ordinal);
      cuda.unified_memory = config.gpu.unified_memory;
      cuda.async_prefetch = config.gpu.async_prefetch;
      cuda.cache_hints = config.gpu.cache_hints;
      cuda.pin_host_buffers = config.gpu.pin_host_buffers;
    }
    const DeviceProperties properties = driver_->properties(ordinal);
    if (cuda.unified_memory && properties.managed_memory && !properties.concurrent_managed_access &&
        (cuda.async_prefetch || cuda.cache_hints)) {
      // Without concurrent managed access (Windows, pre-Pascal) the driver refuses prefetches and advice.
      log::info(
          "CUDA device {} ('{}'): no concurrent managed access; gpu.async_prefetch and gpu.cache_hints "
          "do nothing there",
          ordinal, info.name);
      cuda.async_prefetch = cuda.cache_hints = false;
    }
    if (cuda.unified_memory && !properties.managed_memory) {
      log::warn(
          "gpu.unified_memory: CUDA device {} ('{}') has no managed memory; its buffers stay in device "
          "memory",
          ordinal, info.name);
      cuda.unified_memory = false;
    }
    cuda.completion = completion_mode_from_environment();
    cuda.pool = pool_kind_from_environment();
    return std::make_unique<CudaDevice>(driver_, ordinal, info, options, cuda);
  }

  std::string unavailable_reason() const override {
    std::lock_guard lock(mutex_);
    return why_;
  }

 private:
  DeviceInfo describe(int ordinal, const Topology& topology) {
    const DeviceProperties properties = driver_->properties(ordinal);
    DeviceInfo info;
    info.kind = DeviceKind::cuda;
    info.name = properties.name;
    info.memory_bytes = properties.total_memory;
    info.compute_units = properties.multiprocessors;
    info.numa_node = pci_numa_node(properties.pci_bus_id, topology);
    info.backend = name_;
    info.pci_bus_id = properties.pci_bus_id;
    info.unified_memory = properties.integrated;
    return info;
  }

  const std::shared_ptr<Driver> driver_;
  const std::string name_;
  mutable std::mutex mutex_;
  std::string why_;
};

}  // namespace

std::shared_ptr<Backend> make_backend(std::shared_ptr<Driver> driver, std::string name) {
  return std::make_shared<CudaBackend>(std::move(driver), std::move(name));
}

}  // namespace nerve::detail::cuda
