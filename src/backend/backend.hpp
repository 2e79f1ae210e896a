// backend.hpp — what every device backend implements: enumerate its devices, open one.
//
// A backend (OpenCL, a plugin, in tests a fake) lists the devices it can drive, without opening
// them, and opens the ones the configuration selects (gpu.devices). An opened Device owns its memory
// node (allocation, asynchronous copies host<->device and device<->device with completion
// callbacks), its queues (gpu.stream_count), its in-flight bound (gpu.max_pending_transfers) and its
// event bookkeeping, and runs the kernel tasks placed on it (Device in device.hpp). The contract in
// full is docs/BACKENDS.md.
//
// Thread safety: enumerate() and open() are called by the thread building a context, possibly from
// several contexts at once; a backend guards its own shared state.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "nerve/config.hpp"
#include "nerve/device.hpp"
#include "nerve/topology.hpp"

#include "backend/device.hpp"

namespace nerve::detail {

// How a context wants an opened device driven.
struct DeviceOpenOptions {
  int index = 1;                        // the device's index in the context (and its memory node's)
  unsigned stream_count = 4;            // gpu.stream_count
  unsigned max_pending_transfers = 32;  // gpu.max_pending_transfers
  bool peer_access = true;              // gpu.peer_access
  const Config* config = nullptr;
  const Topology* topology = nullptr;
  // The name its memory node goes by in messages and bus.json: the device's own name (as nerve-info
  // and Context::devices() show it), made unique among the context's devices by the registry.
  // node_name(): that, or the device's name when whoever opens it gave none (tests opening a backend).
  std::string memory_node_name;
  std::string node_name(const std::string& device_name) const {
    return memory_node_name.empty() ? device_name : memory_node_name;
  }
};

class Backend {
 public:
  virtual ~Backend() = default;
  // name(): "opencl", or the plugin's name; selects all its devices in gpu.devices.
  virtual std::string name() const = 0;
  // enumerate(): the devices this backend can open, in a stable order. DeviceInfo::index and
  // memory_node are not set (the context numbers devices when it opens them). Throws nerve::Error
  // when the driver fails in a way the user must hear about; "no device" is an empty list.
  virtual std::vector<DeviceInfo> enumerate(const Topology& topology) = 0;
  // open(): a device of enumerate()'s list, numbered options.index.
  virtual std::unique_ptr<Device> open(std::size_t which, const DeviceOpenOptions& options) = 0;
  // unavailable_reason(): after an enumerate() that found nothing, why ("no CUDA driver: ..."), for
  // nerve-info; empty when the backend found devices or has nothing to say.
  virtual std::string unavailable_reason() const { return {}; }
  // plugin(): loaded from NERVE_PLUGIN_PATH at run time, not part of this build (for messages).
  virtual bool plugin() const { return false; }
  // kind(): the kind of every device it has, when that is known without a device (the built-in
  // OpenCL and CUDA backends): a kernel call that finds no device of its kind says why from it.
  virtual std::optional<DeviceKind> kind() const { return std::nullopt; }
};

}  // namespace nerve::detail
