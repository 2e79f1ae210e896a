// The OpenCL backend under driver faults that PoCL never produces on its own: an enqueue refused after
// an earlier command of the same copy was enqueued, and an event callback that cannot be registered.
// This binary is linked with -Wl,--wrap=clEnqueueReadBuffer,--wrap=clEnqueueWriteBuffer,
// --wrap=clSetEventCallback (tests/backend/CMakeLists.txt), so libnerve's calls to those functions
// reach the __wrap_ functions below. They pass every call through until a test arms a fault.
//
// Both cases use a device-to-device copy through host staging (two devices of one context,
// gpu.peer_access off): a read from the source into staging memory, then a write to the destination
// that waits for the read's event. The read is held back behind a user event, as a busy queue would
// hold it, and a helper thread releases it after a while. The copy must not end (its staging memory
// freed, its replicas unpinned, its task reported) before that read is over. The copy is 8 MiB, over
// the pinned staging piece size, so its staging memory is an ordinary heap allocation that
// AddressSanitizer watches.
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "nerve/opencl.hpp"

#include "backend/opencl/cl.hpp"
#include "opencl_support.hpp"

namespace {

enum class Fault { none, fail_staged_write, fail_callback };

// Shared between the test thread, nerve's threads (which call the wrappers) and the releaser.
struct Injection {
  std::atomic<Fault> fault{Fault::none};
  std::atomic<std::size_t> hold_bytes{0};        // the staged read's size: held back behind `gate`
  std::atomic<bool> hold_claimed{false};         // one read is held back per test
  std::atomic<cl_event> gate{nullptr};           // the user event the held read waits for
  std::atomic<bool> write_fault_pending{false};  // fail_staged_write: not yet injected
  std::atomic<cl_event> staged_write{nullptr};   // fail_callback: the event whose callback is refused
  std::atomic<bool> callback_fault_pending{false};
  std::atomic<bool> released{false};  // set just before the gate completes
};
Injection injection;

}  // namespace

extern "C" {
cl_int __real_clEnqueueReadBuffer(cl_command_queue, cl_mem, cl_bool, size_t, size_t, void*, cl_uint,
                                  const cl_event*, cl_event*);
cl_int __real_clEnqueueWriteBuffer(cl_command_queue, cl_mem, cl_bool, size_t, size_t, const void*, cl_uint,
                                   const cl_event*, cl_event*);
cl_int __real_clSetEventCallback(cl_event, cl_int, void(CL_CALLBACK*)(cl_event, cl_int, void*), void*);

cl_int __wrap_clEnqueueReadBuffer(cl_command_queue queue, cl_mem mem, cl_bool blocking, size_t offset,
                                  size_t bytes, void* data, cl_uint count, const cl_event* wait,
                                  cl_event* event) {
  if (injection.fault.load() != Fault::none && !blocking && count == 0 &&
      bytes == injection.hold_bytes.load() && !injection.hold_claimed.exchange(true)) {
    cl_context context = nullptr;
    cl_int status = clGetCommandQueueInfo(queue, CL_QUEUE_CONTEXT, sizeof context, &context, nullptr);
    cl_event gate = status == CL_SUCCESS ? clCreateUserEvent(context, &status) : nullptr;
    if (status != CL_SUCCESS) return status;
    status = __real_clEnqueueReadBuffer(queue, mem, blocking, offset, bytes, data, 1, &gate, event);
    injection.gate.store(gate);
    return status;
  }
  return __real_clEnqueueReadBuffer(queue, mem, blocking, offset, bytes, data, count, wait, event);
}

cl_int __wrap_clEnqueueWriteBuffer(cl_command_queue queue, cl_mem mem, cl_bool blocking, size_t offset,
                                   size_t bytes, const void* data, cl_uint count, const cl_event* wait,
                                   cl_event* event) {
  // The staged write is the only write that waits for an event.
  const bool staged = count == 1 && injection.gate.load() != nullptr;
  if (staged && injection.fault.load() == Fault::fail_staged_write &&
      injection.write_fault_pending.exchange(false))
    return CL_OUT_OF_RESOURCES;  // transient: the driver is short of something right now
  const cl_int status =
      __real_clEnqueueWriteBuffer(queue, mem, blocking, offset, bytes, data, count, wait, event);
  if (staged && status == CL_SUCCESS && event != nullptr && injection.fault.load() == Fault::fail_callback)
    injection.staged_write.store(*event);
  return status;
}

cl_int __wrap_clSetEventCallback(cl_event event, cl_int type,
                                 void(CL_CALLBACK* notify)(cl_event, cl_int, void*), void* user) {
  if (event != nullptr && event == injection.staged_write.load() &&
      injection.callback_fault_pending.exchange(false))
    return CL_OUT_OF_HOST_MEMORY;
  return __real_clSetEventCallback(event, type, notify, user);
}
}  // extern "C"

