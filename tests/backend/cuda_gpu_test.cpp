// The CUDA backend on real GPUs (skipped with "no CUDA device, skipped: <why>" where there is none, as
// in CI): data through pinned staging to the device and back, launches on streams, completion by flag
// and by event, both device pools, managed memory with prefetches and advice, reserved high-priority
// streams, peer copies between two GPUs. The launchers use CUDA runtime copies and memsets as their
// "kernels" (stream-ordered device work without nvcc in the test build).
#include <cstdlib>
#include <cstring>

#include <cuda_runtime.h>

#include "nerve/cuda.hpp"
#include "nerve/nerve.h"

#include "cuda_support.hpp"

namespace nerve::testing {
namespace {

Kernel make_copy() {  // y = x, on the device
  Kernel copy("copy");
  cuda::attach(copy, [](const KernelArgs& args, int, void* stream) {
    if (cudaMemcpyAsync(args.data(1), args.data(0), args.size_bytes(1), cudaMemcpyDeviceToDevice,
                        static_cast<cudaStream_t>(stream)) != cudaSuccess)
      throw std::runtime_error("cudaMemcpyAsync failed");
  });
  return copy;
}

Kernel make_fill() {  // every byte of x = value
  Kernel fill("fill");
  cuda::attach(fill, [](const KernelArgs& args, int, void* stream) {
    if (cudaMemsetAsync(args.data(0), args.value<int>(0), args.size_bytes(0),
                        static_cast<cudaStream_t>(stream)) != cudaSuccess)
      throw std::runtime_error("cudaMemsetAsync failed");
  });
  return fill;
}

Settings real_cuda(unsigned workers) {
  Settings settings = make_settings(workers);
  settings.set("gpu.devices", "cuda");
  return settings;
}

struct Environment {  // sets a variable for one test, restores it
  Environment(const char* name, const char* value) : name_(name) { ::setenv(name, value, 1); }
  ~Environment() { ::unsetenv(name_); }
  const char* name_;
};

void round_trip(Context& context) {
  const Kernel copy = make_copy(), fill = make_fill();
  constexpr std::size_t n = std::size_t{1} << 22;
  std::vector<float> data(n);
  for (std::size_t i = 0; i < n; ++i) data[i] = static_cast<float>(i % 9973);
  Buffer<float> x(context, std::span<const float>(data)), y(context, n);
  for (std::size_t part = 0; part < 16; ++part) {
    context.spawn(TaskOptions{.device = 1}, copy, read(x.slice(part * (n / 16), n / 16)),
                  write(y.slice(part * (n / 16), n / 16)));
  }
  context.wait_all();
  EXPECT_EQ(y.to_vector(), data);
  context.submit(TaskOptions{.device = 1}, fill, write(y), value(0)).wait();
  EXPECT_EQ(y.to_vector(), std::vector<float>(n, 0.0f));
  EXPECT_GE(context.impl()->devices[0]->counters().launches, 17u);
  EXPECT_EQ(context.impl()->devices[0]->counters().events_live, 0u);
}

TEST(CudaGpu, DataGoesThereAndBack) {
  NERVE_SKIP_WITHOUT_CUDA_DEVICE();
  Context context(real_cuda(2));
  round_trip(context);
}

TEST(CudaGpu, EventCompletionAndTheStreamOrderedPool) {
  NERVE_SKIP_WITHOUT_CUDA_DEVICE();
  Environment completion("NERVE_CUDA_COMPLETION", "event");
  Environment pool("NERVE_CUDA_POOL", "stream_ordered");
  Context context(real_cuda(2));
  round_trip(context);
}

TEST(CudaGpu, ManagedMemoryWithPrefetchesAndHints) {
  NERVE_SKIP_WITHOUT_CUDA_DEVICE();
  Settings settings = real_cuda(2);
  settings.set("gpu.unified_memory", "true");
  Context context(settings);
  round_trip(context);
}

TEST(CudaGpu, HighPriorityStreamsRunTasks) {
  NERVE_SKIP_WITHOUT_CUDA_DEVICE();
  Settings settings = real_cuda(2);
  settings.set("scheduler.gpu_stream_priorities", "1");
  Context context(settings);
  const Kernel fill = make_fill();
  Buffer<float> x(context, 1024);
  context.submit(TaskOptions{.device = 1, .priority = Priority::high}, fill, write(x), value(0)).wait();
  EXPECT_EQ(x.to_vector(), std::vector<float>(1024, 0.0f));
  EXPECT_EQ(context.impl()->devices[0]->counters().launches_per_queue.at(0), 1u) << "the reserved stream";
}

TEST(CudaGpu, PeerCopiesBetweenTwoGpus) {
  NERVE_SKIP_WITHOUT_CUDA_DEVICE();
  int count = 0;
  cudaGetDeviceCount(&count);
  if (count < 2) GTEST_SKIP() << "one CUDA device: no peer to copy to";
  Context context(real_cuda(2));
  const Kernel copy = make_copy();
  std::vector<float> data(1 << 20, 3.0f);
  Buffer<float> x(context, std::span<const float>(data)), y(context, data.size()), z(context, data.size());
  context.submit(TaskOptions{.device = 1}, copy, read(x), write(y));
  context.submit(TaskOptions{.device = 2}, copy, read(y), write(z)).wait();
  EXPECT_EQ(z.to_vector(), data);
  const auto counters = context.impl()->devices[1]->counters();
  EXPECT_EQ(counters.peer_copies + counters.staged_copies, 1u);
}

// The seed's C launcher form on a real GPU: a C kernel submitted to the CUDA device's index gets the
// device addresses and a stream, and enqueues a memset on it.
struct CFill {
  nerve_buffer_t* buffer;
  std::size_t bytes;
  bool enqueued;
};

void c_fill_launcher(void* raw, nerve_device_t device, nerve_stream_t stream) {
  auto& fill = *static_cast<CFill*>(raw);
  void* data = nerve_buffer_get_device_ptr(fill.buffer, device);
  fill.enqueued = data != nullptr && stream != nullptr &&
                  cudaMemsetAsync(data, 0, fill.bytes, static_cast<cudaStream_t>(stream)) == cudaSuccess;
  if (!fill.enqueued) nerve_task_fail("cudaMemsetAsync was not enqueued");
}

TEST(CudaGpu, CKernelsAreLaunchersOnTheDevicesStream) {
  NERVE_SKIP_WITHOUT_CUDA_DEVICE();
  const char* settings[] = {"gpu.devices=cuda", "parallel.thread_pool_size=2"};
  nerve_context_config_t config = NERVE_CONTEXT_CONFIG_DEFAULT;
  config.settings = settings;
  config.setting_count = 2;
  nerve_context_t* ctx = nerve_init_with_config(&config);
  ASSERT_NE(ctx, nullptr) << nerve_last_error();
  constexpr std::size_t n = std::size_t{1} << 20;
  nerve_buffer_t* buffer = nerve_buffer_alloc(ctx, n * sizeof(float), NERVE_DEVICE_ANY, 0);
  auto* host = static_cast<float*>(nerve_buffer_map(buffer, NERVE_MAP_WRITE));
  std::fill(host, host + n, 7.0f);
  nerve_buffer_unmap(buffer);
  CFill fill{buffer, n * sizeof(float), false};
  nerve_task_t* task = nerve_task_create(c_fill_launcher, &fill);
  nerve_task_add_access(task, buffer, NERVE_ACCESS_WRITE, 0, n * sizeof(float));
  ASSERT_EQ(nerve_task_submit(ctx, task, 1), NERVE_OK) << nerve_last_error();
  ASSERT_EQ(nerve_wait_all(ctx), NERVE_OK) << nerve_last_error();
  EXPECT_TRUE(fill.enqueued);
  const auto* result = static_cast<const float*>(nerve_buffer_map(buffer, NERVE_MAP_READ));
  EXPECT_EQ(std::vector<float>(result, result + n), std::vector<float>(n, 0.0f));
  nerve_buffer_unmap(buffer);
  nerve_buffer_free(buffer);
  nerve_shutdown(ctx);
}

}  // namespace
}  // namespace nerve::testing
