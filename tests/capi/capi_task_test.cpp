// C API: tasks — inferred dependencies (whole buffers and byte ranges), failure propagation,
// compute-intensive placement, devices, and argument errors.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <stdexcept>

#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "capi_test.hpp"

namespace nerve::testing {
namespace {

using CapiTaskTest = CapiTest;

// A kernel over one int buffer that adds `delta` to every element after a pause (so that a task
// started too early would be caught).
struct AddDesc {
  nerve_buffer_t* buffer;
  std::size_t count;
  int delta;
};

void add_kernel(void* desc, nerve_device_t device, nerve_stream_t stream) {
  const auto& d = *static_cast<AddDesc*>(desc);
  EXPECT_EQ(device, NERVE_DEVICE_CPU);
  EXPECT_EQ(stream, nullptr);
  auto* data = static_cast<int*>(nerve_buffer_get_device_ptr(d.buffer, device));
  if (data == nullptr) return nerve_task_fail(nerve_last_error());
  std::this_thread::sleep_for(std::chrono::microseconds(200));
  for (std::size_t i = 0; i < d.count; ++i) data[i] += d.delta;
}

TEST_P(CapiTaskTest, ChainThroughMemoryDepsRunsInSubmissionOrder) {
  constexpr std::size_t count = 16;
  nerve_buffer_t* buffer = alloc(count * sizeof(int));
  std::memset(MappedC<int>(buffer, NERVE_MAP_WRITE).data(), 0, count * sizeof(int));
  // Alternating += 1 and *= 2 only gives the expected value in submission order.
  struct Step {
    nerve_buffer_t* buffer;
    bool doubles;
  };
  std::vector<Step> steps;
  for (int i = 0; i < 20; ++i) steps.push_back({buffer, i % 2 == 1});
  for (Step& step : steps) {
    ASSERT_EQ(submit(ctx.get(),
                     +[](void* desc, nerve_device_t device, nerve_stream_t) {
                       auto& s = *static_cast<Step*>(desc);
                       auto* data = static_cast<int*>(nerve_buffer_get_device_ptr(s.buffer, device));
                       for (std::size_t i = 0; i < count; ++i)
                         data[i] = s.doubles ? data[i] * 2 : data[i] + 1;
                     },
                     &step, {buffer}),
              NERVE_OK);
  }
  int expected = 0;
  for (const Step& step : steps) expected = step.doubles ? expected * 2 : expected + 1;
  {
    MappedC<const int> mapped(buffer, NERVE_MAP_READ);
    for (std::size_t i = 0; i < count; ++i) EXPECT_EQ(mapped[i], expected);
  }
  free_buffer(buffer);
}

// Read-after-write through allocation modes: a MEM_FLAG_READ buffer is read by the consumer, a
// MEM_FLAG_WRITE one written, so the consumer waits for the producer of its input only.
TEST_P(CapiTaskTest, ReadAfterWriteThroughAllocationModes) {
  constexpr std::size_t count = 1000;
  nerve_buffer_t* x = alloc(count * sizeof(int), MEM_FLAG_READ);
  nerve_buffer_t* y = alloc(count * sizeof(int), MEM_FLAG_WRITE);
  struct Desc {
    nerve_buffer_t* x;
    nerve_buffer_t* y;
  } desc{x, y};
  // The producer writes x: declared with add_access, since x's allocation mode is read.
  nerve_task_t* producer = nerve_task_create(
      +[](void* d, nerve_device_t device, nerve_stream_t) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        auto* data = static_cast<int*>(nerve_buffer_get_device_ptr(static_cast<Desc*>(d)->x, device));
        for (std::size_t i = 0; i < count; ++i) data[i] = static_cast<int>(i);
      },
      &desc);
  ASSERT_EQ(nerve_task_add_access(producer, x, NERVE_ACCESS_WRITE, 0, count * sizeof(int)), NERVE_OK);
  ASSERT_EQ(nerve_task_submit(ctx.get(), producer, NERVE_DEVICE_CPU), NERVE_OK);
  ASSERT_EQ(
      submit(ctx.get(),
             +[](void* d, nerve_device_t device, nerve_stream_t) {
               const auto* in =
                   static_cast<const int*>(nerve_buffer_get_device_ptr(static_cast<Desc*>(d)->x, device));
               auto* out = static_cast<int*>(nerve_buffer_get_device_ptr(static_cast<Desc*>(d)->y, device));
               for (std::size_t i = 0; i < count; ++i) out[i] = 2 * in[i];
             },
             &desc, {x, y}),
      NERVE_OK);
  {
    MappedC<const int> mapped(y, NERVE_MAP_READ);
    for (std::size_t i = 0; i < count; ++i) EXPECT_EQ(mapped[i], 2 * static_cast<int>(i)) << i;
  }
  free_buffer(x);
  free_buffer(y);
}

// Tasks on disjoint byte ranges of one buffer do not depend on each other: with two or more workers,
// a task on [0, n/2) can wait for a task on [n/2, n) submitted after it.
TEST_P(CapiTaskTest, DisjointRangesDoNotDepend) {
  if (workers() < 2) GTEST_SKIP() << "needs two tasks running at once";
  constexpr std::size_t half = 64;
  nerve_buffer_t* buffer = alloc(2 * half);
  static std::atomic<bool> second_ran{false};
  static std::atomic<bool> first_saw_second{false};
  second_ran = false;
  first_saw_second = false;
  nerve_task_t* first = nerve_task_create(
      +[](void*, nerve_device_t, nerve_stream_t) {
        first_saw_second = wait_until([] { return second_ran.load(); });
      },
      nullptr);
  ASSERT_EQ(nerve_task_add_access(first, buffer, NERVE_ACCESS_WRITE, 0, half), NERVE_OK);
  ASSERT_EQ(nerve_task_submit(ctx.get(), first, NERVE_DEVICE_ANY), NERVE_OK);
  nerve_task_t* second = nerve_task_create(
      +[](void*, nerve_device_t, nerve_stream_t) { second_ran = true; }, nullptr);
  ASSERT_EQ(nerve_task_add_access(second, buffer, NERVE_ACCESS_WRITE, half, half), NERVE_OK);
  ASSERT_EQ(nerve_task_submit(ctx.get(), second, NERVE_DEVICE_ANY), NERVE_OK);
  ASSERT_EQ(nerve_wait_all(ctx.get()), NERVE_OK);
  EXPECT_TRUE(first_saw_second.load()) << "the task on the other half waited for the first";
  free_buffer(buffer);
}

// Writers of slices, then a reader of the whole buffer: the reader sees every slice.
TEST_P(CapiTaskTest, SlicesThenWholeBufferReader) {
  constexpr std::size_t slices = 16;
  constexpr std::size_t per_slice = 256;
  nerve_buffer_t* data = alloc(slices * per_slice * sizeof(int));
  nerve_buffer_t* sum = alloc(sizeof(long));
  struct SliceDesc {
    nerve_buffer_t* buffer;
    std::size_t slice;
  };
  std::vector<SliceDesc> descs(slices);
  for (std::size_t s = 0; s < slices; ++s) {
    descs[s] = {data, s};
    nerve_task_t* task = nerve_task_create(
        +[](void* d, nerve_device_t device, nerve_stream_t) {
          const auto& desc = *static_cast<SliceDesc*>(d);
          auto* base = static_cast<int*>(nerve_buffer_get_device_ptr(desc.buffer, device));
          std::this_thread::sleep_for(std::chrono::microseconds(100));
          for (std::size_t i = 0; i < per_slice; ++i)
            base[desc.slice * per_slice + i] = static_cast<int>(desc.slice);
        },
        &descs[s]);
    ASSERT_EQ(nerve_task_add_access(task, data, NERVE_ACCESS_WRITE, s * per_slice * sizeof(int),
                                    per_slice * sizeof(int)),
              NERVE_OK);
    ASSERT_EQ(nerve_task_submit(ctx.get(), task, NERVE_DEVICE_ANY), NERVE_OK);
  }
  struct SumDesc {
    nerve_buffer_t* data;
    nerve_buffer_t* sum;
  } sum_desc{data, sum};
  nerve_task_t* reader = nerve_task_create(
      +[](void* d, nerve_device_t device, nerve_stream_t) {
        const auto& desc = *static_cast<SumDesc*>(d);
        const auto* values = static_cast<const int*>(nerve_buffer_get_device_ptr(desc.data, device));
        *static_cast<long*>(nerve_buffer_get_device_ptr(desc.sum, device)) =
            std::accumulate(values, values + slices * per_slice, 0L);
      },
      &sum_desc);
  ASSERT_EQ(nerve_task_add_access(reader, data, NERVE_ACCESS_READ, 0, slices * per_slice * sizeof(int)),
            NERVE_OK);
  ASSERT_EQ(nerve_task_add_access(reader, sum, NERVE_ACCESS_WRITE, 0, sizeof(long)), NERVE_OK);
  ASSERT_EQ(nerve_task_submit(ctx.get(), reader, NERVE_DEVICE_ANY), NERVE_OK);
  EXPECT_EQ(MappedC<long>(sum, NERVE_MAP_READ)[0], static_cast<long>(per_slice * slices * (slices - 1) / 2));
  free_buffer(data);
  free_buffer(sum);
}

// nerve_task_fail(): the dependent task is cancelled (its kernel never runs), an independent one runs,
// and nerve_wait_all reports the failure once, with the task's name and message.
TEST_P(CapiTaskTest, FailurePropagates) {
  nerve_buffer_t* shared = alloc(sizeof(int));
  nerve_buffer_t* unrelated = alloc(sizeof(int));
  static std::atomic<int> dependent_runs{0};
  static std::atomic<int> independent_runs{0};
  dependent_runs = 0;
  independent_runs = 0;
  ASSERT_EQ(submit(
                ctx.get(),
                +[](void*, nerve_device_t, nerve_stream_t) {
                  nerve_task_fail("the input file is corrupt");
                  nerve_task_fail("a second message is ignored");
                },
                nullptr, {shared}, "producer"),
            NERVE_OK);
  ASSERT_EQ(submit(
                ctx.get(), +[](void*, nerve_device_t, nerve_stream_t) { ++dependent_runs; }, nullptr,
                {shared}, "consumer"),
            NERVE_OK);
  ASSERT_EQ(submit(ctx.get(), +[](void*, nerve_device_t, nerve_stream_t) { ++independent_runs; }, nullptr,
                   {unrelated}),
            NERVE_OK);
  EXPECT_EQ(nerve_wait_all(ctx.get()), NERVE_ERROR_TASK_FAILED);
  const std::string message = nerve_last_error();
  EXPECT_NE(message.find("task 'producer' failed: the input file is corrupt"), std::string::npos) << message;
  EXPECT_EQ(message.find("second"), std::string::npos) << message;
  EXPECT_EQ(dependent_runs.load(), 0) << "a task depending on a failed task must be cancelled";
  EXPECT_EQ(independent_runs.load(), 1);
  EXPECT_EQ(nerve_wait_all(ctx.get()), NERVE_OK) << "a failure is reported once";
  // A mapping that depends on the failed writer is cancelled too.
  EXPECT_NERVE_ERROR(nerve_buffer_map(shared, NERVE_MAP_READ), NERVE_ERROR_CANCELLED, "producer");
  // ... and says which buffer, not an internal task name.
  EXPECT_NERVE_ERROR(nerve_buffer_map(shared, NERVE_MAP_READ), NERVE_ERROR_CANCELLED,
                     "read map of bytes [0, ");
  EXPECT_EQ(std::string(nerve_last_error()).find("host mapping"), std::string::npos) << nerve_last_error();
  free_buffer(shared);
  free_buffer(unrelated);
}

struct DeviceProbe {
  nerve_buffer_t* buffer;
  nerve_device_t seen_device;
  void* seen_pointer;
  nerve_status_t other_device_status = NERVE_OK;  // asking for the data on a device the task is not on
};

void fill_on_device(void* desc, nerve_device_t device, nerve_stream_t) {
  auto* probe = static_cast<DeviceProbe*>(desc);
  probe->seen_device = device;
  if (nerve_buffer_get_device_ptr(probe->buffer, device == 0 ? 1 : 0) == nullptr)
    probe->other_device_status = nerve_last_status();
  probe->seen_pointer = nerve_buffer_get_device_ptr(probe->buffer, device);
  auto* data = static_cast<int*>(probe->seen_pointer);
  for (int i = 0; i < 64; ++i) data[i] = i * 3;
}

// context_without_accelerators(): a context with only the CPU workers, whatever OpenCL finds, for
// tests that add test devices (NULL on error).
nerve_context_t* context_without_accelerators() {
  static const char* settings[] = {"gpu.devices=none"};
  nerve_context_config_t config = NERVE_CONTEXT_CONFIG_DEFAULT;
  config.use_environment = 0;
  config.settings = settings;
  config.setting_count = 1;
  return nerve_init_with_config(&config);
}

// A C kernel placed on a separate-memory device gets that device's index and a pointer into the
// device's replica; the host sees the result after the runtime copies it back.
// The most accesses a task may declare (65535), all to one buffer: each segment it splits reserves
// room for the task's accesses that overlap it, not for all of them (that was n slots in each of n
// segments: 16,000 one-byte ranges took 2 GB and 7 s, 65535 would have needed ~34 GB). Overlapping
// ranges too, then a writer of the whole buffer that must wait for both readers.
TEST_P(CapiTaskTest, TheMostAccessesATaskMayDeclareAllToOneBuffer) {
  constexpr std::size_t most = 65535;
  nerve_buffer_t* buffer = alloc(most + 64);
  {
    MappedC<unsigned char> init(buffer, NERVE_MAP_WRITE);
    std::fill(init.data(), init.data() + most + 64, std::uint8_t{1});
  }
  static std::atomic<int> readers_done{0};
  static std::atomic<bool> writer_saw_readers{false};
  readers_done = 0;
  writer_saw_readers = false;
  const auto reader = +[](void*, nerve_device_t, nerve_stream_t) { readers_done.fetch_add(1); };
  nerve_task_t* disjoint = nerve_task_create(reader, nullptr);
  for (std::size_t i = 0; i < most; ++i) {
    ASSERT_EQ(nerve_task_add_access(disjoint, buffer, NERVE_ACCESS_READ, i, 1), NERVE_OK)
        << nerve_last_error();
  }
  ASSERT_EQ(nerve_task_submit(ctx.get(), disjoint, NERVE_DEVICE_ANY), NERVE_OK) << nerve_last_error();
  nerve_task_t* overlapping = nerve_task_create(reader, nullptr);
  for (std::size_t i = 0; i < 4000; ++i) {  // each range overlaps ~130 others
    ASSERT_EQ(nerve_task_add_access(overlapping, buffer, NERVE_ACCESS_READ, i, 64), NERVE_OK);
  }
  ASSERT_EQ(nerve_task_submit(ctx.get(), overlapping, NERVE_DEVICE_ANY), NERVE_OK) << nerve_last_error();
  nerve_task_t* writer = nerve_task_create(
      +[](void*, nerve_device_t, nerve_stream_t) { writer_saw_readers = readers_done.load() == 2; }, nullptr);
  ASSERT_EQ(nerve_task_add_access(writer, buffer, NERVE_ACCESS_WRITE, 0, most + 64), NERVE_OK);
  ASSERT_EQ(nerve_task_submit(ctx.get(), writer, NERVE_DEVICE_ANY), NERVE_OK) << nerve_last_error();
  ASSERT_EQ(nerve_wait_all(ctx.get()), NERVE_OK) << nerve_last_error();
  EXPECT_TRUE(writer_saw_readers.load()) << "the writer ran before both readers had finished";
  free_buffer(buffer);
}

// One access more than a task may have is refused by the call that declares it, with the limit in
// the message: nerve_task_add_access accepted a 70,000th access, and only the submission said that
// 65535 was the most, from a call that declared nothing. The task is marked as for any failed
// declaration, so it is not submitted without that data.
TEST_P(CapiTaskTest, RegressionTheAccessPastTheMostIsRefusedWhenDeclared) {
  nerve_buffer_t* buffer = alloc(NERVE_TASK_MAX_ACCESSES + 1);
  nerve_task_t* task = nerve_task_create(
      +[](void*, nerve_device_t, nerve_stream_t) {}, nullptr);
  for (std::size_t i = 0; i < NERVE_TASK_MAX_ACCESSES; ++i) {
    ASSERT_EQ(nerve_task_add_access(task, buffer, NERVE_ACCESS_READ, i, 1), NERVE_OK) << nerve_last_error();
  }
  EXPECT_NERVE_ERROR(
      nerve_task_add_access(task, buffer, NERVE_ACCESS_READ, NERVE_TASK_MAX_ACCESSES, 1),
      NERVE_ERROR_INVALID_ARGUMENT,
      "nerve_task_add_access: a task may declare at most 65535 accesses; this would give it 65536");
  EXPECT_NERVE_ERROR(nerve_task_submit(ctx.get(), task, NERVE_DEVICE_ANY), NERVE_ERROR_INVALID_ARGUMENT,
                     "not submitted: an access declaration of this task failed");

  const std::vector<nerve_buffer_t*> buffers(NERVE_TASK_MAX_ACCESSES + 1, buffer);
  nerve_task_t* whole = nerve_task_create(
      +[](void*, nerve_device_t, nerve_stream_t) {}, nullptr);
  EXPECT_NERVE_ERROR(nerve_task_set_memory_deps(whole, buffers.size(), buffers.data()),
                     NERVE_ERROR_INVALID_ARGUMENT, "at most 65535 accesses; this would give it 65536");
  EXPECT_EQ(nerve_task_set_memory_deps(whole, NERVE_TASK_MAX_ACCESSES, buffers.data()), NERVE_OK)
      << nerve_last_error();
  nerve_task_destroy(whole);
  free_buffer(buffer);
}

TEST(CapiTask, KernelOnADeviceSeesTheDeviceReplica) {
  nerve_context_t* ctx = context_without_accelerators();
  ASSERT_NE(ctx, nullptr) << nerve_last_error();
  ctx->impl()->add_test_device({});
  EXPECT_EQ(nerve_context_get_device_count(ctx), 2);
  nerve_buffer_t* buffer = nerve_buffer_alloc(ctx, 64 * sizeof(int), NERVE_DEVICE_ANY, MEM_FLAG_WRITE);
  ASSERT_NE(buffer, nullptr) << nerve_last_error();
  DeviceProbe probe{buffer, -1, nullptr};
  nerve_task_t* task = nerve_task_create(fill_on_device, &probe);
  ASSERT_EQ(nerve_task_set_memory_deps(task, 1, &buffer), NERVE_OK) << nerve_last_error();
  ASSERT_EQ(nerve_task_submit(ctx, task, 1), NERVE_OK) << nerve_last_error();
  ASSERT_EQ(nerve_wait_all(ctx), NERVE_OK) << nerve_last_error();
  EXPECT_EQ(probe.seen_device, 1);
  EXPECT_EQ(probe.other_device_status, NERVE_ERROR_INVALID_ARGUMENT) << "the task's data is on device 1";
  EXPECT_EQ(nerve_buffer_get_device_ptr(buffer, 1), nullptr) << "outside a kernel: the host address only";
  EXPECT_EQ(nerve_last_status(), NERVE_ERROR_INVALID_ARGUMENT);
  const auto* host = static_cast<const int*>(nerve_buffer_map(buffer, NERVE_MAP_READ));
  ASSERT_NE(host, nullptr) << nerve_last_error();
  EXPECT_NE(static_cast<const void*>(host), probe.seen_pointer) << "the kernel wrote the device replica";
  for (int i = 0; i < 64; ++i) ASSERT_EQ(host[i], i * 3);
  EXPECT_EQ(nerve_buffer_unmap(buffer), NERVE_OK);
  EXPECT_EQ(nerve_task_submit(ctx, nerve_task_create(fill_on_device, &probe), 2),
            NERVE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nerve_buffer_free(buffer), NERVE_OK);
  nerve_shutdown(ctx);
}

// A device number the context lacks is an error that lists every device it has, accelerators too.
TEST(CapiTask, AnUnknownDeviceNumberListsEveryDeviceOfTheContext) {
  nerve_context_t* ctx = context_without_accelerators();
  ASSERT_NE(ctx, nullptr) << nerve_last_error();
  ctx->impl()->add_test_device({});
  ctx->impl()->add_test_device({});
  ASSERT_EQ(nerve_context_get_device_count(ctx), 3);
  const std::vector<DeviceInfo> devices = ctx->impl()->device_infos();
  nerve_clear_last_error();
  EXPECT_EQ(nerve_buffer_alloc(ctx, 64, 5, 0), nullptr);
  EXPECT_EQ(nerve_last_status(), NERVE_ERROR_INVALID_ARGUMENT);
  const std::string message = nerve_last_error();
  EXPECT_NE(message.find("preferred_device 5"), std::string::npos) << message;
  EXPECT_NE(message.find("0 = the CPU workers"), std::string::npos) << message;
  for (std::size_t i = 1; i < devices.size(); ++i) {
    const std::string entry = fmt::format("{} = '{}' ({})", i, devices[i].name, devices[i].backend);
    EXPECT_NE(message.find(entry), std::string::npos) << "lacks '" << entry << "': " << message;
  }
  EXPECT_NERVE_ERROR(nerve_task_submit(ctx, nerve_task_create(fill_on_device, nullptr), 3),
                     NERVE_ERROR_INVALID_ARGUMENT, "2 = '");
  nerve_shutdown(ctx);
}

TEST(CapiTask, FailOutsideAKernelIsAnErrorAndAnEmptyMessageSaysSo) {
  EXPECT_NERVE_ERROR(nerve_task_fail("nothing to fail"), NERVE_ERROR_INVALID_ARGUMENT, "outside");
  // An empty message still says something.
  ContextPtr ctx = make_context(2);
  ASSERT_EQ(submit(
                ctx.get(), +[](void*, nerve_device_t, nerve_stream_t) { nerve_task_fail(""); }, nullptr, {},
                "silent"),
            NERVE_OK);
  EXPECT_NERVE_ERROR(nerve_wait_all(ctx.get()), NERVE_ERROR_TASK_FAILED,
                     "task 'silent' failed: (nerve_task_fail gave no message)");
}

// Kernels that a waiting thread runs (with one slot, every kernel runs on the thread in
// nerve_wait_all) make failing calls of their own; the wait succeeds, so the caller's last error
// must be what it was before: "successful calls leave it alone".
TEST_P(CapiTaskTest, KernelErrorsDoNotLeakIntoTheWaitersLastError) {
  nerve_buffer_t* declared = nerve_buffer_alloc_unified(ctx.get(), 8, MEM_FLAG_READ_WRITE);
  nerve_buffer_t* undeclared = nerve_buffer_alloc_unified(ctx.get(), 8, MEM_FLAG_READ_WRITE);
  ASSERT_NE(declared, nullptr);
  ASSERT_NE(undeclared, nullptr);
  struct Probe {
    nerve_buffer_t* undeclared;
    std::thread::id waiter;
    std::atomic<int> failed_calls{0};
    std::atomic<int> on_waiter{0};
  } probe{undeclared, std::this_thread::get_id()};
  for (int i = 0; i < 16; ++i) {
    ASSERT_EQ(submit(
                  ctx.get(),
                  +[](void* desc, nerve_device_t device, nerve_stream_t) {
                    auto& p = *static_cast<Probe*>(desc);
                    if (nerve_last_status() != NERVE_OK)
                      return nerve_task_fail("kernel saw the caller's error");
                    if (nerve_buffer_get_device_ptr(p.undeclared, device) == nullptr)
                      p.failed_calls.fetch_add(1);
                    if (std::this_thread::get_id() == p.waiter) p.on_waiter.fetch_add(1);
                  },
                  &probe, {declared}, "prober"),
              NERVE_OK);
  }
  nerve_clear_last_error();
  ASSERT_EQ(nerve_wait_all(nullptr), NERVE_ERROR_INVALID_ARGUMENT);
  const std::string before = nerve_last_error();
  ASSERT_FALSE(before.empty());
  ASSERT_EQ(nerve_wait_all(ctx.get()), NERVE_OK) << nerve_last_error();
  EXPECT_EQ(probe.failed_calls.load(), 16);
  if (workers() == 1) EXPECT_EQ(probe.on_waiter.load(), 16) << "one slot: the waiter runs every kernel";
  EXPECT_EQ(nerve_last_status(), NERVE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(nerve_last_error()), before);
  EXPECT_EQ(nerve_buffer_free(declared), NERVE_OK);
  EXPECT_EQ(nerve_buffer_free(undeclared), NERVE_OK);
}

// A C++ kernel behind the C API may throw: the wait's message names the task like nerve_task_fail.
TEST_P(CapiTaskTest, ThrowingKernelIsNamedInTheWaitsMessage) {
  ASSERT_EQ(submit(
                ctx.get(), +[](void*, nerve_device_t, nerve_stream_t) { throw std::runtime_error("boom"); },
                nullptr, {}, "thrower"),
            NERVE_OK);
  EXPECT_NERVE_ERROR(nerve_wait_all(ctx.get()), NERVE_ERROR_TASK_FAILED,
                     "nerve_wait_all: task 'thrower' failed: boom");
  ASSERT_EQ(submit(
                ctx.get(), +[](void*, nerve_device_t, nerve_stream_t) { throw 42; }, nullptr, {}, "odd"),
            NERVE_OK);
  EXPECT_NERVE_ERROR(nerve_wait_all(ctx.get()), NERVE_ERROR_TASK_FAILED,
                     "task 'odd' failed: an exception that is not a std::exception");
}

TEST_P(CapiTaskTest, UnnamedTaskFailure) {
  ASSERT_EQ(submit(
                ctx.get(), +[](void*, nerve_device_t, nerve_stream_t) { nerve_task_fail(nullptr); }, nullptr),
            NERVE_OK);
  EXPECT_NERVE_ERROR(nerve_wait_all(ctx.get()), NERVE_ERROR_TASK_FAILED, "(unnamed)");
}

TEST_P(CapiTaskTest, DevicesAndStreams) {
  static std::atomic<int> seen_device{-5};
  static std::atomic<bool> stream_was_null{false};
  seen_device = -5;
  auto kernel = +[](void*, nerve_device_t device, nerve_stream_t stream) {
    seen_device = device;
    stream_was_null = stream == nullptr;
  };
  nerve_task_t* task = nerve_task_create(kernel, nullptr);
  ASSERT_EQ(nerve_task_submit(ctx.get(), task, NERVE_DEVICE_CPU), NERVE_OK);
  ASSERT_EQ(nerve_wait_all(ctx.get()), NERVE_OK);
  EXPECT_EQ(seen_device.load(), NERVE_DEVICE_CPU);
  EXPECT_TRUE(stream_was_null.load());
  // Unknown devices: the task is consumed all the same (LeakSanitizer checks).
  EXPECT_NERVE_ERROR(nerve_task_submit(ctx.get(), nerve_task_create(kernel, nullptr), 1),
                     NERVE_ERROR_INVALID_ARGUMENT, "device 1");
  EXPECT_NERVE_ERROR(nerve_task_submit(ctx.get(), nerve_task_create(kernel, nullptr), -7),
                     NERVE_ERROR_INVALID_ARGUMENT, "device -7");
}

TEST_P(CapiTaskTest, TaskArguments) {
  EXPECT_NERVE_ERROR(nerve_task_create(nullptr, nullptr), NERVE_ERROR_INVALID_ARGUMENT, "kernel");
  EXPECT_NERVE_ERROR(nerve_task_submit(ctx.get(), nullptr, NERVE_DEVICE_ANY), NERVE_ERROR_INVALID_ARGUMENT,
                     "task is NULL");
  nerve_task_t* task = nerve_task_create(
      +[](void*, nerve_device_t, nerve_stream_t) {}, nullptr);
  EXPECT_NERVE_ERROR(nerve_task_set_memory_deps(task, 2, nullptr), NERVE_ERROR_INVALID_ARGUMENT, "NULL");
  nerve_buffer_t* null_entry[1] = {nullptr};
  EXPECT_NERVE_ERROR(nerve_task_set_memory_deps(task, 1, null_entry), NERVE_ERROR_INVALID_ARGUMENT, "NULL");
  EXPECT_NERVE_ERROR(nerve_task_set_name(task, nullptr), NERVE_ERROR_INVALID_ARGUMENT, "name");
  EXPECT_NERVE_ERROR(nerve_task_set_compute_intensive(nullptr, true), NERVE_ERROR_INVALID_ARGUMENT, "NULL");
  EXPECT_NERVE_ERROR(nerve_task_set_priority(nullptr, NERVE_PRIORITY_HIGH), NERVE_ERROR_INVALID_ARGUMENT,
                     "NULL");
  EXPECT_NERVE_ERROR(nerve_task_submit(nullptr, task, NERVE_DEVICE_ANY), NERVE_ERROR_INVALID_ARGUMENT,
                     "context is NULL");  // consumed
  nerve_task_destroy(nerve_task_create(
      +[](void*, nerve_device_t, nerve_stream_t) {}, nullptr));
  nerve_task_destroy(nullptr);
}

// A buffer freed between declaring it and submitting: the submission fails and consumes the task.
TEST_P(CapiTaskTest, SubmitAfterFreeIsMisuse) {
  nerve_buffer_t* buffer = alloc(16);
  nerve_task_t* task = nerve_task_create(
      +[](void*, nerve_device_t, nerve_stream_t) {}, nullptr);
  ASSERT_EQ(nerve_task_set_memory_deps(task, 1, &buffer), NERVE_OK);
  free_buffer(buffer);
  EXPECT_NERVE_ERROR(nerve_task_submit(ctx.get(), task, NERVE_DEVICE_ANY), NERVE_ERROR_BUFFER_MISUSE,
                     "use after free");
}

// A declaration that failed (here: an access past the buffer's end) leaves the task without that data:
// submitting it anyway is refused with the declaration's error, and the kernel never runs (it ran with
// no declared data, so code that did not check every setter lost its dependencies silently). A
// successful nerve_task_set_memory_deps replaces every declaration, the failed one included.
TEST_P(CapiTaskTest, ATaskWhoseDeclarationFailedIsNotSubmitted) {
  static std::atomic<int> runs{0};
  runs = 0;
  nerve_buffer_t* buffer = alloc(16);
  const auto kernel = +[](void*, nerve_device_t, nerve_stream_t) { runs.fetch_add(1); };
  nerve_task_t* refused = nerve_task_create(kernel, nullptr);
  EXPECT_NERVE_ERROR(nerve_task_add_access(refused, buffer, NERVE_ACCESS_WRITE, 8, 16),
                     NERVE_ERROR_BUFFER_MISUSE, "outside");
  EXPECT_NERVE_ERROR(nerve_task_submit(ctx.get(), refused, NERVE_DEVICE_ANY), NERVE_ERROR_BUFFER_MISUSE,
                     "not submitted: an access declaration of this task failed");
  EXPECT_NE(std::string(nerve_last_error()).find("nerve_task_add_access: access to bytes"), std::string::npos)
      << nerve_last_error();

  nerve_task_t* mended = nerve_task_create(kernel, nullptr);
  EXPECT_EQ(nerve_task_add_access(mended, buffer, NERVE_ACCESS_WRITE, 8, 16), NERVE_ERROR_BUFFER_MISUSE);
  ASSERT_EQ(nerve_task_set_memory_deps(mended, 1, &buffer), NERVE_OK);
  ASSERT_EQ(nerve_task_submit(ctx.get(), mended, NERVE_DEVICE_ANY), NERVE_OK) << nerve_last_error();
  EXPECT_EQ(nerve_wait_all(ctx.get()), NERVE_OK) << nerve_last_error();
  EXPECT_EQ(runs.load(), 1) << "the refused task never ran";
  free_buffer(buffer);
}

TEST_P(CapiTaskTest, SetMemoryDepsReplacesEarlierAccesses) {
  nerve_buffer_t* kept = alloc(16);
  nerve_buffer_t* dropped = alloc(16);
  nerve_task_t* task = nerve_task_create(
      +[](void* desc, nerve_device_t device, nerve_stream_t) {
        if (nerve_buffer_get_device_ptr(static_cast<nerve_buffer_t*>(desc), device) != nullptr) {
          nerve_task_fail("a replaced access is still declared");
        }
      },
      dropped);
  ASSERT_EQ(nerve_task_add_access(task, dropped, NERVE_ACCESS_READ, 0, 16), NERVE_OK);
  ASSERT_EQ(nerve_task_set_memory_deps(task, 1, &kept), NERVE_OK);
  ASSERT_EQ(nerve_task_submit(ctx.get(), task, NERVE_DEVICE_ANY), NERVE_OK);
  EXPECT_EQ(nerve_wait_all(ctx.get()), NERVE_OK) << nerve_last_error();
  free_buffer(kept);
  free_buffer(dropped);
}

TEST_P(CapiTaskTest, WaitAllInsideAKernelIsRefused) {
  struct Probe {
    nerve_context_t* ctx;
    nerve_status_t status;
  } probe{ctx.get(), NERVE_OK};
  ASSERT_EQ(submit(
                ctx.get(),
                +[](void* desc, nerve_device_t, nerve_stream_t) {
                  auto& p = *static_cast<Probe*>(desc);
                  p.status = nerve_wait_all(p.ctx);
                },
                &probe),
            NERVE_OK);
  ASSERT_EQ(nerve_wait_all(ctx.get()), NERVE_OK);
  EXPECT_EQ(probe.status, NERVE_ERROR_INVALID_ARGUMENT);
}

// Kernels may submit tasks: a fan-out from inside a kernel, over slices of one buffer.
TEST_P(CapiTaskTest, NestedSubmission) {
  constexpr std::size_t count = 8;
  nerve_buffer_t* buffer = alloc(count * sizeof(int));
  std::memset(MappedC<int>(buffer, NERVE_MAP_WRITE).data(), 0, count * sizeof(int));
  struct Parent {
    nerve_context_t* ctx;
    nerve_buffer_t* buffer;
    AddDesc children[count];
  } parent{ctx.get(), buffer, {}};
  ASSERT_EQ(submit(
                ctx.get(),
                +[](void* desc, nerve_device_t, nerve_stream_t) {
                  auto& p = *static_cast<Parent*>(desc);
                  for (std::size_t i = 0; i < count; ++i) {
                    p.children[i] = {p.buffer, count, 1};
                    if (submit(p.ctx, add_kernel, &p.children[i], {p.buffer}) != NERVE_OK) {
                      return nerve_task_fail(nerve_last_error());
                    }
                  }
                },
                &parent),
            NERVE_OK);
  ASSERT_EQ(nerve_wait_all(ctx.get()), NERVE_OK) << nerve_last_error();
  {
    MappedC<const int> mapped(buffer, NERVE_MAP_READ);
    for (std::size_t i = 0; i < count; ++i) EXPECT_EQ(mapped[i], static_cast<int>(count));
  }
  free_buffer(buffer);
}

// compute_intensive tasks submitted by a worker go round-robin to every worker's queue instead of the
// submitter's own deque. Observable: while the parent keeps its worker busy, children left in its
// deque can only run by being stolen; children handed to the other worker's queue run without a steal.
std::uint64_t total_steals(nerve_context_t* ctx) {
  std::uint64_t steals = 0;
  for (const WorkerStats& worker : ctx->runtime->stats().workers) steals += worker.steals;
  return steals;
}

std::uint64_t steals_for_burst(bool compute_intensive) {
  ContextPtr ctx = make_context(2);
  static std::atomic<int> finished{0};
  finished = 0;
  struct Parent {
    nerve_context_t* ctx;
    bool compute_intensive;
    bool all_finished;
  } parent{ctx.get(), compute_intensive, false};
  EXPECT_EQ(submit(
                ctx.get(),
                +[](void* desc, nerve_device_t, nerve_stream_t) {
                  auto& p = *static_cast<Parent*>(desc);
                  for (int i = 0; i < 8; ++i) {
                    nerve_task_t* child = nerve_task_create(
                        +[](void*, nerve_device_t, nerve_stream_t) { ++finished; }, nullptr);
                    nerve_task_set_compute_intensive(child, p.compute_intensive);
                    nerve_task_submit(p.ctx, child, NERVE_DEVICE_ANY);
                  }
                  // Keep this worker busy (no helping) until the other worker has run every child.
                  p.all_finished = wait_until([] { return finished.load() == 8; });
                },
                &parent),
            NERVE_OK);
  EXPECT_EQ(nerve_wait_all(ctx.get()), NERVE_OK) << nerve_last_error();
  EXPECT_TRUE(parent.all_finished);
  return total_steals(ctx.get());
}

TEST(CapiTask, ComputeIntensiveTasksAreSpreadOverWorkers) {
  const std::uint64_t plain = steals_for_burst(false);
  const std::uint64_t spread = steals_for_burst(true);
  EXPECT_GE(plain, 8u) << "every child sat in the busy parent's deque";
  EXPECT_LT(spread, plain) << "compute-intensive children were not handed to the other worker";
}

INSTANTIATE_TEST_SUITE_P(Capi, CapiTaskTest, NERVE_CAPI_PARAMS, capi_param_name);

// nerve_task_set_priority(): on one worker, the tasks waiting when the application thread starts
// running them start by priority, FIFO within a level.
TEST(CapiPriority, OneWorkerStartsTasksByPriority) {
  ContextPtr ctx = make_context(1);
  ASSERT_NE(ctx, nullptr) << nerve_last_error();
  static std::vector<int> order;
  order.clear();
  const int priorities[] = {NERVE_PRIORITY_LOW, NERVE_PRIORITY_NORMAL, NERVE_PRIORITY_HIGH, 7,
                            NERVE_PRIORITY_HIGH + 1};
  for (const int& priority : priorities) {
    nerve_task_t* task = nerve_task_create(
        +[](void* desc, nerve_device_t, nerve_stream_t) { order.push_back(*static_cast<const int*>(desc)); },
        const_cast<int*>(&priority));
    ASSERT_EQ(nerve_task_set_priority(task, priority), NERVE_OK);
    ASSERT_EQ(nerve_task_submit(ctx.get(), task, NERVE_DEVICE_ANY), NERVE_OK);
  }
  ASSERT_EQ(nerve_wait_all(ctx.get()), NERVE_OK);
  EXPECT_EQ(order, (std::vector<int>{NERVE_PRIORITY_HIGH + 1, NERVE_PRIORITY_HIGH, 7, NERVE_PRIORITY_NORMAL,
                                     NERVE_PRIORITY_LOW}));
}

// A named C kernel has an identity (its task's name): performance models learn its run times and
// heft places it by them; an unnamed one, like a C++ closure, is not modelled.
TEST(CapiModels, NamedCKernelsAreModelled) {
  const std::string directory =
      (std::filesystem::temp_directory_path() / fmt::format("nerve-capi-models-{}", ::getpid())).string();
  const std::string model_dir = "perf.model_dir=" + directory;
  const char* settings[] = {"scheduler.policy=heft", model_dir.c_str(), "gpu.devices=none"};
  nerve_context_config_t config = NERVE_CONTEXT_CONFIG_DEFAULT;
  config.use_environment = 0;
  config.thread_pool_size = 2;
  config.settings = settings;
  config.setting_count = 3;
  ContextPtr ctx(nerve_init_with_config(&config));
  ASSERT_NE(ctx, nullptr) << nerve_last_error();
  nerve_buffer_t* buffer = nerve_buffer_alloc_unified(ctx.get(), 4096, MEM_FLAG_READ_WRITE);
  ASSERT_NE(buffer, nullptr) << nerve_last_error();
  const auto submit = [&](const char* name) {
    nerve_task_t* task = nerve_task_create(
        +[](void*, nerve_device_t, nerve_stream_t) {}, nullptr);
    if (name != nullptr) ASSERT_EQ(nerve_task_set_name(task, name), NERVE_OK);
    ASSERT_EQ(nerve_task_set_memory_deps(task, 1, &buffer), NERVE_OK);
    ASSERT_EQ(nerve_task_submit(ctx.get(), task, NERVE_DEVICE_ANY), NERVE_OK) << nerve_last_error();
  };
  for (int i = 0; i < 12; ++i) submit("c_spin");
  for (int i = 0; i < 3; ++i) submit(nullptr);
  ASSERT_EQ(nerve_wait_all(ctx.get()), NERVE_OK) << nerve_last_error();
  const std::string path = directory + "/stats.json";
  std::filesystem::create_directories(directory);
  ASSERT_EQ(nerve_context_dump_perf_stats(ctx.get(), path.c_str()), NERVE_OK) << nerve_last_error();
  std::ifstream in(path);
  const nlohmann::json stats = nlohmann::json::parse(in);
  ASSERT_TRUE(stats["models"]["enabled"].get<bool>());
  std::uint64_t samples = 0;
  for (const auto& entry : stats["models"]["entries"]) {
    EXPECT_EQ(entry["kernel"], "c_spin") << "only the named kernel is modelled";
    if (entry["kernel"] == "c_spin" && entry["device"] == "cpu")
      samples += entry["samples"].get<std::uint64_t>();
  }
  EXPECT_EQ(samples, 12u);
  ASSERT_EQ(nerve_buffer_free(buffer), NERVE_OK);
  ctx.reset();
  std::filesystem::remove_all(directory);
}

}  // namespace
}  // namespace nerve::testing
