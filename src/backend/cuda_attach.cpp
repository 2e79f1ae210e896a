// cuda_attach.cpp — nerve::cuda::attach(), in every build (with or without the CUDA toolkit).
#include <memory>

#include <fmt/format.h>

#include "nerve/cuda.hpp"
#include "nerve/error.hpp"

#include "backend/cuda_launcher.hpp"

namespace nerve::cuda {

Kernel& attach(Kernel& kernel, Launcher launcher) {
  if (!launcher) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("kernel '{}': cuda::attach needs a launcher", kernel.name()));
  }
  return kernel.implement(DeviceKind::cuda, std::make_shared<detail::CudaLauncher>(std::move(launcher)));
}

}  // namespace nerve::cuda
