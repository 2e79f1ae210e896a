#include "backend/opencl/platform.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "backend/locality.hpp"
#include "util/log.hpp"

namespace nerve::detail::opencl {
namespace {

std::mutex contexts_mutex;

// AMD's and NVIDIA's pre-standard PCI queries (what hwloc's opencl.h helper reads), for drivers
// without cl_khr_pci_bus_info.
constexpr cl_device_info device_topology_amd = 0x4037;
constexpr cl_device_info pci_bus_id_nv = 0x4008;
constexpr cl_device_info pci_slot_id_nv = 0x4009;
constexpr cl_device_info pci_domain_id_nv = 0x400A;

std::string pci_bus_id(cl_device_id device) {
  cl_device_pci_bus_info_khr khr{};
  if (clGetDeviceInfo(device, CL_DEVICE_PCI_BUS_INFO_KHR, sizeof khr, &khr, nullptr) == CL_SUCCESS)
    return format_pci_bus_id(khr.pci_domain, khr.pci_bus, khr.pci_device, khr.pci_function);
  struct {
    cl_uint type;
    cl_uchar unused[17];
    cl_uchar bus, device, function;
  } amd{};
  if (clGetDeviceInfo(device, device_topology_amd, sizeof amd, &amd, nullptr) == CL_SUCCESS && amd.type == 1)
    return format_pci_bus_id(0, amd.bus, amd.device, amd.function);
  cl_uint bus = 0, slot = 0, domain = 0;
  if (clGetDeviceInfo(device, pci_bus_id_nv, sizeof bus, &bus, nullptr) == CL_SUCCESS &&
      clGetDeviceInfo(device, pci_slot_id_nv, sizeof slot, &slot, nullptr) == CL_SUCCESS) {
    if (clGetDeviceInfo(device, pci_domain_id_nv, sizeof domain, &domain, nullptr) != CL_SUCCESS) domain = 0;
    return format_pci_bus_id(domain, bus & 0xff, slot >> 3, slot & 7);
  }
  return {};
}

PlatformDevice describe(cl_platform_id platform, cl_device_id device, std::size_t platform_index,
                        std::size_t device_index) {
  PlatformDevice d;
  d.platform = platform;
  d.device = device;
  d.platform_index = platform_index;
  d.device_index = device_index;
  d.name = device_string(device, CL_DEVICE_NAME);
  d.vendor = device_string(device, CL_DEVICE_VENDOR);
  d.platform_name = platform_string(platform, CL_PLATFORM_NAME);
  d.driver_version = device_string(device, CL_DRIVER_VERSION);
  d.device_version = device_string(device, CL_DEVICE_VERSION);
  d.global_memory = device_value<cl_ulong>(device, CL_DEVICE_GLOBAL_MEM_SIZE);
  d.max_allocation = device_value<cl_ulong>(device, CL_DEVICE_MAX_MEM_ALLOC_SIZE);
  d.compute_units = device_value<cl_uint>(device, CL_DEVICE_MAX_COMPUTE_UNITS);
  d.base_alignment = device_value<cl_uint>(device, CL_DEVICE_MEM_BASE_ADDR_ALIGN) / 8;
  if (d.base_alignment == 0) d.base_alignment = 1;
  d.max_work_group = device_value<std::size_t>(device, CL_DEVICE_MAX_WORK_GROUP_SIZE);
  d.unified_memory = device_value<cl_bool>(device, CL_DEVICE_HOST_UNIFIED_MEMORY) == CL_TRUE;
  d.cpu_device = (device_value<cl_device_type>(device, CL_DEVICE_TYPE) & CL_DEVICE_TYPE_CPU) != 0;
  d.pci_bus_id = pci_bus_id(device);
  return d;
}

// no_platform(): why the ICD loader found no platform, naming where it looked for vendor files (the
// usual cause: no driver package installed, or OCL_ICD_VENDORS pointing at the wrong directory).
// Or the process had no file descriptor left when the loader looked (it looks once per process).
std::string no_platform(cl_int status) {
  const char* vendors = std::getenv("OCL_ICD_VENDORS");
  std::string cause;
  const int probe = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (probe >= 0) {
    ::close(probe);
  } else if (errno == EMFILE || errno == ENFILE) {
    cause = fmt::format(
        "; this process can open no file now ({}): the loader, which reads them once per process, may "
        "have failed to, and OpenCL then stays unavailable in it",
        std::strerror(errno));
  }
  return fmt::format("the ICD loader found no OpenCL platform: clGetPlatformIDs: {}, vendor files {}{}",
                     status == CL_SUCCESS ? "0 platforms" : error_name(status),
                     vendors != nullptr && *vendors != '\0'
                         ? fmt::format("from OCL_ICD_VENDORS={}", vendors)
                         : std::string("in /etc/OpenCL/vendors unless OCL_ICD_VENDORS says otherwise"),
                     cause);
}

}  // namespace

Platforms& Platforms::instance() {
  // Never destroyed: drivers may still run callbacks or hold objects while static destructors run.
  static Platforms* platforms = new Platforms();
  return *platforms;
}

Platforms::Platforms() {
  try {
    cl_uint count = 0;
    const cl_int status = clGetPlatformIDs(0, nullptr, &count);
    if (status == -1001 || (status == CL_SUCCESS && count == 0)) {
      problem_ = no_platform(status);
      log::debug("OpenCL: no device ({})", problem_);
      return;
    }
    check(status, "clGetPlatformIDs");
    std::vector<cl_platform_id> platforms(count);
    check(clGetPlatformIDs(count, platforms.data(), nullptr), "clGetPlatformIDs");
    contexts_.resize(count, nullptr);
    std::vector<std::string> empty;  // why each platform gave no device, for problem_
    for (std::size_t p = 0; p < platforms.size(); ++p) {
      cl_uint device_count = 0;
      const cl_int found = clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, 0, nullptr, &device_count);
      if (found == CL_DEVICE_NOT_FOUND || device_count == 0) {
        empty.push_back(fmt::format("'{}': clGetDeviceIDs: {}",
                                    platform_string(platforms[p], CL_PLATFORM_NAME),
                                    found == CL_SUCCESS ? "no device" : error_name(found)));
        continue;
      }
      check(found, "clGetDeviceIDs");
      std::vector<cl_device_id> ids(device_count);
      check(clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, device_count, ids.data(), nullptr),
            "clGetDeviceIDs");
      const std::size_t before = devices_.size();
      for (std::size_t d = 0; d < ids.size(); ++d) {
        if (device_value<cl_bool>(ids[d], CL_DEVICE_AVAILABLE) != CL_TRUE) continue;
        devices_.push_back(describe(platforms[p], ids[d], p, d));
      }
      if (devices_.size() == before) {
        empty.push_back(fmt::format("'{}': its {} device{} not available (CL_DEVICE_AVAILABLE is false)",
                                    platform_string(platforms[p], CL_PLATFORM_NAME), device_count,
                                    device_count == 1 ? " is" : "s are"));
      }
    }
    if (devices_.empty()) {
      problem_ = fmt::format("{} OpenCL platform{}, none with a device: {}", count, count == 1 ? "" : "s",
                             fmt::join(empty, "; "));
      log::debug("OpenCL: no device ({})", problem_);
    }
  } catch (const std::exception& error) {
    problem_ = fmt::format("OpenCL platforms could not be listed: {}", error.what());
    log::warn("{}", problem_);
    devices_.clear();
  }
}

cl_context Platforms::context(const PlatformDevice& device) {
  std::lock_guard lock(contexts_mutex);
  cl_context& context = contexts_[device.platform_index];
  if (context != nullptr) return context;
  std::vector<cl_device_id> members;
  for (const PlatformDevice& each : devices_) {
    if (each.platform == device.platform) members.push_back(each.device);
  }
  const cl_context_properties properties[] = {CL_CONTEXT_PLATFORM,
                                              reinterpret_cast<cl_context_properties>(device.platform), 0};
  cl_int status = CL_SUCCESS;
  cl_context created = clCreateContext(properties, static_cast<cl_uint>(members.size()), members.data(),
                                       nullptr, nullptr, &status);
  check(status, fmt::format("creating an OpenCL context on platform '{}'", device.platform_name));
  context = created;  // kept for the process's life, like the platform itself
  return context;
}

}  // namespace nerve::detail::opencl
