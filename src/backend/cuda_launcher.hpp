// cuda_launcher.hpp — the CUDA implementation a Kernel carries (nerve::cuda::attach).
//
// Plain data (no CUDA types), so attach() works in builds without the CUDA toolkit.
#pragma once

#include "nerve/cuda.hpp"

namespace nerve::detail {

class CudaLauncher final : public KernelImplementation {
 public:
  explicit CudaLauncher(nerve::cuda::Launcher body) : launcher(std::move(body)) {}
  const nerve::cuda::Launcher launcher;
};

}  // namespace nerve::detail
