// Kernels: one implementation per device kind, arguments checked, placement limited to devices
// that implement the kernel.
#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>

#include <gmock/gmock.h>

#include "nerve/opencl.hpp"

#include "memory/buffer_state.hpp"
#include "runtime_test.hpp"

namespace nerve::testing {
namespace {

Kernel make_axpy() {
  Kernel axpy("axpy");
  axpy.cpu([](const KernelArgs& args) {
    auto x = args.span<const float>(0);
    auto y = args.span<float>(1);
    const float a = args.value<float>(0);
    for (std::size_t i = 0; i < y.size(); ++i) y[i] += a * x[i];
  });
  return axpy;
}

using KernelTest = RuntimeTest;

TEST_P(KernelTest, CpuImplementationGetsAccessesAndValues) {
  const Kernel axpy = make_axpy();
  Buffer<float> x(*context, std::vector<float>(100, 2.0f));
  Buffer<float> y(*context, std::vector<float>(100, 1.0f));
  context->submit(axpy, read(x), read_write(y), value(3.0f)).wait();
  context->spawn(axpy, read(x.slice(0, 10)), read_write(y.slice(0, 10)), value(1.0f));
  const auto result = y.to_vector();
  for (std::size_t i = 0; i < 100; ++i) ASSERT_FLOAT_EQ(result[i], i < 10 ? 9.0f : 7.0f) << i;
}

TEST_P(KernelTest, ArgumentMisuseFailsTheTaskWithAClearMessage) {
  Kernel writes_a_read_only("writes_a_read_only");
  writes_a_read_only.cpu([](const KernelArgs& args) { (void)args.span<float>(0); });
  Kernel wrong_value("wrong_value");
  wrong_value.cpu([](const KernelArgs& args) { (void)args.value<double>(0); });
  Buffer<float> data(*context, 4);
  try {
    context->submit(writes_a_read_only, read(data)).wait();
    FAIL();
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("writes_a_read_only': access 0 is read-only"), std::string::npos)
        << error.what();
  }
  try {
    context->submit(wrong_value, read(data), value(1)).wait();
    FAIL();
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("value 0 has 4 bytes, not 8"), std::string::npos)
        << error.what();
  }
  Kernel misaligned("misaligned");
  misaligned.cpu([](const KernelArgs& args) { (void)args.span<const int>(0); });
  Buffer<char> bytes(*context, 64);
  try {
    context->submit(misaligned, read(bytes.slice(1, 8))).wait();
    FAIL() << "an int span at byte 1";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(),
                ::testing::HasSubstr("access 0 starts at an address that is not 4-byte aligned"));
  }
  EXPECT_NO_THROW(context->wait_all()) << "the failures were reported by their wait()";
}

// Groups and pools take TaskOptions for Kernel calls (and groups for plain callables) as Context
// does: a device the context lacks is refused, `after` orders the call.
TEST_P(KernelTest, GroupsAndPoolsTakeTaskOptionsForKernelCalls) {
  const Kernel axpy = make_axpy();
  Buffer<float> x(*context, std::vector<float>(8, 1.0f));
  Buffer<float> y(*context, std::vector<float>(8, 0.0f));
  const TaskOptions nowhere{.device = 5};
  TaskGroup group(*context);
  TaskPool pool(*context);
  EXPECT_THROW(group.spawn(nowhere, axpy, read(x), read_write(y), value(1.0f)), Error);
  EXPECT_THROW((void)group.submit(nowhere, axpy, read(x), read_write(y), value(1.0f)), Error);
  EXPECT_THROW(group.spawn(nowhere, [] {}), Error);
  EXPECT_THROW(pool.add(nowhere, axpy, read(x), read_write(y), value(1.0f)), Error);
  std::atomic<bool> first_done{false};
  Task first = group.submit(TaskOptions{.name = "first"}, [&first_done] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    first_done = true;
  });
  std::atomic<bool> ordered{false};
  Kernel check("check");
  check.cpu([&](const KernelArgs&) { ordered = first_done.load(); });
  group.spawn(TaskOptions{.name = "after first", .after = {first}}, check);
  group.spawn(TaskOptions{.device = 0}, axpy, read(x), read_write(y), value(2.0f));
  pool.add(TaskOptions{.name = "pooled", .device = 0}, axpy, read(x), read_write(y.slice(0, 4)), value(1.0f));
  group.wait();
  pool.wait_all();
  EXPECT_TRUE(ordered.load()) << "`after` ordered the kernel call behind `first`";
  EXPECT_EQ(y.to_vector(), (std::vector<float>{3, 3, 3, 3, 2, 2, 2, 2}));
}

