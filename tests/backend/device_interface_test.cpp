// One behavioural suite over every available backend: the OpenCL backend (when the machine has an
// OpenCL device), the test plugin's simulated devices (loaded from NERVE_PLUGIN_PATH), the CUDA backend
// over its fake driver (its launchers compute on the host: the fake's device memory is host memory)
// and the runtime's own test device. Each runs the same kernels on device 1 and must give the same results
// and errors.
#include <cstdlib>

#include "nerve/cuda.hpp"
#include "nerve/opencl.hpp"

#include "cuda_support.hpp"
#include "opencl_support.hpp"

namespace nerve::testing {
namespace {

constexpr const char* source = R"(
  __kernel void affine(__global float* x, float a, float b) {
    const size_t i = get_global_id(0);
    x[i] = a * x[i] + b;
  }
  __kernel void fill(__global float* x, float v) { x[get_global_id(0)] = v; })";
constexpr const char* broken_source = "__kernel void fails(__global float* x) { x[0] = not_declared; }";

Kernel make_affine() {
  Kernel affine("affine");
  const CpuKernel body = [](const KernelArgs& args) {
    for (float& each : args.span<float>(0)) each = args.value<float>(0) * each + args.value<float>(1);
  };
  affine.cpu(body);
  cuda::attach(affine, cpu_launcher(body));
  opencl::attach(affine, source, "affine");
  return affine;
}

Kernel make_fill() {
  Kernel fill("fill");
  const CpuKernel body = [](const KernelArgs& args) {
    for (float& each : args.span<float>(0)) each = args.value<float>(0);
  };
  fill.cpu(body);
  cuda::attach(fill, cpu_launcher(body));
  opencl::attach(fill, source, "fill");
  return fill;
}

Kernel make_failing() {
  Kernel failing("fails");
  failing.cpu([](const KernelArgs&) { throw std::runtime_error("not_declared"); });
  cuda::attach(failing, [](const KernelArgs&, int, void*) { throw std::runtime_error("not_declared"); });
  opencl::attach(failing, broken_source, "fails");
  return failing;
}

class DeviceInterface : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string& backend = GetParam();
    if (backend == "opencl") {
      NERVE_SKIP_WITHOUT_OPENCL();
      context = std::make_unique<Context>(opencl_settings(2));
    } else if (backend == "sim") {
      ::setenv("NERVE_PLUGIN_PATH", NERVE_TEST_PLUGIN_DIR, 1);
      Settings settings = make_settings(2);
      settings.set("gpu.devices", "sim0");
      context = std::make_unique<Context>(settings);
      ::unsetenv("NERVE_PLUGIN_PATH");
    } else if (backend == "cuda_fake") {
      fake_cuda = std::make_unique<FakeCuda>();
      context = std::make_unique<Context>(FakeCuda::settings(2));
    } else {
      context = std::make_unique<Context>(make_settings(2));
      context->impl()->add_test_device({});
    }
    ASSERT_GE(context->devices().size(), 2u);
  }
  void TearDown() override {
    if (!context) return;
    try {
      context->wait_all();
    } catch (const std::exception&) {  // a test's failed task
    }
    expect_no_leaks(*context);
  }
  std::unique_ptr<FakeCuda> fake_cuda;  // outlives the context
  std::unique_ptr<Context> context;
};

TEST_P(DeviceInterface, KernelsRunOnTheDeviceAndDataMovesBothWays) {
  const Kernel affine = make_affine();
  constexpr std::size_t n = 16 * 1024;
  Buffer<float> x(*context, std::vector<float>(n, 1.0f));
  context->submit(TaskOptions{.device = 1}, affine, read_write(x), value(2.0f), value(1.0f)).wait();
  EXPECT_EQ(x.to_vector(), std::vector<float>(n, 3.0f));
  // Slices (4 KiB apart) alternate between the device and the CPU workers, several times.
  for (int round = 0; round < 3; ++round) {
    for (std::size_t part = 0; part < 16; ++part) {
      context->spawn(TaskOptions{.device = static_cast<int>((part + round) % 2)}, affine,
                     read_write(x.slice(part * 1024, 1024)), value(1.0f), value(1.0f));
    }
  }
  context->wait_all();
  EXPECT_EQ(x.to_vector(), std::vector<float>(n, 6.0f));
  EXPECT_GT(context->stats().bytes_transferred, 0u);
}

TEST_P(DeviceInterface, AFailingKernelFailsItsTaskAndCancelsItsReaders) {
  const Kernel failing = make_failing(), affine = make_affine(), fill = make_fill();
  Buffer<float> x(*context, 1024);
  Task failed = context->submit(TaskOptions{.device = 1}, failing, write(x));
  Task reader = context->submit(TaskOptions{.device = 1}, affine, read_write(x), value(1.0f), value(0.0f));
  try {
    failed.wait();
    FAIL() << "the kernel fails on every backend";
  } catch (const std::exception& error) {  // the CPU body's own exception, or a nerve::Error
    EXPECT_NE(std::string(error.what()).find("not_declared"), std::string::npos) << error.what();
  }
  EXPECT_THROW(reader.wait(), TaskCancelled);
  // Writing the buffer again recovers it, on the device too.
  context->submit(TaskOptions{.device = 1}, fill, write(x), value(5.0f)).wait();
  EXPECT_EQ(x.to_vector(), std::vector<float>(1024, 5.0f));
}

INSTANTIATE_TEST_SUITE_P(Backends, DeviceInterface, ::testing::Values("opencl", "sim", "cuda_fake", "test"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace nerve::testing
