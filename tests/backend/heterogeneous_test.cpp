// One graph on CPU workers and the OpenCL device together: kernels with both implementations, tasks
// placed on either (or left to nerve), the memory layer moving the data between them; results equal
// the sequential reference. Skips when the machine has no OpenCL device.
#include <atomic>
#include <random>

#include "nerve/opencl.hpp"

#include "opencl_support.hpp"

namespace nerve::testing {
namespace {

constexpr const char* source = R"(
  __kernel void scale(__global float* x, float factor) {
    const size_t i = get_global_id(0);
    x[i] *= factor;
  }
  __kernel void accumulate(__global const float* from, __global float* into) {
    const size_t i = get_global_id(0);
    into[i] += from[i];
  }
  __kernel void add(__global const float* a, __global const float* b, __global float* c) {
    const size_t i = get_global_id(0);
    c[i] = a[i] + b[i];
  })";

std::atomic<int> cpu_calls{0};

Kernel both(const char* name, CpuKernel body) {
  Kernel kernel(name);
  kernel.cpu([body = std::move(body)](const KernelArgs& args) {
    cpu_calls.fetch_add(1, std::memory_order_relaxed);
    body(args);
  });
  opencl::attach(kernel, source, name);
  return kernel;
}

Kernel counted_scale() {
  return both("scale", [](const KernelArgs& args) {
    for (float& each : args.span<float>(0)) each *= args.value<float>(0);
  });
}
Kernel counted_accumulate() {
  return both("accumulate", [](const KernelArgs& args) {
    const auto from = args.span<const float>(0);
    const auto into = args.span<float>(1);
    for (std::size_t i = 0; i < into.size(); ++i) into[i] += from[i];
  });
}
Kernel counted_add() {
  return both("add", [](const KernelArgs& args) {
    const auto a = args.span<const float>(0);
    const auto b = args.span<const float>(1);
    const auto c = args.span<float>(2);
    for (std::size_t i = 0; i < c.size(); ++i) c[i] = a[i] + b[i];
  });
}

class HeterogeneousTest : public ::testing::TestWithParam<unsigned> {
 protected:
  void SetUp() override {
    NERVE_SKIP_WITHOUT_OPENCL();
    context = std::make_unique<Context>(opencl_settings(GetParam()));
  }
  void TearDown() override {
    if (!context) return;
    context->wait_all();
    expect_no_leaks(*context);
  }
  std::unique_ptr<Context> context;
};

// The vector-add example: chunks alternate between the CPU workers and the device.
TEST_P(HeterogeneousTest, VectorAddChunksRunOnBothKindsOfDevice) {
  const Kernel add = counted_add();
  constexpr std::size_t n = 1 << 18, chunk = 1 << 14;
  std::vector<float> a(n), b(n);
  for (std::size_t i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i % 977);
    b[i] = static_cast<float>(i % 13);
  }
  {
    Buffer<float> x(*context, a), y(*context, b), z(*context, n);
    const int cpu_before = cpu_calls.load();
    for (std::size_t first = 0, index = 0; first < n; first += chunk, ++index) {
      context->spawn(TaskOptions{.device = static_cast<int>(index % 2)}, add, read(x.slice(first, chunk)),
                     read(y.slice(first, chunk)), write(z.slice(first, chunk)));
    }
    context->wait_all();
    const auto result = z.to_vector();
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(result[i], a[i] + b[i]) << i;
    EXPECT_EQ(cpu_calls.load() - cpu_before, static_cast<int>(n / chunk / 2));
    EXPECT_EQ(context->impl()->devices[0]->counters().launches, n / chunk / 2);
  }
}

// Random graphs over slices of a few buffers, each task on the CPU workers, the device, or where
// nerve chooses; every value stays an exactly representable float, so results must match exactly.
TEST_P(HeterogeneousTest, RandomGraphsMatchTheSequentialReference) {
  const Kernel scale = counted_scale(), accumulate = counted_accumulate();
  constexpr std::size_t buffers = 4, parts = 4, part = 1024;  // 4 KiB slices: aligned on any device
  std::mt19937 random(1234 + GetParam());
  for (int graph = 0; graph < 3; ++graph) {
    std::vector<std::vector<float>> reference(buffers, std::vector<float>(parts * part));
    std::vector<Buffer<float>> data;
    for (std::size_t b = 0; b < buffers; ++b) {
      for (std::size_t i = 0; i < parts * part; ++i) reference[b][i] = static_cast<float>((i + b) % 7);
      data.emplace_back(*context, reference[b]);
    }
    for (int step = 0; step < 120; ++step) {
      const int device = static_cast<int>(random() % 3) - 1;  // -1: nerve chooses
      const std::size_t into = random() % buffers, into_part = random() % parts;
      auto& target = reference[into];
      if (random() % 2 == 0) {
        const float factor = random() % 2 == 0 ? 2.0f : 0.5f;
        for (std::size_t i = 0; i < part; ++i) target[into_part * part + i] *= factor;
        context->spawn(TaskOptions{.device = device}, scale,
                       read_write(data[into].slice(into_part * part, part)), value(factor));
      } else {
        const std::size_t from = (into + 1 + random() % (buffers - 1)) % buffers,
                          from_part = random() % parts;
        for (std::size_t i = 0; i < part; ++i)
          target[into_part * part + i] += reference[from][from_part * part + i];
        context->spawn(TaskOptions{.device = device}, accumulate,
                       read(data[from].slice(from_part * part, part)),
                       read_write(data[into].slice(into_part * part, part)));
      }
      if (step % 40 == 39) {  // the host reads in the middle of the graph too
        const std::size_t b = random() % buffers;
        ASSERT_EQ(data[b].to_vector(), reference[b]) << "graph " << graph << " step " << step;
      }
    }
    context->wait_all();
    for (std::size_t b = 0; b < buffers; ++b)
      ASSERT_EQ(data[b].to_vector(), reference[b]) << "graph " << graph;
  }
  EXPECT_GT(context->impl()->devices[0]->counters().launches, 0u);
  EXPECT_GT(context->stats().bytes_transferred, 0u);
}

INSTANTIATE_TEST_SUITE_P(Workers, HeterogeneousTest, ::testing::Values(1u, 2u, 4u),
                         [](const auto& info) { return std::to_string(info.param) + "_workers"; });

}  // namespace
}  // namespace nerve::testing
