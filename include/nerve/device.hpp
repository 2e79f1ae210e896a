// device.hpp — the compute devices a context runs tasks on.
//
// Device 0 is always the CPU workers (as one device); devices 1.. are accelerators found by the
// backends (OpenCL, CUDA, plugins; configuration key gpu.devices selects them) and, in tests, simulated
// devices with separate memory. Each device owns one memory node where buffer replicas live; the
// CPU device's node is host memory. docs/BACKENDS.md describes the backends.
#pragma once

#include <cstdint>
#include <string>

#include "nerve/export.hpp"

namespace nerve {

enum class DeviceKind {
  cpu,  // the CPU worker pool
  // test: a device with separate memory that is neither OpenCL nor CUDA: a backend plugin's (the
  // default kind of plugin devices, which run the implementation Kernel::implement attached for
  // test), or nerve's simulated device in its own tests (which runs Kernels' cpu() bodies only).
  test,
  opencl,
  cuda,
};

NERVE_API const char* name(DeviceKind kind) noexcept;

struct DeviceInfo {
  int index = 0;
  DeviceKind kind = DeviceKind::cpu;
  std::string name;
  // memory_bytes: capacity of its memory node (0: unknown — then no limit of nerve's own, as for a
  // plugin device that does not say — or host memory).
  std::uint64_t memory_bytes = 0;
  unsigned compute_units = 0;
  int numa_node = -1;           // the host NUMA node it is attached to, when known
  int memory_node = 0;          // index of its memory node
  std::string backend;          // "opencl", "cuda", a plugin's name, "test"; empty for the CPU workers
  std::string pci_bus_id;       // "0000:65:00.0" when the device sits on PCI and the driver says where
  bool unified_memory = false;  // it shares physical memory with the host (integrated GPU, PoCL)
  // It computes on the host's CPU cores (an OpenCL CPU device such as PoCL's): its kernels compete
  // with the CPU workers for the same cores, and scheduler.policy heft counts them as CPU time.
  bool shares_host_cores = false;
};

}  // namespace nerve
