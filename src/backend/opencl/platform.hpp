// platform.hpp — the OpenCL devices of this process, found once through the ICD loader.
//
// Platforms are enumerated on first use and kept for the process's life (an ICD driver cannot be
// unloaded safely while any of its objects may exist). Each platform gets one cl_context holding all
// its devices, also created on first use and shared by every nerve context: programs and memory
// objects of two devices of one platform then live in one context, so device-to-device copies
// between them need no staging through the host.
//
// Thread safety: every member may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "nerve/topology.hpp"

#include "backend/opencl/cl.hpp"

namespace nerve::detail::opencl {

struct PlatformDevice {
  cl_platform_id platform = nullptr;
  cl_device_id device = nullptr;
  std::size_t platform_index = 0;  // position among the ICD loader's platforms
  std::size_t device_index = 0;    // position among the platform's devices
  std::string name;                // CL_DEVICE_NAME
  std::string vendor;
  std::string platform_name;
  std::string driver_version;        // CL_DRIVER_VERSION: part of the program cache key
  std::string device_version;        // CL_DEVICE_VERSION
  std::uint64_t global_memory = 0;   // CL_DEVICE_GLOBAL_MEM_SIZE: the memory node's limit
  std::uint64_t max_allocation = 0;  // CL_DEVICE_MAX_MEM_ALLOC_SIZE: the largest buffer
  unsigned compute_units = 0;
  std::size_t base_alignment = 0;  // CL_DEVICE_MEM_BASE_ADDR_ALIGN in bytes: sub-buffer origins
  std::size_t max_work_group = 0;
  bool unified_memory = false;  // CL_DEVICE_HOST_UNIFIED_MEMORY
  bool cpu_device = false;      // CL_DEVICE_TYPE includes CL_DEVICE_TYPE_CPU: it runs on the host's cores
  std::string pci_bus_id;       // from cl_khr_pci_bus_info or the AMD/NVIDIA extensions; "" unknown
};

class Platforms {
 public:
  // instance(): the process's platforms. A broken ICD installation is no error: it has no devices
  // (problem() then says why, for nerve-info and logs). Found once: a later change to the ICD
  // loader's environment (OCL_ICD_VENDORS, POCL_DEVICES) is not seen by this process.
  static Platforms& instance();

  const std::vector<PlatformDevice>& devices() const noexcept { return devices_; }
  // problem(): when devices() is empty, why: no platform (with where the ICD loader looked), each
  // platform's clGetDeviceIDs answer, or the error that stopped the listing. Empty otherwise.
  const std::string& problem() const noexcept { return problem_; }
  // context(): the shared cl_context of `device`'s platform. Throws Error when the driver refuses.
  cl_context context(const PlatformDevice& device);

 private:
  Platforms();
  std::vector<PlatformDevice> devices_;
  std::vector<cl_context> contexts_;  // per platform_index, created on first use
  std::string problem_;
};

}  // namespace nerve::detail::opencl
