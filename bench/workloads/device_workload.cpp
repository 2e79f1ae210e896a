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
  // gpu.devices chosen anywhere (--config's file, the environment, the API) is the run's choice: only
  // left at its default is it made `opencl` here.
  bool chosen = false;
  try {
    chosen = nerve::Config::load(settings).origin("gpu.devices").source != nerve::ConfigSource::default_value;
  } catch (const nerve::ConfigError&) {  // the context below reports it
  }
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

std::string needs_opencl_device(const nerve::Settings& settings) {
  // The same discovery the workloads make, under the run's settings.
  WorkloadOptions options;
  options.threads = 1;
  options.settings = settings;
  options.settings.set("perf.trace", "");  // a look, not a run: the run's first context keeps the trace file
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