TEST_P(KernelTest, KernelWithoutAnImplementationForAnyDeviceIsAnErrorAtSubmit) {
  struct FakeProgram : KernelImplementation {};
  Kernel only_opencl("only_opencl");
  only_opencl.implement(DeviceKind::opencl, std::make_shared<FakeProgram>());
  EXPECT_TRUE(only_opencl.implements(DeviceKind::opencl));
  EXPECT_FALSE(only_opencl.implements(DeviceKind::cpu));
  Buffer<float> data(*context, 4);
  try {
    context->spawn(only_opencl, write(data));
    FAIL() << "this context has CPU workers only";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(error.what()).find("implements none of this context's devices (cpu)"),
              std::string::npos)
        << error.what();
  }
  EXPECT_THROW(Kernel(""), Error) << "kernels are named";
  EXPECT_THROW(Kernel("k").implement(DeviceKind::cpu, nullptr), Error);
}

// Regression (BACKENDS.md review D3): implement(kind, nullptr) was accepted and did nothing, so the
// mistake surfaced only at submit, as "implements none of this context's devices". It is refused at
// once, like an empty opencl::attach source or cuda::attach launcher, naming the kernel and kind.
TEST_P(KernelTest, ANullImplementationIsRefused) {
  Kernel kernel("null_impl");
  for (const DeviceKind kind : {DeviceKind::opencl, DeviceKind::cuda, DeviceKind::test}) {
    try {
      kernel.implement(kind, nullptr);
      FAIL() << name(kind) << ": a null implementation was accepted";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::invalid_argument);
      const std::string message = error.what();
      EXPECT_NE(message.find("kernel 'null_impl'"), std::string::npos) << message;
      EXPECT_NE(message.find(std::string("for ") + name(kind) + " devices"), std::string::npos) << message;
    }
    EXPECT_FALSE(kernel.implements(kind));
  }
}

// A moved-from Kernel is empty: using it is an error that says so (it crashed inside the library:
// submit, cpu(), implements(), name() all dereferenced its missing state), and assigning another
// Kernel makes it usable again.
TEST_P(KernelTest, AMovedFromKernelIsEmptyAndItsUseAnError) {
  Kernel add("add_one_moved");
  add.cpu([](const KernelArgs& args) {
    for (float& v : args.span<float>(0)) v += 1.0f;
  });
  Kernel moved = std::move(add);
  Buffer<float> data(*context, std::vector<float>(4, 1.0f));
  const auto expect_empty_error = [](auto&& use) {
    try {
      use();
      ADD_FAILURE() << "an empty kernel was used";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::invalid_argument);
      EXPECT_THAT(error.what(), ::testing::HasSubstr("empty Kernel")) << error.what();
    }
  };
  expect_empty_error([&] { context->spawn(add, read_write(data)); });
  expect_empty_error([&] { add.cpu([](const KernelArgs&) {}); });
  expect_empty_error([&] { opencl::attach(add, "__kernel void k(__global float* x) {}", "k"); });
  EXPECT_EQ(add.name(), "");
  EXPECT_FALSE(add.implements(DeviceKind::cpu));
  EXPECT_EQ(add.implementation(DeviceKind::opencl), nullptr);
  context->spawn(moved, read_write(data));
  add = moved;
  context->spawn(add, read_write(data));
  EXPECT_EQ(data.to_vector(), std::vector<float>(4, 3.0f));
}

// A Kernel is configured before first use, then immutable: configuring it after a call was submitted
// (through any copy) is an error naming the kernel, and the kernel keeps running what it ran. Both
// used to be accepted silently, and later calls ran the new body under the same name (and model).
TEST_P(KernelTest, ConfiguringAKernelAfterItsFirstSubmitIsRefused) {
  Kernel add("add_one");
  add.cpu([](const KernelArgs& args) {
    for (float& v : args.span<float>(0)) v += 1.0f;
  });
  const Kernel copy = add;  // copies share the kernel: configuring either is configuring it
  Buffer<float> data(*context, std::vector<float>(8, 0.0f));
  context->submit(add, read_write(data)).wait();
  const auto refused = [](auto&& configure) {
    try {
      configure();
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::invalid_argument);
      return std::string(error.what());
    }
    ADD_FAILURE() << "configured after use";
    return std::string();
  };
  Kernel same = copy;
  EXPECT_THAT(refused([&] { same.cpu([](const KernelArgs&) {}); }),
              ::testing::AllOf(::testing::HasSubstr("kernel 'add_one' was already used"),
                               ::testing::HasSubstr("cpu()")));
  EXPECT_THAT(refused([&] { opencl::attach(add, "__kernel void f(__global float* x) {}", "f"); }),
              ::testing::AllOf(::testing::HasSubstr("kernel 'add_one' was already used"),
                               ::testing::HasSubstr("opencl")));
  struct FakeProgram : KernelImplementation {};
  EXPECT_THAT(refused([&] { add.implement(DeviceKind::cuda, std::make_shared<FakeProgram>()); }),
              ::testing::HasSubstr("kernel 'add_one' was already used"));
  EXPECT_FALSE(add.implements(DeviceKind::opencl)) << "a refused configuration changes nothing";
  EXPECT_FALSE(add.implements(DeviceKind::cuda));
  context->submit(copy, read_write(data)).wait();
  EXPECT_EQ(data.to_vector(), std::vector<float>(8, 2.0f)) << "still the first body";
  // A submit that was refused used the kernel too: what it saw must not change afterwards.
  Kernel refused_kernel("only_cuda");
  refused_kernel.implement(DeviceKind::cuda, std::make_shared<FakeProgram>());
  EXPECT_THROW(context->spawn(refused_kernel, read_write(data)), Error);
  EXPECT_THROW(refused_kernel.cpu([](const KernelArgs&) {}), Error);
}