namespace nerve::testing {
namespace {

constexpr std::size_t copy_floats = (std::size_t{8} << 20) / sizeof(float);  // 8 MiB

class OpenclFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    NERVE_SKIP_WITHOUT_OPENCL();
    if (opencl_device_count() < 2)
      GTEST_SKIP() << "one OpenCL device (PoCL: set POCL_DEVICES=\"pthread pthread\")";
    private_cache.emplace("fault-test");
  }
  void TearDown() override {
    injection.fault.store(Fault::none);
    if (releaser.joinable()) releaser.join();
    if (cl_event gate = injection.gate.exchange(nullptr)) clReleaseEvent(gate);
    injection.hold_claimed.store(false);
    injection.staged_write.store(nullptr);
    injection.write_fault_pending.store(false);
    injection.callback_fault_pending.store(false);
    injection.released.store(false);
    private_cache.reset();
  }

  // arm(): the next staged read of copy_floats floats is held back; a thread releases it once it
  // has been held for a while (long enough for a copy that ends early to be seen ending early).
  void arm(Fault fault) {
    injection.hold_bytes.store(copy_floats * sizeof(float));
    injection.write_fault_pending.store(fault == Fault::fail_staged_write);
    injection.callback_fault_pending.store(fault == Fault::fail_callback);
    injection.fault.store(fault);
    releaser = std::thread([] {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      cl_event gate = nullptr;
      while ((gate = injection.gate.load()) == nullptr && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      if (gate == nullptr) return;  // never held: the test fails on its own expectations
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      injection.released.store(true);
      clSetUserEventStatus(gate, CL_COMPLETE);
    });
  }

  static Settings staged_two_devices() {
    Settings settings = opencl_settings(2);
    settings.set("gpu.peer_access", "false");  // device to device through host staging
    return settings;
  }

  static Kernel make_increment() {
    Kernel increment("increment");
    opencl::attach(increment, "__kernel void increment(__global float* x) { x[get_global_id(0)] += 1.0f; }",
                   "increment");
    return increment;
  }

  static void expect_idle_devices(const Context& ctx) {
    for (const auto& device : ctx.impl()->devices)
      EXPECT_EQ(device->counters().events_live, 0u) << "every driver event released";
  }

  // move_armed(): `x` (valid on device 1 only) goes to device 2 with `fault` armed on its staged
  // copy; the failure the task reported ("" if none), and whether the held read was released first.
  struct Moved {
    std::string failure;
    bool read_was_released;
  };
  Moved move_armed(Context& ctx, const Kernel& increment, Buffer<float>& x, Fault fault) {
    arm(fault);
    Task moved = ctx.submit(TaskOptions{.device = 2}, increment, read_write(x));  // device 1 -> 2
    std::string failure;
    try {
      moved.wait();
    } catch (const Error& error) {
      failure = error.what();
    }
    return {failure, injection.released.load()};
  }

  std::thread releaser;
  std::optional<PrivateProgramCache> private_cache;
};

// Regression: when the staged write failed to enqueue after the read was enqueued, the copy failed at
// once and its staging memory was freed while the read still wrote into it (heap-use-after-free). The
// copy now fails behind its read.
TEST_F(OpenclFaultTest, StagedWriteThatFailsToEnqueueFailsTheCopyOnlyAfterItsRead) {
  Context ctx(staged_two_devices());
  {
    const Kernel increment = make_increment();
    Buffer<float> x(ctx, std::vector<float>(copy_floats, 0.0f));
    ctx.submit(TaskOptions{.device = 1}, increment, read_write(x)).wait();  // valid on device 1 only
    const auto [failure, read_was_released] = move_armed(ctx, increment, x, Fault::fail_staged_write);
    EXPECT_NE(failure.find("CL_OUT_OF_RESOURCES"), std::string::npos)
        << "the staged write failed: " << failure;
    EXPECT_TRUE(read_was_released) << "the copy failed while its read into the staging memory was pending";
    releaser.join();
  }
  try {
    ctx.wait_all();
  } catch (const Error&) {  // the failure above, already seen
  }
  expect_no_leaks(ctx);
  expect_idle_devices(ctx);
}

// Regression: when clSetEventCallback failed, the operation was completed at once while its command
// was still pending (a copy's staging memory freed under the transfer, a launch reported over before
// it ran). The registering thread now waits for the command, and the copy ends with its status.
TEST_F(OpenclFaultTest, CallbackThatCannotBeRegisteredEndsTheCopyOnlyWhenItsCommandIsOver) {
  Context ctx(staged_two_devices());
  {
    const Kernel increment = make_increment();
    Buffer<float> x(ctx, std::vector<float>(copy_floats, 0.0f));
    ctx.submit(TaskOptions{.device = 1}, increment, read_write(x)).wait();
    const auto [failure, read_was_released] = move_armed(ctx, increment, x, Fault::fail_callback);
    EXPECT_FALSE(injection.callback_fault_pending.load()) << "the fault was not injected";
    EXPECT_TRUE(read_was_released) << "the copy ended while its staged read was pending";
    EXPECT_EQ(failure, "") << "the command itself succeeded: so does the copy";
    releaser.join();
    if (failure.empty())
      EXPECT_EQ(x.to_vector(), std::vector<float>(copy_floats, 2.0f)) << "device 1, then 2";
  }
  ctx.wait_all();
  expect_no_leaks(ctx);
  expect_idle_devices(ctx);
}

}  // namespace
}  // namespace nerve::testing
