#include "backend/registry.hpp"

#include <algorithm>
#include <cstdlib>
#include <mutex>

#include <fmt/format.h>

#include "nerve/error.hpp"

#include "backend/plugin.hpp"
#include "backend/selection.hpp"
#include "memory/coherence.hpp"
#include "util/log.hpp"

#if NERVE_HAVE_OPENCL
#include "backend/opencl/backend.hpp"
#endif
#if NERVE_HAVE_CUDA
#include "backend/cuda/backend.hpp"
#endif

namespace nerve::detail {
namespace {

std::mutex registry_mutex;
std::vector<std::shared_ptr<Backend>>& registered() {
  static auto* list = new std::vector<std::shared_ptr<Backend>>();  // lives until exit
  return *list;
}

const std::vector<std::shared_ptr<Backend>>& built_in() {
  static const auto* list = new std::vector<std::shared_ptr<Backend>> {
#if NERVE_HAVE_OPENCL
    opencl::make_backend(),
#endif
#if NERVE_HAVE_CUDA
        cuda::make_backend(cuda::make_cudart_driver()),
#endif
  };
  return *list;
}

}  // namespace

void register_backend(std::shared_ptr<Backend> backend) {
  std::lock_guard lock(registry_mutex);
  registered().push_back(std::move(backend));
}

void unregister_backend(const Backend* backend) noexcept {
  std::lock_guard lock(registry_mutex);
  auto& list = registered();
  list.erase(
      std::remove_if(list.begin(), list.end(), [&](const auto& each) { return each.get() == backend; }),
      list.end());
}

std::vector<std::shared_ptr<Backend>> backends() {
  std::vector<std::shared_ptr<Backend>> all = built_in();
  {
    std::lock_guard lock(registry_mutex);
    all.insert(all.end(), registered().begin(), registered().end());
  }
  if (const char* path = std::getenv("NERVE_PLUGIN_PATH"); path != nullptr && *path != '\0') {
    for (auto& plugin : plugins_on_path(path)) all.push_back(std::move(plugin));
  }
  return all;
}

std::vector<FoundDevice> find_devices(const Topology& topology,
                                      std::vector<BackendWithoutDevices>* without_devices) {
  std::vector<FoundDevice> found;
  for (const auto& backend : backends()) {
    std::vector<DeviceInfo> devices = backend->enumerate(topology);
    if (devices.empty() && without_devices != nullptr)
      without_devices->push_back(BackendWithoutDevices{backend->name(), backend->unavailable_reason(),
                                                       backend->plugin(), backend->kind()});
    for (std::size_t which = 0; which < devices.size(); ++which) {
      DeviceInfo info = std::move(devices[which]);
      info.index = static_cast<int>(found.size());
      if (info.backend.empty()) info.backend = backend->name();
      found.push_back(FoundDevice{backend, which, std::move(info)});
    }
  }
  return found;
}

std::vector<std::size_t> selected_devices(const Config& config, const std::vector<DeviceInfo>& infos,
                                          const std::vector<BackendWithoutDevices>& without_devices) {
  if (config.gpu.devices.empty()) return {};
  std::vector<std::size_t> selected =
      select_devices(infos, config.gpu.devices, config.origin("gpu.devices"), without_devices);
  // One GPU seen through two backends (NVIDIA's OpenCL driver and CUDA both list it, with the same PCI
  // address) would become two memory nodes that split its memory without knowing of each other: when
  // both are selected, the CUDA one stays.
  const std::vector<std::size_t> chosen = selected;
  std::erase_if(selected, [&](std::size_t position) {
    const DeviceInfo& info = infos[position];
    if (info.kind == DeviceKind::cuda || info.pci_bus_id.empty()) return false;
    for (std::size_t other : chosen) {
      if (infos[other].kind == DeviceKind::cuda && infos[other].pci_bus_id == info.pci_bus_id) {
        log::info("device {} ('{}', {}) is CUDA device {} too: it is used through CUDA only", info.index,
                  info.name, info.backend, infos[other].index);
        return true;
      }
    }
    return false;
  });
  return selected;
}

std::vector<std::unique_ptr<Device>> discover_devices(const Config& config, const Topology& topology,
                                                      int first_index,
                                                      std::vector<BackendWithoutDevices>* without) {
  std::vector<std::unique_ptr<Device>> devices;
  if (config.gpu.devices.empty()) return devices;  // gpu.devices = none: no driver is even loaded
  std::vector<BackendWithoutDevices> without_devices;
  const std::vector<FoundDevice> found = find_devices(topology, &without_devices);
  if (without != nullptr) *without = without_devices;
  std::vector<DeviceInfo> infos;
  infos.reserve(found.size());
  for (const FoundDevice& device : found) infos.push_back(device.info);
  const std::vector<std::size_t> selected = selected_devices(config, infos, without_devices);
  if (selected.size() + static_cast<std::size_t>(first_index) > max_memory_nodes) {
    throw Error(ErrorCode::not_supported,
                fmt::format("gpu.devices selects {} devices; nerve supports at most {} memory nodes (host "
                            "included): select fewer",
                            selected.size(), max_memory_nodes));
  }
  std::vector<std::string> node_names;
  for (std::size_t position : selected) {
    const FoundDevice& chosen = found[position];
    DeviceOpenOptions options;
    options.index = first_index + static_cast<int>(devices.size());
    // Memory nodes go by their devices' names, but two devices may share one (two GPUs of a model,
    // PoCL's two pthread devices): a later one adds its number, so that no message names two nodes.
    options.memory_node_name = chosen.info.name;
    if (std::find(node_names.begin(), node_names.end(), options.memory_node_name) != node_names.end())
      options.memory_node_name += fmt::format(" (device {})", options.index);
    node_names.push_back(options.memory_node_name);
    options.stream_count = config.gpu.stream_count;
    options.max_pending_transfers = config.gpu.max_pending_transfers;
    options.peer_access = config.gpu.peer_access;
    options.config = &config;
    options.topology = &topology;
    devices.push_back(chosen.backend->open(chosen.which, options));
    log::debug("device {}: '{}' ({}), memory node {}", options.index, devices.back()->info().name,
               chosen.info.backend, devices.back()->memory().index());
  }
  return devices;
}

}  // namespace nerve::detail
