// selection.hpp — which of the devices the backends found a context uses (gpu.devices).
//
// Accelerators are numbered 0.. in the order the backends list them (built-in OpenCL and CUDA
// first, then in-process and plugin backends); the CPU workers are not among them, so these are not
// context device numbers (TaskOptions::device, where 0 is the CPU workers). gpu.devices is `all`, `none`, or
// a list whose items are such numbers, backend names
// ("opencl", a plugin's name: all its devices) or fragments of device names ("pthread", "A100"),
// compared without regard to case. The selection keeps the found order and each device once.
//
// Thread safety: a pure function.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "nerve/config.hpp"
#include "nerve/device.hpp"

namespace nerve::detail {

// A backend that found no device, and why (Backend::unavailable_reason(); may be empty).
struct BackendWithoutDevices {
  std::string name;                // Backend::name(): "cuda", "opencl", a plugin's name
  std::string reason;              // "cudart 13.0 (driver none): no device (...)"
  bool plugin = false;             // Backend::plugin(): loaded at run time, not in this build
  std::optional<DeviceKind> kind;  // Backend::kind()
};

// select_devices(): positions in `found` selected by `words` (Config::gpu.devices). Throws
// ConfigError naming gpu.devices and where its value came from (`origin`) when an item selects
// nothing, an index is out of range, or `all` / `none` is mixed with other items. An item that names
// one of `without_devices` still selects nothing, and the error says that this backend exists but
// found no device, and why.
std::vector<std::size_t> select_devices(const std::vector<DeviceInfo>& found,
                                        const std::vector<std::string>& words, const ConfigOrigin& origin,
                                        const std::vector<BackendWithoutDevices>& without_devices = {});

// describe_found(): "0 'pthread-haswell' (opencl), 1 'sim0' (sim)" or "none", for messages.
std::string describe_found(const std::vector<DeviceInfo>& found);

}  // namespace nerve::detail
