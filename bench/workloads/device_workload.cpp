#include "device_workload.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "measure.hpp"
#include "runtimes.hpp"

namespace nerve::bench {

std::unique_ptr<nerve::Context> open_device_context(const WorkloadOptions& options, std::string& why) {
  nerve::Settings settings = nerve_settings(options);
  bool chosen = std::getenv("NERVE_GPU_DEVICES") != nullptr;
  for (const auto& [key, value] : settings.values()) chosen = chosen || key == "gpu.devices";
  if (!chosen) settings.set("gpu.devices", "opencl");
  std::unique_ptr<nerve::Context> context;
  try {
    context = std::make_unique<nerve::Context>(settings);
  } catch (const nerve::ConfigError& error) {
    why = std::string("no OpenCL device: ") + error.what();
    return nullptr;
  }
  if (context->devices().size() < 2) {
    why = "no OpenCL device";
    return nullptr;
  }
  return context;
}

std::string needs_opencl_device() {
  // The same discovery the workloads make, with the environment's settings (NERVE_GPU_DEVICES...).
  WorkloadOptions options;
  options.threads = 1;
  std::string why;
  return open_device_context(options, why) != nullptr ? std::string() : why;
}

double host_copy_gbps(std::size_t bytes) {
  std::vector<std::byte> from(bytes, std::byte{1}), to(bytes);
  double best = 0;
  for (int round = 0; round < 3; ++round) {
    Stopwatch watch;
    std::memcpy(to.data(), from.data(), bytes);
    const double seconds = watch.elapsed_ns() / 1e9;
    best = std::max(best, static_cast<double>(bytes) / seconds / 1e9);
  }
  return best;
}

}  // namespace nerve::bench