// A configuration racing the kernel's first submit on another thread: either it came first and the
// call runs the new body, or the submit came first and the configuration throws, leaving the old
// body — never a change the call half sees (ThreadSanitizer checks the rest).
TEST_P(KernelTest, AConfigurationRacingTheFirstSubmitIsWholeOrRefused) {
  Buffer<int> data(*context, std::vector<int>(1, 0));
  for (int round = 0; round < 100; ++round) {
    Kernel kernel("raced");
    kernel.cpu([](const KernelArgs& args) { args.span<int>(0)[0] = 1; });
    std::atomic<bool> go{false};
    bool configured = false;
    const Kernel submitted = kernel;
    std::thread configurer([&] {
      while (!go.load(std::memory_order_acquire)) {
      }
      try {
        kernel.cpu([](const KernelArgs& args) { args.span<int>(0)[0] = 2; });
        configured = true;
      } catch (const Error& error) {
        EXPECT_EQ(error.code(), ErrorCode::invalid_argument);
      }
    });
    go.store(true, std::memory_order_release);
    Task task = context->submit(submitted, write(data));
    configurer.join();
    task.wait();
    ASSERT_EQ(data.to_vector()[0], configured ? 2 : 1) << "round " << round;
  }
}

INSTANTIATE_TEST_SUITE_P(Runtime, KernelTest, NERVE_RUNTIME_PARAMS, runtime_param_name);

TEST(KernelPlacement, KernelsRunOnlyWhereImplemented) {
  auto context = std::make_unique<Context>(make_settings(2));
  context->impl()->add_test_device({});
  const Kernel axpy = make_axpy();
  Buffer<float> x(*context, std::vector<float>(16, 1.0f));
  Buffer<float> y(*context, std::vector<float>(16, 0.0f));
  std::atomic<int> device_seen{-1};
  Kernel probe("probe");
  probe.cpu([&](const KernelArgs& args) { device_seen = args.device(); });
  context->submit(TaskOptions{.device = 1}, probe, read(x)).wait();
  EXPECT_EQ(device_seen.load(), 1) << "test devices run CPU implementations";
  context->submit(TaskOptions{.device = 1}, axpy, read(x), read_write(y), value(2.0f)).wait();
  EXPECT_EQ(y.to_vector(), std::vector<float>(16, 2.0f));

  struct FakeProgram : KernelImplementation {};
  Kernel gpu_only("gpu_only");
  gpu_only.implement(DeviceKind::cuda, std::make_shared<FakeProgram>());
  try {
    context->spawn(TaskOptions{.device = 0}, gpu_only, read(x));
    FAIL();
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("no implementation for device 0"), std::string::npos)
        << error.what();
  }
  context->wait_all();
}

// Regression: Kernel::implement(DeviceKind::test) was refused, though test is the default kind of
// plugin devices, which run that implementation. nerve's own simulated test devices run cpu() bodies
// only: a call with none is refused at submit, saying that the device does not run what it carries.
TEST(KernelPlacement, AnImplementationForTestIsAcceptedAndTestDevicesRunOnlyCpuBodies) {
  auto context = std::make_unique<Context>(make_settings(2));
  context->impl()->add_test_device({});
  struct PluginProgram : KernelImplementation {};
  Kernel plugin_only("plugin_only");
  ASSERT_NO_THROW(plugin_only.implement(DeviceKind::test, std::make_shared<PluginProgram>()));
  EXPECT_TRUE(plugin_only.implements(DeviceKind::test));
  Buffer<float> x(*context, std::vector<float>(16, 1.0f));
  for (const int device : {1, -1}) {
    try {
      context->spawn(TaskOptions{.device = device}, plugin_only, read(x));
      FAIL() << "device " << device << ": no device of this context runs it";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::invalid_argument);
      EXPECT_NE(
          std::string(error.what()).find("not one that device 1 ('test device 1', backend 'test') runs"),
          std::string::npos)
          << error.what();
    }
  }
  EXPECT_THROW(Kernel("k").implement(DeviceKind::cpu, std::make_shared<PluginProgram>()), Error);
  context->wait_all();
}

}  // namespace
}  // namespace nerve::testing
