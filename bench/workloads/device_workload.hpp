// device_workload.hpp — what the device workloads (W5 heterogeneous, W12 streaming) share: a nerve
// context with the OpenCL devices, and the answer when there are none.
#pragma once

#include <memory>
#include <string>

#include "nerve/nerve.hpp"

#include "workload.hpp"

namespace nerve::bench {

// open_device_context(): a context with the options' settings and gpu.devices = opencl (unless the
// settings choose devices themselves); nullptr when no OpenCL device is there (`why` says so).
std::unique_ptr<nerve::Context> open_device_context(const WorkloadOptions& options, std::string& why);

// host_copy_gbps(): the host's memcpy bandwidth over `bytes` (read + write counted once, as a
// device copy moves each byte once), the reference the streaming figures are quoted against.
double host_copy_gbps(std::size_t bytes);

}  // namespace nerve::bench
