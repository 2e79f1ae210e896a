// sim_implementation.hpp — the sim plugin's own Kernel implementation, which a test attaches with
// Kernel::implement(kind, ...) for the kind the plugin's devices declare (SIM_PLUGIN_KIND, test by
// default). The plugin finds it with dynamic_cast, as a plugin must: what a kernel carries for its
// kind may be another backend's (nerve's OpenCL programs and CUDA launchers are not handed to it).
#pragma once

#include "nerve/kernel.hpp"

namespace sim {

struct Implementation final : nerve::KernelImplementation {
  explicit Implementation(void (*body)(const nerve::detail::KernelCall& call)) : run(body) {}
  void (*run)(const nerve::detail::KernelCall& call);
};

}  // namespace sim
