// registry.hpp — where a context's devices come from.
//
// Backends: the built-in ones (OpenCL, when nerve is built with it), those registered in-process
// (register_backend: tests), then the plugins found on NERVE_PLUGIN_PATH (plugin.hpp). Their
// devices are numbered in that order — the numbers gpu.devices uses (selection.hpp).
// discover_devices() opens the devices the configuration selects, numbering them from
// `first_index` (device i owns memory node i); the runtime calls it once, while building a context.
// With gpu.devices = none no backend is asked anything (no driver is loaded).
//
// Thread safety: every function may be called from any thread.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "nerve/config.hpp"
#include "nerve/topology.hpp"

#include "backend/backend.hpp"
#include "backend/device.hpp"
#include "backend/selection.hpp"

namespace nerve::detail {

// register_backend() / unregister_backend(): an in-process backend for contexts created meanwhile.
void register_backend(std::shared_ptr<Backend> backend);
void unregister_backend(const Backend* backend) noexcept;

// backends(): every backend, in numbering order. Throws what loading a plugin throws.
std::vector<std::shared_ptr<Backend>> backends();

struct FoundDevice {
  std::shared_ptr<Backend> backend;
  std::size_t which = 0;  // the backend's own index of the device
  DeviceInfo info;        // index: its number for gpu.devices
};
// find_devices(): every device of every backend. With `without_devices`, also the backends that found
// none, and why (their unavailable_reason(), asked right after their enumerate()).
std::vector<FoundDevice> find_devices(const Topology& topology,
                                      std::vector<BackendWithoutDevices>* without_devices = nullptr);

// selected_devices(): the positions in `found` (the infos of find_devices(), i.e. gpu.devices
// indices) of the devices discover_devices() opens for `config`, in the order it opens them: context
// device k (TaskOptions::device) is found[result[k - 1]]. Empty with gpu.devices = none. Throws
// select_devices()'s ConfigError; `without_devices` lets it say why a backend named there has none.
std::vector<std::size_t> selected_devices(const Config& config, const std::vector<DeviceInfo>& found,
                                          const std::vector<BackendWithoutDevices>& without_devices = {});

// With `without_devices`, also the backends that found no device, and why (for the context's
// messages about a kernel no device runs).
std::vector<std::unique_ptr<Device>> discover_devices(
    const Config& config, const Topology& topology, int first_index,
    std::vector<BackendWithoutDevices>* without_devices = nullptr);

}  // namespace nerve::detail
