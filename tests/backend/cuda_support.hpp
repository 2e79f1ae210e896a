// cuda_support.hpp — contexts with simulated CUDA devices (FakeDriver), and the real CUDA runtime's
// device count for tests that need a GPU.
//
// FakeCuda registers a CUDA backend named "cuda-fake" over a FakeDriver for its lifetime; settings()
// selects its devices. The fake's device memory is host memory, so a CUDA launcher that computes with
// the CPU on args.data() stands in for a kernel (cpu_launcher()).
// NERVE_SKIP_WITHOUT_CUDA_DEVICE() skips (GTEST_SKIP) with the runtime's reason when the machine has
// no usable CUDA device, or nerve was built without the toolkit.
#pragma once

#include <memory>
#include <string>

#include "nerve/cuda.hpp"

#include "backend/cuda/backend.hpp"
#include "backend/cuda/fake_driver.hpp"
#include "backend/registry.hpp"
#include "runtime/context_impl.hpp"
#include "support/runtime_fixture.hpp"

namespace nerve::testing {

class FakeCuda {
 public:
  explicit FakeCuda(detail::cuda::FakeOptions options = {})
      : driver(std::make_shared<detail::cuda::FakeDriver>(std::move(options))),
        backend(detail::cuda::make_backend(driver, "cuda-fake")) {
    detail::register_backend(backend);
  }
  ~FakeCuda() { detail::unregister_backend(backend.get()); }
  FakeCuda(const FakeCuda&) = delete;
  FakeCuda& operator=(const FakeCuda&) = delete;

  static Settings settings(unsigned workers) {
    Settings settings = make_settings(workers);
    settings.set("gpu.devices", "cuda-fake");
    return settings;
  }

  const std::shared_ptr<detail::cuda::FakeDriver> driver;
  const std::shared_ptr<detail::Backend> backend;
};

// cpu_launcher(): a CUDA implementation that runs `body` on the host (fake devices only).
inline cuda::Launcher cpu_launcher(CpuKernel body) {
  return [body = std::move(body)](const KernelArgs& args, int, void*) { body(args); };
}

// cuda_device_reason(): "" when the CUDA runtime sees a device, else why not.
inline std::string cuda_device_reason() {
#if NERVE_HAVE_CUDA
  static const std::string reason = [] {
    std::string why;
    if (detail::cuda::make_cudart_driver()->device_count(why) > 0) return std::string{};
    return why;
  }();
  return reason;
#else
  return "nerve was built without the CUDA toolkit";
#endif
}

#define NERVE_SKIP_WITHOUT_CUDA_DEVICE()                                              \
  do {                                                                                \
    if (const std::string why = ::nerve::testing::cuda_device_reason(); !why.empty()) \
      GTEST_SKIP() << "no CUDA device, skipped: " << why;                             \
  } while (false)

}  // namespace nerve::testing
