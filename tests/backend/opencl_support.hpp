// opencl_support.hpp — contexts with the OpenCL backend for tests, skipping when there is none.
//
// opencl_settings() gives hermetic settings that select the OpenCL devices (gpu.devices = opencl).
// NERVE_SKIP_WITHOUT_OPENCL() skips the calling test (GTEST_SKIP) when nerve was built without
// OpenCL or the machine has no OpenCL platform with a device, so the suite passes cleanly there.
#pragma once

#include <memory>
#include <string>

#include "backend/registry.hpp"
#include "runtime/context_impl.hpp"
#include "support/runtime_fixture.hpp"

namespace nerve::testing {

inline Settings opencl_settings(unsigned workers, const std::string& devices = "opencl") {
  Settings settings = make_settings(workers);
  settings.set("gpu.devices", devices);
  return settings;
}

// opencl_device_count(): OpenCL devices the backends find on this machine (0 without OpenCL).
inline std::size_t opencl_device_count() {
#if NERVE_HAVE_OPENCL
  static const std::size_t count = [] {
    std::size_t found = 0;
    const Context probe(make_settings(1));
    for (const auto& device : detail::find_devices(probe.impl()->topology))
      if (device.info.backend == "opencl") ++found;
    return found;
  }();
  return count;
#else
  return 0;
#endif
}

#define NERVE_SKIP_WITHOUT_OPENCL()                                                       \
  do {                                                                                    \
    if (::nerve::testing::opencl_device_count() == 0) GTEST_SKIP() << "no OpenCL device"; \
  } while (false)

}  // namespace nerve::testing
