// C kernels in the design documents' launcher form on simulated CUDA devices: a kernel submitted to
// a CUDA device's index (or declared for NERVE_DEVICE_KIND_CUDA) is called on the device's launcher
// thread with the device index and a stream, finds device addresses with
// nerve_buffer_get_device_ptr(), and its task completes through the stream.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "nerve/nerve.h"

#include "cuda_support.hpp"

namespace nerve::testing {
namespace {

constexpr std::size_t elements = 4096;

// What the kernel saw, checked by the test (written on the launcher thread, read after the wait).
struct ScaleDesc {
  nerve_buffer_t* buffer;
  float factor;
  int device_seen;
  void* stream_seen;
  bool pointer_found;
};

// The fake device's memory is host memory: the "kernel" computes on the launcher thread.
void scale_launcher(void* raw, nerve_device_t device, nerve_stream_t stream) {
  auto& desc = *static_cast<ScaleDesc*>(raw);
  desc.device_seen = device;
  desc.stream_seen = stream;
  auto* data = static_cast<float*>(nerve_buffer_get_device_ptr(desc.buffer, device));
  desc.pointer_found = data != nullptr;
  if (data == nullptr) return;
  for (std::size_t i = 0; i < elements; ++i) data[i] *= desc.factor;
}

void failing_launcher(void* /*desc*/, nerve_device_t /*device*/, nerve_stream_t /*stream*/) {
  nerve_task_fail("launcher refused");
}

// A C context over FakeCuda's devices (two workers), configured through a YAML file as a C
// program would be.
class CContext {
 public:
  explicit CContext(const char* devices) {
    const auto directory = std::filesystem::temp_directory_path();
    path_ = directory / ("nerve-cuda-capi-" + std::to_string(getpid()) + ".yaml");
    std::ofstream(path_) << "parallel:\n  thread_pool_size: 2\ngpu:\n  devices: " << devices << "\n";
    nerve_context_config_t config = NERVE_CONTEXT_CONFIG_DEFAULT;
    config.config_file = path_.c_str();
    config.use_environment = 0;
    ctx_ = nerve_init_with_config(&config);
  }
  ~CContext() {
    if (ctx_ != nullptr) nerve_shutdown(ctx_);
    std::filesystem::remove(path_);
  }
  CContext(const CContext&) = delete;
  CContext& operator=(const CContext&) = delete;
  nerve_context_t* get() const { return ctx_; }

