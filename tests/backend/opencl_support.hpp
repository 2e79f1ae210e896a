// opencl_support.hpp — contexts with the OpenCL backend for tests, skipping when there is none.
//
// opencl_settings() gives hermetic settings that select the OpenCL devices (gpu.devices = opencl).
// NERVE_SKIP_WITHOUT_OPENCL() skips the calling test (GTEST_SKIP) when nerve was built without
// OpenCL or the machine has no OpenCL platform with a device, so the suite passes cleanly there.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include <unistd.h>

#include "backend/registry.hpp"
#include "runtime/context_impl.hpp"
#include "support/runtime_fixture.hpp"

namespace nerve::testing {

// PrivateProgramCache: while one lives, NERVE_CACHE_DIR names a fresh directory of its own (`name`
// tells tests apart), so that a test neither reads nor fills the user's program cache. Its end
// removes the directory and restores the variable: a binary's later suites build programs too, and
// go back to the process's cache instead of refilling one that is gone (each run left one in /tmp).
class PrivateProgramCache {
 public:
  explicit PrivateProgramCache(const std::string& name)
      : path_(std::filesystem::temp_directory_path() /
              ("nerve-opencl-" + name + "-" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path_);
    if (const char* before = std::getenv("NERVE_CACHE_DIR")) before_ = before;
    ::setenv("NERVE_CACHE_DIR", path_.c_str(), 1);
  }
  ~PrivateProgramCache() {
    if (before_) {
      ::setenv("NERVE_CACHE_DIR", before_->c_str(), 1);
    } else {
      ::unsetenv("NERVE_CACHE_DIR");
    }
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  PrivateProgramCache(const PrivateProgramCache&) = delete;
  PrivateProgramCache& operator=(const PrivateProgramCache&) = delete;
  const std::filesystem::path& path() const noexcept { return path_; }

 private:
  std::filesystem::path path_;
  std::optional<std::string> before_;  // NERVE_CACHE_DIR before, restored after
};

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