 private:
  std::filesystem::path path_;
  nerve_context_t* ctx_ = nullptr;
};

nerve_buffer_t* ones(nerve_context_t* ctx) {
  nerve_buffer_t* buffer = nerve_buffer_alloc(ctx, elements * sizeof(float), NERVE_DEVICE_ANY, 0);
  auto* host = static_cast<float*>(nerve_buffer_map(buffer, NERVE_MAP_WRITE));
  std::fill(host, host + elements, 1.0f);
  nerve_buffer_unmap(buffer);
  return buffer;
}

std::vector<float> contents(nerve_buffer_t* buffer) {
  const auto* host = static_cast<const float*>(nerve_buffer_map(buffer, NERVE_MAP_READ));
  std::vector<float> values(host, host + elements);
  nerve_buffer_unmap(buffer);
  return values;
}

nerve_status_t submit_scale(nerve_context_t* ctx, ScaleDesc& desc, nerve_device_t device, uint32_t kinds) {
  nerve_task_t* task = nerve_task_create(scale_launcher, &desc);
  nerve_task_add_access(task, desc.buffer, NERVE_ACCESS_READ_WRITE, 0, elements * sizeof(float));
  if (kinds != 0) EXPECT_EQ(nerve_task_set_device_kinds(task, kinds), NERVE_OK);
  return nerve_task_submit(ctx, task, device);
}

TEST(CudaCApi, AKernelSubmittedToACudaDeviceIsALauncherOnItsStream) {
  FakeCuda cuda(detail::cuda::FakeOptions{.devices = 1});
  CContext ctx("cuda-fake");
  ASSERT_NE(ctx.get(), nullptr) << nerve_last_error();
  ASSERT_EQ(nerve_context_get_device_count(ctx.get()), 2);
  nerve_buffer_t* buffer = ones(ctx.get());
  ScaleDesc desc{buffer, 3.0f, -1, nullptr, false};
  ASSERT_EQ(submit_scale(ctx.get(), desc, 1, 0), NERVE_OK) << nerve_last_error();
  ASSERT_EQ(nerve_wait_all(ctx.get()), NERVE_OK) << nerve_last_error();
  EXPECT_EQ(desc.device_seen, 1);
  EXPECT_NE(desc.stream_seen, nullptr) << "a CUDA stream";
  EXPECT_TRUE(desc.pointer_found);
  EXPECT_EQ(contents(buffer), std::vector<float>(elements, 3.0f)) << "computed on the device's copy";
  EXPECT_GE(cuda.driver->records("copy").size(), 2u) << "to the device and back";
  EXPECT_EQ(cuda.driver->calls("check_launch"), 1u) << "the launch is checked like a Kernel's";
  nerve_buffer_free(buffer);
}

TEST(CudaCApi, DeviceKindsDecideWhereAnyDevicePlacesTheKernel) {
  FakeCuda cuda(detail::cuda::FakeOptions{.devices = 1});
  CContext ctx("cuda-fake");
  ASSERT_NE(ctx.get(), nullptr) << nerve_last_error();
  nerve_buffer_t* buffer = ones(ctx.get());
  // Default kinds: the CPU workers only, with no stream.
  ScaleDesc on_cpu{buffer, 2.0f, -1, nullptr, false};
  ASSERT_EQ(submit_scale(ctx.get(), on_cpu, NERVE_DEVICE_ANY, 0), NERVE_OK);
  ASSERT_EQ(nerve_wait_all(ctx.get()), NERVE_OK) << nerve_last_error();
  EXPECT_EQ(on_cpu.device_seen, NERVE_DEVICE_CPU);
  EXPECT_EQ(on_cpu.stream_seen, nullptr);
  // CUDA only: a CUDA device, whatever the data's place.
  ScaleDesc on_gpu{buffer, 2.0f, -1, nullptr, false};
  ASSERT_EQ(submit_scale(ctx.get(), on_gpu, NERVE_DEVICE_ANY, NERVE_DEVICE_KIND_CUDA), NERVE_OK);
  ASSERT_EQ(nerve_wait_all(ctx.get()), NERVE_OK) << nerve_last_error();
  EXPECT_EQ(on_gpu.device_seen, 1);
  EXPECT_NE(on_gpu.stream_seen, nullptr);
  EXPECT_EQ(contents(buffer), std::vector<float>(elements, 4.0f));
  // CUDA only cannot be forced onto the CPU workers.
  ScaleDesc refused{buffer, 2.0f, -1, nullptr, false};
  EXPECT_EQ(submit_scale(ctx.get(), refused, NERVE_DEVICE_CPU, NERVE_DEVICE_KIND_CUDA),
            NERVE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(nerve_last_error()).find("CUDA devices only"), std::string::npos)
      << nerve_last_error();
  EXPECT_EQ(refused.device_seen, -1) << "never called";
  nerve_buffer_free(buffer);
}

TEST(CudaCApi, ALauncherThatFailsOrALaunchErrorFailsTheTask) {
  FakeCuda cuda(detail::cuda::FakeOptions{.devices = 1});
  CContext ctx("cuda-fake");
  ASSERT_NE(ctx.get(), nullptr) << nerve_last_error();
  nerve_buffer_t* buffer = ones(ctx.get());
  nerve_task_t* task = nerve_task_create(failing_launcher, nullptr);
  nerve_task_add_access(task, buffer, NERVE_ACCESS_READ_WRITE, 0, elements * sizeof(float));
  nerve_task_set_name(task, "refusing launcher");
  ASSERT_EQ(nerve_task_submit(ctx.get(), task, 1), NERVE_OK);
  EXPECT_EQ(nerve_wait_all(ctx.get()), NERVE_ERROR_TASK_FAILED);
  EXPECT_NE(std::string(nerve_last_error()).find("launcher refused"), std::string::npos)
      << nerve_last_error();

  nerve_buffer_free(buffer);  // its data is the failed task's: later readers would be cancelled
  buffer = ones(ctx.get());
  cuda.driver->fail_next_launch();
  ScaleDesc desc{buffer, 5.0f, -1, nullptr, false};
  ASSERT_EQ(submit_scale(ctx.get(), desc, 1, 0), NERVE_OK);
  EXPECT_EQ(nerve_wait_all(ctx.get()), NERVE_ERROR_TASK_FAILED);
  EXPECT_NE(std::string(nerve_last_error()).find("cudaErrorLaunchFailure"), std::string::npos)
      << nerve_last_error();
  nerve_buffer_free(buffer);
}

// Usability (BACKENDS.md review): the refusal says why there is no CUDA device, which the context
// knows (the backend's reason, as gpu.devices=cuda gives it).
TEST(CudaCApi, WithoutACudaDeviceTheRefusalSaysWhy) {
  if (cuda_device_reason().empty()) GTEST_SKIP() << "a real CUDA device is here and runs the kernel";
  FakeCuda cuda(FakeOptions{.devices = 0});
  CContext ctx("all");
  ASSERT_NE(ctx.get(), nullptr) << nerve_last_error();
  nerve_buffer_t* buffer = ones(ctx.get());
  ScaleDesc desc{buffer, 2.0f, -1, nullptr, false};
  EXPECT_EQ(submit_scale(ctx.get(), desc, NERVE_DEVICE_ANY, NERVE_DEVICE_KIND_CUDA),
            NERVE_ERROR_INVALID_ARGUMENT);
  const std::string message = nerve_last_error();
  EXPECT_NE(message.find("has no device of the built-in CUDA backend"), std::string::npos) << message;
  EXPECT_NE(message.find("the backend 'cuda-fake' found no device: " + cuda.backend->unavailable_reason()),
            std::string::npos)
      << message;
  nerve_buffer_free(buffer);
}

TEST(CudaCApi, WithoutACudaDeviceACudaOnlyKernelIsRefusedAtSubmit) {
  CContext ctx("none");
  ASSERT_NE(ctx.get(), nullptr) << nerve_last_error();
  nerve_buffer_t* buffer = ones(ctx.get());
  ScaleDesc desc{buffer, 2.0f, -1, nullptr, false};
  EXPECT_EQ(submit_scale(ctx.get(), desc, NERVE_DEVICE_ANY, NERVE_DEVICE_KIND_CUDA),
            NERVE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(nerve_last_error()).find("has no device of the built-in CUDA backend"),
            std::string::npos)
      << nerve_last_error();
  // Both kinds: the CPU workers run it.
  ASSERT_EQ(submit_scale(ctx.get(), desc, NERVE_DEVICE_ANY, NERVE_DEVICE_KIND_CPU | NERVE_DEVICE_KIND_CUDA),
            NERVE_OK);
  ASSERT_EQ(nerve_wait_all(ctx.get()), NERVE_OK);
  EXPECT_EQ(desc.device_seen, NERVE_DEVICE_CPU);
  EXPECT_EQ(contents(buffer), std::vector<float>(elements, 2.0f));
  nerve_task_t* task = nerve_task_create(scale_launcher, &desc);
  EXPECT_EQ(nerve_task_set_device_kinds(task, 0), NERVE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nerve_task_set_device_kinds(task, 0x4), NERVE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nerve_task_set_device_kinds(nullptr, NERVE_DEVICE_KIND_CPU), NERVE_ERROR_INVALID_ARGUMENT);
  nerve_task_destroy(task);
  nerve_buffer_free(buffer);
}

}  // namespace
}  // namespace nerve::testing
