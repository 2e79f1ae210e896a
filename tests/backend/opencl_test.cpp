// The OpenCL backend on a real platform (PoCL in CI): kernels, copies, queues, the transfer bound,
// the program cache and errors. Every test skips when the machine has no OpenCL device.
#include "nerve/opencl.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>

#include "backend/opencl/memory.hpp"
#include "backend/opencl/platform.hpp"
#include "backend/opencl/pocl_size_guard.hpp"
#include "backend/opencl/programs.hpp"
#include "opencl_support.hpp"
#include "perf/perf_test.hpp"

namespace nerve::testing {
namespace {

constexpr const char* add_source = R"(
  __kernel void add(__global const float* a, __global const float* b, __global float* c) {
    const size_t i = get_global_id(0);
    c[i] = a[i] + b[i];
  }
  __kernel void scale(__global float* x, float factor) {
    const size_t i = get_global_id(0);
    x[i] *= factor;
  })";

Kernel make_add() {
  Kernel add("add");
  opencl::attach(add, add_source, "add");
  return add;
}

Kernel make_scale() {
  Kernel scale("scale");
  scale.cpu([](const KernelArgs& args) {
    auto x = args.span<float>(0);
    for (float& each : x) each *= args.value<float>(0);
  });
  opencl::attach(scale, add_source, "scale");
  return scale;
}

detail::DeviceCounters counters_of(const Context& context, int device) {
  return context.impl()->devices[static_cast<std::size_t>(device) - 1]->counters();
}

// A disk cache of our own, so that tests neither read nor fill the user's.
class OpenclTest : public ::testing::Test {
 protected:
  void SetUp() override {
    NERVE_SKIP_WITHOUT_OPENCL();
    private_cache.emplace(std::string("test-") +
                          ::testing::UnitTest::GetInstance()->current_test_info()->name());
    cache = private_cache->path();
  }
  void TearDown() override {
    if (context) {
      try {
        context->wait_all();
      } catch (const Error&) {
      }
      expect_no_leaks(*context);
      context.reset();
    }
    private_cache.reset();  // after the context, which may still write there
  }
  Context& open(const Settings& settings) {
    context = std::make_unique<Context>(settings);
    return *context;
  }
  // run_in(): `body` in a context of its own, then that context's leak check (its buffers are gone).
  template <class Body>
  void run_in(const Settings& settings, Body&& body) {
    body(open(settings));
    context->wait_all();
    expect_no_leaks(*context);
    context.reset();
  }
  std::optional<PrivateProgramCache> private_cache;
  std::filesystem::path cache;  // its directory (the tests keep models and logs there too)
  std::unique_ptr<Context> context;
};

TEST_F(OpenclTest, DevicesAreListedWithTheirMemoryNodes) {
  Context& ctx = open(opencl_settings(2));
  const auto devices = ctx.devices();
  ASSERT_GE(devices.size(), 2u);
  EXPECT_EQ(devices[0].kind, DeviceKind::cpu);
  for (std::size_t i = 1; i < devices.size(); ++i) {
    EXPECT_EQ(devices[i].kind, DeviceKind::opencl);
    EXPECT_EQ(devices[i].backend, "opencl");
    EXPECT_EQ(devices[i].index, static_cast<int>(i));
    EXPECT_EQ(devices[i].memory_node, static_cast<int>(i));
    EXPECT_GT(devices[i].memory_bytes, 0u);
    EXPECT_GT(devices[i].compute_units, 0u);
    EXPECT_FALSE(devices[i].name.empty());
    // An OpenCL CPU device (PoCL's, here) computes on the workers' cores; heft counts it as CPU time.
    cl_device_type type = 0;
    const auto& found = detail::opencl::Platforms::instance().devices();
    const auto same =
        std::find_if(found.begin(), found.end(), [&](const auto& d) { return d.name == devices[i].name; });
    ASSERT_NE(same, found.end());
    ASSERT_EQ(clGetDeviceInfo(same->device, CL_DEVICE_TYPE, sizeof type, &type, nullptr), CL_SUCCESS);
    EXPECT_EQ(devices[i].shares_host_cores, (type & CL_DEVICE_TYPE_CPU) != 0) << devices[i].name;
  }
}

// The OpenCL device runs only Kernel calls with an OpenCL implementation: forcing a plain function
// onto it is refused at submit, naming the device, and nothing is left half-submitted.
TEST_F(OpenclTest, APlainFunctionForcedOntoTheDeviceIsRefusedAtSubmit) {
  Context& ctx = open(opencl_settings(2));
  Buffer<int> data(ctx, 4);
  try {
    ctx.spawn(
        TaskOptions{.device = 1}, [](std::span<int> x) { x[0] = 1; }, write(data));
    FAIL() << "a plain function was accepted for the OpenCL device";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(error.what()).find("cannot run a plain function"), std::string::npos)
        << error.what();
  }
  ctx.spawn([](std::span<int> x) { x[0] = 7; }, write(data));
  EXPECT_EQ(data.to_vector()[0], 7) << "the buffer took no dependency on the refused task";
  EXPECT_NO_THROW(ctx.wait_all());
}

TEST_F(OpenclTest, VectorAddRunsOnTheDeviceAndMovesData) {
  Context& ctx = open(opencl_settings(2));
  const Kernel add = make_add();  // OpenCL only: it must run on the device
  constexpr std::size_t n = 1 << 16;
  std::vector<float> a(n), b(n);
  std::iota(a.begin(), a.end(), 0.0f);
  std::iota(b.begin(), b.end(), 1.0f);
  Buffer<float> x(ctx, a), y(ctx, b), z(ctx, n);
  ctx.submit(add, read(x), read(y), write(z)).wait();
  const auto result = z.to_vector();
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(result[i], a[i] + b[i]) << i;
  const detail::DeviceCounters counters = counters_of(ctx, 1);
  EXPECT_EQ(counters.launches, 1u);
  EXPECT_GE(counters.copies, 3u) << "two inputs in, the result out";
  EXPECT_EQ(counters.events_live, 0u) << "every event is released once its operation completes";
}

TEST_F(OpenclTest, OperationRecordsAreRecycledNotMadePerTask) {
  Context& ctx = open(opencl_settings(2));
  const Kernel scale = make_scale();
  Buffer<float> x(ctx, std::vector<float>(1024, 1.0f));
  for (int i = 0; i < 50; ++i) {
    ctx.submit(TaskOptions{.device = 1}, scale, read_write(x), value(1.0f)).wait();
    x.map_read_write()[0] = 1.0f;  // a copy out, and the host's write makes the next round copy in
  }
  const detail::DeviceCounters counters = counters_of(ctx, 1);
  EXPECT_EQ(counters.launches, 50u);
  EXPECT_GE(counters.copies, 100u);
  EXPECT_LE(counters.operation_records, 8u) << "records come from a pool: one or two are in flight at a time";
  EXPECT_EQ(counters.events_live, 0u);
}

// NERVE_OPENCL_STAGING=always sends host copies through pinned staging buffers piece by piece (the path
// of discrete GPUs), which PoCL would otherwise skip; data larger than one staging buffer takes several.
TEST_F(OpenclTest, StagedCopiesMoveDataPieceByPiece) {
  ::setenv("NERVE_OPENCL_STAGING", "always", 1);
  Context& ctx = open(opencl_settings(2));
  ::unsetenv("NERVE_OPENCL_STAGING");
  const Kernel scale = make_scale();
  constexpr std::size_t n = (std::size_t{9} << 20) / sizeof(float) + 123;  // 9 MiB and a bit
  std::vector<float> initial(n);
  for (std::size_t i = 0; i < n; ++i) initial[i] = static_cast<float>(i % 1000);
  Buffer<float> x(ctx, initial);
  ctx.submit(TaskOptions{.device = 1}, scale, read_write(x), value(2.0f)).wait();
  const auto result = x.to_vector();
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(result[i], 2.0f * initial[i]) << i;
  EXPECT_GE(counters_of(ctx, 1).staged_copies, 2u) << "in and out through staging";
  // The device's staging pool is counted with the host's, and compaction gives its free buffers back.
  const std::size_t staged = ctx.stats().memory.staging_bytes_reserved;
  EXPECT_GE(staged, std::size_t{4} << 20) << "one 4 MiB staging buffer at least";
  EXPECT_GE(ctx.memory_compact(), staged);
  EXPECT_EQ(ctx.stats().memory.staging_bytes_reserved, 0u);
}

TEST_F(OpenclTest, SlicesAndValuesReachTheKernel) {
  Context& ctx = open(opencl_settings(2));
  const Kernel scale = make_scale();
  constexpr std::size_t n = 4096;  // slices of 1024 floats = 4 KiB: aligned on every device
  Buffer<float> x(ctx, std::vector<float>(n, 1.0f));
  for (std::size_t part = 0; part < 4; ++part) {
    ctx.spawn(TaskOptions{.device = 1}, scale, read_write(x.slice(part * 1024, 1024)),
              value(static_cast<float>(part + 2)));
  }
  ctx.wait_all();
  const auto result = x.to_vector();
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(result[i], static_cast<float>(i / 1024 + 2)) << i;
}

// Replicas are ranges of a few big driver buffers (memory.hpp): 200 small buffers need one
// clCreateBuffer, every kernel still sees exactly its buffer (a sub-buffer at the range's offset), and
// memory_compact() gives the emptied driver buffers back.
TEST_F(OpenclTest, ReplicasAreCarvedFromFewDriverBuffersAndCompactGivesThemBack) {
  Context& ctx = open(opencl_settings(2));
  const Kernel scale = make_scale();
  auto& node = dynamic_cast<detail::opencl::OpenclMemoryNode&>(ctx.impl()->devices[0]->memory());
  const std::size_t blocks_before = node.blocks();
  {
    std::vector<Buffer<float>> buffers;
    for (int i = 0; i < 200; ++i) buffers.emplace_back(ctx, std::vector<float>(1000, static_cast<float>(i)));
    for (auto& buffer : buffers) ctx.spawn(TaskOptions{.device = 1}, scale, read_write(buffer), value(2.0f));
    ctx.wait_all();
    EXPECT_LE(node.blocks(), blocks_before + 1) << "200 replicas of 4,000 bytes share one driver buffer";
    EXPECT_GE(node.replicas().stats().bytes_in_use, 200u * 4000);
    for (std::size_t i = 0; i < buffers.size(); ++i) {
      const auto result = buffers[i].to_vector();
      ASSERT_EQ(result.front(), 2.0f * static_cast<float>(i)) << i;
      ASSERT_EQ(result.back(), 2.0f * static_cast<float>(i)) << i;
    }
  }
  // A task may hold its buffer for a moment after wait_all() and to_vector() returned (release is
  // asynchronous; a loaded machine's test run caught one): expect_no_leaks() waits for it.
  expect_no_leaks(ctx);
  EXPECT_EQ(node.replicas().stats().bytes_in_use, 0u) << "freed buffers return their ranges";
  EXPECT_GE(ctx.memory_compact(), std::size_t{1} << 20) << "the emptied driver buffer goes back";
  EXPECT_EQ(node.blocks(), 0u);
}

// The HOST_CACHED copy-back starts when a device task ends and nobody waits for it; a host write (a
// write-only task, a write mapping) that comes meanwhile must not be overwritten when it lands.
TEST_F(OpenclTest, HostCachedCopyBackNeverOverwritesNewerHostWrites) {
  Context& ctx = open(opencl_settings(2));
  const Kernel scale = make_scale();
  constexpr std::size_t n = 4096;
  for (int round = 0; round < 40; ++round) {
    Buffer<float> cached(ctx, std::vector<float>(n, 1.0f), BufferOptions{.host_cached = true});
    ctx.submit(TaskOptions{.device = 1}, scale, read_write(cached), value(3.0f)).wait();  // all 3
    ctx.submit(
        TaskOptions{.device = 0}, [](std::span<float> d) { std::fill(d.begin(), d.end(), 5.0f); },
        write(cached.slice(0, 1024)));
    {
      auto mapped = cached.slice(1024, 1024).map_write();
      std::fill(mapped.begin(), mapped.end(), 7.0f);
    }
    const std::vector<float> result = cached.to_vector();
    for (std::size_t i = 0; i < n; ++i) {
      const float expected = i < 1024 ? 5.0f : i < 2048 ? 7.0f : 3.0f;
      ASSERT_EQ(result[i], expected) << "round " << round << ", element " << i;
    }
  }
}

TEST_F(OpenclTest, StreamCountSpreadsLaunchesOverThatManyQueues) {
  for (const unsigned streams : {1u, 3u}) {
    Settings settings = opencl_settings(2);
    settings.set("gpu.stream_count", std::to_string(streams));
    run_in(settings, [&](Context& ctx) {
      const Kernel scale = make_scale();
      Buffer<float> x(ctx, std::vector<float>(8 * 1024, 1.0f));
      for (std::size_t part = 0; part < 8; ++part)
        ctx.spawn(TaskOptions{.device = 1}, scale, read_write(x.slice(part * 1024, 1024)), value(2.0f));
      ctx.wait_all();
      const detail::DeviceCounters counters = counters_of(ctx, 1);
      ASSERT_EQ(counters.launches_per_queue.size(), streams);
      EXPECT_EQ(ctx.impl()->devices[0]->capabilities().queues, streams);
      for (const std::uint64_t launches : counters.launches_per_queue) EXPECT_GT(launches, 0u) << streams;
      EXPECT_EQ(counters.launches, 8u);
      const auto result = x.to_vector();
      EXPECT_EQ(result, std::vector<float>(8 * 1024, 2.0f));
    });
  }
}

Kernel make_spin() {
  Kernel spin("spin");
  opencl::attach(spin, R"(
    __kernel void spin(__global float* x, int rounds) {
      const size_t i = get_global_id(0);
      float v = x[i];
      for (int k = 0; k < rounds; ++k) v = v * 0.999999f + 0.000001f;
      x[i] = v;
    })",
                 "spin");
  return spin;
}

bool has_pocl_cache_defect(const std::string& device_name) {
  for (const auto& each : detail::opencl::Platforms::instance().devices()) {
    if (each.name == device_name)
      return detail::opencl::PoclSizeGuard::is_needed_for(each.platform_name, each.cpu_device);
  }
  return false;
}

// PoCL's CPU drivers miscount a kernel's compiled work-group functions when a launch over a global size
// new to the kernel (which may make a new cache entry) runs while another launch of it is in flight,
// and abort the process later (pocl_size_guard.hpp). Such a launch waits for the kernel's launches in
// flight; one over a size seen before does not.
TEST_F(OpenclTest, ALaunchOverANewSizeWaitsForItsKernelsLaunchesInFlight) {
  Settings settings = opencl_settings(2);
  settings.set("gpu.stream_count", "4");
  Context& ctx = open(settings);
  if (!has_pocl_cache_defect(ctx.devices()[1].name)) GTEST_SKIP() << "device 1 is not PoCL on a CPU";
  const Kernel spin = make_spin();
  Buffer<float> narrow(ctx, std::vector<float>(1024, 1.0f)), wide(ctx, std::vector<float>(2048, 1.0f));
  Buffer<float> wider(ctx, std::vector<float>(4096, 1.0f));
  const auto held = [&] { return counters_of(ctx, 1).launches_held; };
  ctx.submit(TaskOptions{.device = 1}, spin, read_write(narrow), value(1)).wait();  // built, 1024 seen
  ctx.submit(TaskOptions{.device = 1}, spin, read_write(wide), value(1)).wait();    // new, none in flight
  EXPECT_EQ(held(), 0u) << "nothing was in flight to wait for";
  // `wider`'s data on the device already (through another kernel): a launch over it starts right
  // after the long one below, with no copy between that the long one could finish in.
  ctx.submit(TaskOptions{.device = 1}, make_scale(), read_write(wider), value(1.0f)).wait();
  constexpr int long_rounds = 1'000'000;  // a second or so: in flight when the next launch comes
  // A long launch, then one over a new, wider size on another buffer (another queue): held.
  ctx.spawn(TaskOptions{.device = 1}, spin, read_write(narrow), value(long_rounds));
  ctx.spawn(TaskOptions{.device = 1}, spin, read_write(wider), value(1));
  ctx.wait_all();
  EXPECT_EQ(held(), 1u);
  // Sizes seen before, behind a long launch: not held.
  ctx.spawn(TaskOptions{.device = 1}, spin, read_write(narrow), value(long_rounds));
  ctx.spawn(TaskOptions{.device = 1}, spin, read_write(wider), value(1));
  ctx.spawn(TaskOptions{.device = 1}, spin, read_write(wide), value(1));
  ctx.wait_all();
  EXPECT_EQ(held(), 1u);
  // A new size narrower than all before (the driver may pick another local size for it, and make a
  // new entry of that local size later, for a size between): held too.
  ctx.spawn(TaskOptions{.device = 1}, spin, read_write(narrow), value(long_rounds));
  ctx.spawn(TaskOptions{.device = 1}, spin, read_write(wider.slice(0, 512)), value(1));
  ctx.wait_all();
  EXPECT_EQ(held(), 2u);
  for (const float each : wider.to_vector()) ASSERT_GT(each, 0.99f);
}

// Recording, on device 1 with `streams` queues.
Settings recording_settings(int streams) {
  Settings settings = opencl_settings(2);
  settings.set("gpu.stream_count", std::to_string(streams));
  settings.set("perf.record_tasks", "true");
  return settings;
}

// spin_each(): `kernels` spin kernels of `rounds` on device 1, each on a buffer of its own, waited for.
void spin_each(Context& ctx, const Kernel& spin, int kernels, int rounds) {
  std::vector<Buffer<float>> buffers;
  for (int k = 0; k < kernels; ++k) buffers.emplace_back(ctx, std::vector<float>(1024, 1.0f));
  ctx.wait_all();
  for (auto& buffer : buffers) ctx.spawn(TaskOptions{.device = 1}, spin, read_write(buffer), value(rounds));
  ctx.wait_all();
}

// A kernel enqueued behind a long one on the same in-order queue starts when that one completes: its
// record's start (and the run time heft's models learn) counts from there, not from its enqueue.
TEST_F(OpenclTest, AQueuedKernelsTimeCountsFromWhenItsQueueWasFree) {
  Context& ctx = open(recording_settings(1));
  const Kernel spin = make_spin();
  Buffer<float> x(ctx, std::vector<float>(4096, 1.0f)), y(ctx, std::vector<float>(4096, 1.0f));
  ctx.submit(TaskOptions{.device = 1}, spin, read_write(y), value(1)).wait();  // built, data there
  ctx.submit(TaskOptions{.device = 1}, spin, read_write(x), value(1)).wait();
  ctx.spawn(TaskOptions{.name = "long", .device = 1}, spin, read_write(x), value(100000));
  // A tenth as long: its completion comes well after the long one's, whatever order the driver's
  // threads call back in.
  ctx.spawn(TaskOptions{.name = "short", .device = 1}, spin, read_write(y), value(10000));
  ctx.wait_all();
  const nlohmann::json stats = dump_stats(ctx);
  std::map<std::string, std::pair<double, double>> runs;  // name -> (start, end) in ms
  for (const auto& record : stats["tasks"]["records"])
    runs[record["name"]] = {record["start_ns"].get<double>() / 1e6, record["end_ns"].get<double>() / 1e6};
  const auto [long_start, long_end] = runs["long"];
  const auto [short_start, short_end] = runs["short"];
  ASSERT_GE(long_end - long_start, 20.0) << "the long kernel must be long enough to tell";
  EXPECT_GE(short_start, long_start + 0.8 * (long_end - long_start))
      << "the short kernel waited in the queue behind the long one: its run starts when that one ended";
  EXPECT_LE(short_start, short_end);
}

// The device's kernels' [start_ns, end_ns) from the stats' records, sorted by start.
std::vector<std::pair<std::int64_t, std::int64_t>> device_runs(const nlohmann::json& stats, int device) {
  std::vector<std::pair<std::int64_t, std::int64_t>> runs;
  for (const auto& record : stats["tasks"]["records"]) {
    if (record["device"] == device) runs.emplace_back(record["start_ns"], record["end_ns"]);
  }
  std::sort(runs.begin(), runs.end());
  return runs;
}

// One in-order queue runs one kernel at a time, and the records must say so: a kernel's end is when
// its completion was seen, which is when the next one's run begins. Ends taken when the completion
// thread got round to each report overlapped the next kernel by up to 17 ms, 29 times in 32.
TEST_F(OpenclTest, KernelsOnOneQueueHaveRecordsThatDoNotOverlap) {
  Context& ctx = open(recording_settings(1));
  const Kernel spin = make_spin();
  spin_each(ctx, spin, 1, 1);  // built, before the runs compared
  spin_each(ctx, spin, 24, 2000);
  const auto runs = device_runs(dump_stats(ctx), 1);
  ASSERT_EQ(runs.size(), 25u);
  std::size_t overlaps = 0;
  for (std::size_t k = 1; k < runs.size(); ++k) {
    EXPECT_LE(runs[k].first, runs[k].second);
    overlaps += runs[k].first < runs[k - 1].second ? 1 : 0;
  }
  // PoCL's callbacks now and then arrive out of order (docs/PERF_STATS.md), more often on a loaded
  // machine: such a pair may overlap (3 of 24 under ASan). Before, nearly every pair did (29 of 32).
  EXPECT_LT(overlaps, (runs.size() - 1) / 2)
      << overlaps << " of " << runs.size() - 1 << " kernels overlap the one before";
}

// A device's busy time is the time some kernel of it was running: with several queues running
// kernels at once, the union of their runs, not their sum (which made utilisation read 1.0 on a
// device busy 65 % of the time).
TEST_F(OpenclTest, DeviceBusyTimeCountsKernelsRunningAtOnceOnce) {
  Context& ctx = open(recording_settings(4));
  spin_each(ctx, make_spin(), 16, 20000);
  const nlohmann::json stats = dump_stats(ctx);
  const auto runs = device_runs(stats, 1);
  ASSERT_EQ(runs.size(), 16u);
  std::int64_t busy = 0, summed = 0, covered = 0;
  for (const auto& [start, end] : runs) {
    summed += end - start;
    if (end > covered) busy += end - std::max(start, covered);
    covered = std::max(covered, end);
  }
  const auto reported = stats["devices"][1]["busy_ns"].get<std::int64_t>();
  EXPECT_EQ(reported, busy) << "summed runs: " << summed;
  // Sorted by start: the last to start need not be the last to end (callbacks out of order).
  EXPECT_LE(reported, covered - runs.front().first);
}

TEST_F(OpenclTest, MaxPendingTransfersBoundsCopiesInFlight) {
  for (const unsigned bound : {1u, 64u}) {
    Settings settings = opencl_settings(2);
    settings.set("gpu.max_pending_transfers", std::to_string(bound));
    run_in(settings, [&](Context& ctx) {
      const Kernel scale = make_scale();
      constexpr std::size_t parts = 32, part_floats = 256 * 1024;  // 1 MiB copies: slow enough to overlap
      Buffer<float> x(ctx, std::vector<float>(parts * part_floats, 1.0f));
      // A host task holds every part until all the device tasks are queued behind it: they then
      // become ready together and ask for their 32 copies at once, however loaded the machine is.
      std::atomic<bool> all_submitted{false};
      ctx.spawn(
          [&all_submitted](std::span<float>) {
            while (!all_submitted.load(std::memory_order_acquire)) std::this_thread::yield();
          },
          read_write(x));
      for (std::size_t part = 0; part < parts; ++part)
        ctx.spawn(TaskOptions{.device = 1}, scale, read_write(x.slice(part * part_floats, part_floats)),
                  value(3.0f));
      all_submitted.store(true, std::memory_order_release);
      ctx.wait_all();
      EXPECT_EQ(x.to_vector(), std::vector<float>(parts * part_floats, 3.0f));
      const detail::DeviceCounters counters = counters_of(ctx, 1);
      EXPECT_LE(counters.peak_copies_in_flight, bound);
      if (bound == 1)
        EXPECT_GT(counters.copies_deferred, 0u) << "32 copies at once cannot all pass a gate of 1";
      if (bound == 64) EXPECT_EQ(counters.copies_deferred, 0u);
    });
  }
}

// Two devices of one platform (PoCL: POCL_DEVICES="pthread pthread", set by the test_opencl_two_devices
// CTest entry): with gpu.peer_access a buffer written on one device reaches the other by a
// device-to-device copy; without it, through host staging memory. Either way the data is right.
TEST_F(OpenclTest, TwoDevicesPeerAccessCopiesDirectlyOrStages) {
  if (opencl_device_count() < 2)
    GTEST_SKIP() << "one OpenCL device (PoCL: set POCL_DEVICES=\"pthread pthread\")";
  for (const bool peer : {true, false}) {
    Settings settings = opencl_settings(2);
    settings.set("gpu.peer_access", peer ? "true" : "false");
    run_in(settings, [&](Context& ctx) {
      const Kernel scale = make_scale();
      Buffer<float> x(ctx, std::vector<float>(64 * 1024, 1.0f));
      ctx.spawn(TaskOptions{.device = 1}, scale, read_write(x), value(2.0f));
      ctx.spawn(TaskOptions{.device = 2}, scale, read_write(x), value(3.0f));
      ctx.spawn(TaskOptions{.device = 1}, scale, read_write(x), value(5.0f));
      ctx.wait_all();
      EXPECT_EQ(x.to_vector(), std::vector<float>(64 * 1024, 30.0f)) << "peer_access " << peer;
      std::uint64_t direct = 0, staged = 0;
      for (const int device : {1, 2}) {
        const detail::DeviceCounters counters = counters_of(ctx, device);
        direct += counters.peer_copies;
        staged += counters.staged_copies;
      }
      if (peer) {
        EXPECT_EQ(direct, 2u) << "device 1 -> 2 and back, each one clEnqueueCopyBuffer";
        EXPECT_EQ(staged, 0u);
      } else {
        EXPECT_EQ(direct, 0u);
        EXPECT_GE(staged, 2u) << "both device-to-device moves go through host staging";
      }
    });
  }
}

TEST_F(OpenclTest, ProgramsAreCachedInMemoryAndOnDisk) {
  auto& counters = detail::opencl::program_cache_counters();
  const Kernel add = make_add();
  const auto run_once = [&] {
    run_in(opencl_settings(1), [&](Context& ctx) {
      Buffer<float> x(ctx, std::vector<float>(256, 1.0f)), y(ctx, std::vector<float>(256, 2.0f)), z(ctx, 256);
      for (int i = 0; i < 3; ++i) ctx.spawn(add, read(x), read(y), write(z));
      ctx.wait_all();
      EXPECT_EQ(z.to_vector(), std::vector<float>(256, 3.0f));
    });
  };
  const std::uint64_t builds = counters.builds.load(), loads = counters.binary_loads.load();
  run_once();
  EXPECT_EQ(counters.builds.load(), builds + 1) << "built once for three tasks";
  EXPECT_EQ(counters.binary_loads.load(), loads);
  ASSERT_TRUE(std::filesystem::exists(cache / "opencl"));
  EXPECT_FALSE(std::filesystem::is_empty(cache / "opencl"));
  run_once();  // a new context: the device's in-memory cache is gone, the disk one serves it
  EXPECT_EQ(counters.builds.load(), builds + 1) << "the second context loads the binary";
  EXPECT_EQ(counters.binary_loads.load(), loads + 1);
  Kernel add_with_options("add_with_options");
  opencl::attach(add_with_options, add_source, "add", opencl::Options{.build_options = "-DUNUSED=1"});
  run_in(opencl_settings(1), [&](Context& ctx) {
    Buffer<float> x(ctx, 64), y(ctx, 64), z(ctx, 64);
    ctx.submit(add_with_options, read(x), read(y), write(z)).wait();
  });
  EXPECT_EQ(counters.builds.load(), builds + 2) << "other build options are another program";
  // A damaged cache file is detected (its key material does not match) and the program rebuilt.
  for (const auto& entry : std::filesystem::directory_iterator(cache / "opencl")) {
    std::ofstream(entry.path(), std::ios::binary | std::ios::trunc) << "not a program binary";
  }
  run_once();
  EXPECT_EQ(counters.builds.load(), builds + 3) << "the damaged entry is rebuilt, not trusted";
  EXPECT_EQ(counters.binary_loads.load(), loads + 1);
  // So is one whose key material is intact but whose binary is not: PoCL crashed on such bytes
  // (backend audit), so they must not reach the driver.
  for (const auto& entry : std::filesystem::directory_iterator(cache / "opencl")) {
    std::fstream file(entry.path(), std::ios::binary | std::ios::in | std::ios::out);
    const auto size = static_cast<std::streamoff>(std::filesystem::file_size(entry.path()));
    for (std::streamoff at = size / 2; at < size - 8; at += 7) {
      file.seekg(at);
      const int byte = file.get();
      file.seekp(at);
      file.put(static_cast<char>(byte ^ 0x5a));
    }
  }
  run_once();
  EXPECT_EQ(counters.builds.load(), builds + 4) << "a damaged binary is rebuilt, not loaded";
  EXPECT_EQ(counters.binary_loads.load(), loads + 1);
  // A file longer than its header says is damaged too (its stated size is checked against the file's
  // before a buffer of that size is allocated).
  run_once();
  EXPECT_EQ(counters.binary_loads.load(), loads + 2) << "the rebuilt file serves again";
  for (const auto& entry : std::filesystem::directory_iterator(cache / "opencl"))
    std::ofstream(entry.path(), std::ios::binary | std::ios::app) << "trailing bytes";
  run_once();
  EXPECT_EQ(counters.builds.load(), builds + 5) << "a file of the wrong size is rebuilt, not loaded";
  EXPECT_EQ(counters.binary_loads.load(), loads + 2);
}

// Regression: the disk cache's key held the source and options but not the files the source
// includes, so a header changed between processes kept running the binary built from the old one. A
// program that includes files is now never cached on disk.
TEST_F(OpenclTest, ProgramsThatIncludeFilesSeeAChangedHeaderInALaterContext) {
  auto& counters = detail::opencl::program_cache_counters();
  const std::filesystem::path include = cache / "include";
  std::filesystem::create_directories(include);
  const auto run_with_header = [&](int value) {
    std::ofstream(include / "value.h", std::ios::trunc) << "#define VALUE " << value << ".0f\n";
    Kernel set("set_from_header");  // a new Kernel, as a later process would have
    opencl::attach(
        set, "#include \"value.h\"\n__kernel void set(__global float* x) { x[get_global_id(0)] = VALUE; }",
        "set", opencl::Options{.build_options = "-I" + include.string()});
    std::vector<float> result;
    run_in(opencl_settings(1), [&](Context& ctx) {  // a new context: only the disk cache outlives it
      Buffer<float> x(ctx, 64);
      ctx.submit(TaskOptions{.device = 1}, set, write(x)).wait();
      result = x.to_vector();
    });
    return result;
  };
  const std::uint64_t writes = counters.disk_writes.load(), loads = counters.binary_loads.load();
  EXPECT_EQ(run_with_header(1), std::vector<float>(64, 1.0f));
  EXPECT_EQ(run_with_header(2), std::vector<float>(64, 2.0f)) << "the binary built from the old header ran";
  EXPECT_EQ(counters.disk_writes.load(), writes) << "a program that includes files is not stored";
  EXPECT_EQ(counters.binary_loads.load(), loads);
  // What counts as reading files: conservative, a false alarm costs only a build.
  using detail::opencl::program_reads_files;
  EXPECT_TRUE(program_reads_files("#include <x.h>", ""));
  EXPECT_TRUE(program_reads_files("/* c */ #  include \"x.h\"", ""));
  EXPECT_TRUE(program_reads_files("#\\\ninclude \"x.h\"", ""));
  EXPECT_TRUE(program_reads_files("__kernel void k() {}", "-DX=1 -I/some/where"));
  EXPECT_TRUE(program_reads_files("__kernel void k() {}", "-include x.h"));
  EXPECT_FALSE(
      program_reads_files("#define INCLUDED 1\n__kernel void k() {}", "-DX=1 -cl-fast-relaxed-math"));
}

// Regression (BACKENDS.md review D1): the search for '#', blanks, "include" missed directives the
// preprocessor sees through other spellings — a comment between '#' and the name (comments become a
// space before directives are read) and the digraph %: — so those programs were cached on disk and a
// later process ran a binary built from an old header. The check is now a preprocessor-line check:
// comments removed, continued lines joined, then a line whose first token is # or %: and whose next
// is a directive that reads a file. Needs no device.
TEST(OpenclProgramCacheDetector, FindsEveryIncludeDirectiveSpelling) {
  using detail::opencl::program_reads_files;
  const std::vector<std::string> directives = {
      "#include <x.h>",
      "#include \"x.h\"\n__kernel void k() {}",
      "__kernel void k() {}\n  #  include \"x.h\"",
      "\t#\tinclude \"x.h\"",
      "#/**/include \"x.h\"",           // a comment is a space
      "# /* a\n b */ include \"x.h\"",  // a comment over lines too
      "/**/#include \"x.h\"",
      "/* c */ #  include \"x.h\"",
      "%:include \"x.h\"",  // the digraph of #
      "  %: /**/ include \"x.h\"",
      "#\\\ninclude \"x.h\"",                            // a continued line
      "#inc\\\nlude \"x.h\"",                            // continued inside the name
      "#\\  \ninclude \"x.h\"",                          // blanks after the backslash (GCC, clang accept)
      "#\\\r\ninclude \"x.h\"",                          // CRLF line ends
      "int a;\r#include \"x.h\"",                        // a lone CR ends a line for clang
      "// a comment \\\n#define A 1\n#include \"x.h\"",  // continued comment, then a directive
      "#include_next <x.h>",
      "#import \"x.h\"",
      "#embed \"data.bin\"",
      "#if __has_include(\"x.h\")\n#endif",
      "?\?=include \"x.h\"",                               // a trigraph, where they are on
      "const char* s = \"/*\";\n#include \"x.h\"\n// */",  // "/*" in a string opens no comment
      "char c = '\"';\n#include \"x.h\"",
  };
  for (const std::string& source : directives)
    EXPECT_TRUE(program_reads_files(source, "")) << "missed: " << source;
  const std::vector<std::string> not_directives = {
      "__kernel void k() {}",
      "#define INCLUDED 1\n__kernel void k() {}",
      "// #include \"x.h\"\n__kernel void k() {}",
      "/* #include \"x.h\" */ __kernel void k() {}",
      "/*\n#include \"x.h\"\n*/ __kernel void k() {}",
      "int x; /*\n*/ #include \"x.h\"",  // a comment is one space: this line began with int
      "__kernel void k() { const char* s = \"#include <x.h>\"; }",
      "int x; #include \"x.h\"",  // not a line's first token: an error, not a directive
      "#includes \"x.h\"",        // another name
      "#define STR(a) #a\n#define INC include",
      "## include",  // ## is a token of its own
  };
  for (const std::string& source : not_directives)
    EXPECT_FALSE(program_reads_files(source, "")) << "not a directive: " << source;
  EXPECT_TRUE(program_reads_files("__kernel void k() {}", "-DX=1 -I/some/where"));
  EXPECT_TRUE(program_reads_files("__kernel void k() {}", "-include x.h"));
  EXPECT_FALSE(program_reads_files("__kernel void k() {}", "-DX=1 -cl-fast-relaxed-math"));
}

// Regression: the key material joined its fields with newlines, so a source and options that hold
// newlines could give two different programs one key: the second then ran the first's binary, from
// memory or from disk. Each field is now preceded by its length.
TEST_F(OpenclTest, ProgramCacheKeysKeepSourceAndOptionsApart) {
  // The first source ends with a newline, its options are "-DV=1"; the second source lacks that
  // newline and its options start with it. Joined by newlines, both read "<body>\n\n-DV=1".
  auto& counters = detail::opencl::program_cache_counters();
  constexpr const char* body = "__kernel void fill(__global float* x) { x[get_global_id(0)] = V; }";
  Kernel first("first"), second("second");
  opencl::attach(first, std::string(body) + "\n", "fill", opencl::Options{.build_options = "-DV=1"});
  opencl::attach(second, body, "fill", opencl::Options{.build_options = "\n-DV=1"});
  const std::uint64_t builds = counters.builds.load(), hits = counters.memory_hits.load();
  run_in(opencl_settings(1), [&](Context& ctx) {
    Buffer<float> x(ctx, 64), y(ctx, 64);
    ctx.submit(TaskOptions{.device = 1}, first, write(x)).wait();
    EXPECT_EQ(x.to_vector(), std::vector<float>(64, 1.0f));
    try {
      ctx.submit(TaskOptions{.device = 1}, second, write(y)).wait();
    } catch (const Error&) {  // a driver may refuse a newline in the options (PoCL does): its own build
    }
  });
  EXPECT_EQ(counters.builds.load(), builds + 2) << "two programs, two builds (successful or not)";
  EXPECT_EQ(counters.memory_hits.load(), hits) << "the second program was served the first's build";
}

TEST_F(OpenclTest, BuildErrorFailsTheTaskWithTheCompilerLogAndCancelsDependents) {
  Context& ctx = open(opencl_settings(2));
  Kernel broken("broken kernel");
  opencl::attach(broken, "__kernel void broken(__global float* x) { x[0] = undeclared_name; }", "broken");
  Buffer<float> x(ctx, 16);
  Task failed = ctx.submit(broken, write(x));
  Task dependent = ctx.submit([](std::span<const float>) {}, read(x));
  try {
    failed.wait();
    FAIL() << "the program does not build";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::task_failed);
    const std::string message = error.what();
    EXPECT_EQ(message.rfind("kernel 'broken kernel': ", 0), 0u) << "names the Kernel first: " << message;
    EXPECT_NE(message.find("undeclared_name"), std::string::npos) << "the compiler log: " << message;
    EXPECT_NE(message.find("does not build on device "), std::string::npos)
        << "names the device: " << message;
  }
  EXPECT_THROW(dependent.wait(), TaskCancelled);
  // The failure is remembered: a second task fails at once with the same log, no rebuild.
  const auto builds = detail::opencl::program_cache_counters().builds.load();
  EXPECT_THROW(ctx.submit(broken, write(x)).wait(), Error);
  EXPECT_EQ(detail::opencl::program_cache_counters().builds.load(), builds);
}

// An entry the program lacks names the kernels it holds. A kernel named like an OpenCL C built-in
// (`mix`) is renamed by PoCL's compiler (`_cl_mix`): the source plainly has the function the message
// called missing, so the message says why. (It said only "no usable __kernel function 'mix'".)
TEST_F(OpenclTest, AnEntryTheProgramLacksNamesTheKernelsItHolds) {
  Context& ctx = open(opencl_settings(2));
  Buffer<float> x(ctx, 16);
  const auto failure_of = [&](const char* source, const char* entry) {
    Kernel kernel("k");
    opencl::attach(kernel, source, entry);
    try {
      ctx.submit(TaskOptions{.device = 1}, kernel, write(x)).wait();
    } catch (const Error& error) {
      return std::string(error.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(failure_of("__kernel void fill(__global float* x) { x[0] = 1; }", "fil"),
              ::testing::HasSubstr("no usable __kernel function 'fil'"));
  EXPECT_THAT(failure_of("__kernel void fill(__global float* x) { x[0] = 2; }", "fil"),
              ::testing::HasSubstr("; the program's kernels: fill"));
  const std::string renamed = failure_of("__kernel void mix(__global float* x) { x[0] = 3; }", "mix");
  if (renamed != "no error") {  // a compiler that keeps the name runs it
    EXPECT_THAT(renamed, ::testing::HasSubstr("'mix' is also an OpenCL C built-in function's name"))
        << renamed;
  }
}

TEST_F(OpenclTest, LaunchErrorsFailTheTask) {
  Context& ctx = open(opencl_settings(2));
  Kernel missing_entry("missing_entry");
  opencl::attach(missing_entry, add_source, "no_such_kernel");
  Kernel wrong_arity("wrong_arity");
  opencl::attach(wrong_arity, add_source, "scale");  // scale takes a buffer and a float
  // Each case on a buffer of its own: a failed writer's readers are cancelled (tested elsewhere).
  Buffer<float> x(ctx, 1024), y(ctx, 1024), z(ctx, 1024), w(ctx, 1024);
  try {
    ctx.submit(missing_entry, write(x)).wait();
    FAIL();
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("no_such_kernel"), std::string::npos) << error.what();
    // Which device lacks it, by context index: two PoCL devices have one OpenCL name.
    EXPECT_NE(std::string(error.what()).find("' on device "), std::string::npos) << error.what();
  }
  try {
    ctx.submit(wrong_arity, read_write(y)).wait();
    FAIL();
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("wrong_arity"), std::string::npos) << error.what();
  }
  try {
    ctx.submit(TaskOptions{.device = 1}, make_scale(), read_write(z.slice(3, 100)), value(1.0f)).wait();
    FAIL() << "a sub-buffer at byte 12 is not aligned";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("align"), std::string::npos) << error.what();
  }
  // The device still works afterwards.
  ctx.submit(TaskOptions{.device = 1}, make_scale(), read_write(w), value(2.0f)).wait();
}

// Arguments that do not fit their parameters fail the task with a message naming both; before,
// a value given for a pointer was taken for a cl_mem handle (PoCL crashed the process) and a buffer
// given for an 8-byte scalar passed its handle as a number.
TEST_F(OpenclTest, ArgumentsOfTheWrongKindFailTheTaskNamingTheParameter) {
  constexpr const char* source = R"(
    __kernel void copy(__global float* y, __global const float* x) { y[get_global_id(0)] = x[get_global_id(0)]; }
    __kernel void offset(__global float* y, ulong by) { y[get_global_id(0)] += (float)by; })";
  Context& ctx = open(opencl_settings(2));
  Kernel copy("copy");
  opencl::attach(copy, source, "copy");
  Kernel offset("offset");
  opencl::attach(offset, source, "offset");
  Buffer<float> y(ctx, std::vector<float>(64, 1.0f)), x(ctx, std::vector<float>(64, 2.0f));
  const auto failure = [&](auto&&... arguments) {
    try {
      ctx.submit(TaskOptions{.device = 1}, arguments...).wait();
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::invalid_argument);
      return std::string(error.what());
    }
    ADD_FAILURE() << "the call ran";
    return std::string();
  };
  EXPECT_THAT(failure(copy, write(y), value(std::uint64_t{0x1234})),
              ::testing::HasSubstr("value 0 goes to the __global pointer parameter 1 (float*) of OpenCL "
                                   "function 'copy', but it takes a buffer access"));
  Buffer<float> z(ctx, std::vector<float>(64, 1.0f));
  EXPECT_THAT(failure(offset, read_write(z), read(x)),
              ::testing::HasSubstr("access 1 goes to the by-value parameter 1 (ulong)"));
  Buffer<float> w(ctx, std::vector<float>(64, 1.0f));
  EXPECT_THAT(failure(offset, read_write(w), value(1.0f)),
              ::testing::HasSubstr("value 0 has 4 bytes, not the size of the by-value parameter 1 (ulong)"));
  // Arguments that fit still run.
  Buffer<float> v(ctx, std::vector<float>(64, 1.0f));
  ctx.submit(TaskOptions{.device = 1}, offset, read_write(v), value(std::uint64_t{2})).wait();
  EXPECT_EQ(v.to_vector(), std::vector<float>(64, 3.0f));
}

// Placement by nerve never picks a device that cannot take a call's accesses as they are (a slice
// off the sub-buffer alignment) when the CPU can run the kernel: with the data on the device, under
// every policy, each such call used to fail there.
TEST_F(OpenclTest, AutomaticPlacementAvoidsTheDeviceForSlicesItCannotTake) {
  for (const char* policy : {"locality_aware_stealing", "eager", "heft"}) {
    SCOPED_TRACE(policy);
    Settings settings = opencl_settings(2);
    settings.set("scheduler.policy", policy);
    settings.set("perf.model_dir", (cache / "models").string());
    run_in(settings, [&](Context& ctx) {
      const Kernel scale = make_scale();
      Buffer<float> data(ctx, std::vector<float>(10 * 1000, 1.0f));
      ctx.submit(TaskOptions{.device = 1}, scale, read_write(data), value(2.0f)).wait();  // now on the device
      std::vector<Task> chunks;
      for (std::size_t chunk = 0; chunk < 10; ++chunk)  // 4000-byte slices: most start off 128 bytes
        chunks.push_back(ctx.submit(scale, read_write(data.slice(chunk * 1000, 1000)), value(3.0f)));
      for (Task& each : chunks) EXPECT_NO_THROW(each.wait());
      EXPECT_EQ(data.to_vector(), std::vector<float>(10 * 1000, 6.0f));
    });
  }
}

// A kernel whose OpenCL program does not build but whose CPU body works: once the build failed,
// placement leaves the device out for its calls. heft, calibrating the device's model, kept sending
// every call there (a failed call gives no sample): 39 of 40 calls failed. Then only the call that
// found the failure did, with the compiler log; now that one runs on the CPU body too.
TEST_F(OpenclTest, AProgramThatDoesNotBuildSendsLaterCallsToTheCpuBody) {
  Settings settings = opencl_settings(2);
  settings.set("scheduler.policy", "heft");
  settings.set("perf.model_dir", (cache / "models").string());
  run_in(settings, [&](Context& ctx) {
    Kernel half_broken("half broken");
    half_broken.cpu([](const KernelArgs& args) {
      for (float& v : args.span<float>(0)) v += 1.0f;
    });
    opencl::attach(half_broken, "__kernel void f(__global float* x) { x[0] = undeclared_name; }", "f");
    std::vector<Buffer<float>> buffers;
    for (int i = 0; i < 20; ++i) buffers.emplace_back(ctx, std::vector<float>(256, 0.0f));
    int failed = 0;
    for (auto& buffer : buffers) {
      try {
        ctx.submit(half_broken, read_write(buffer)).wait();
      } catch (const Error& error) {
        ++failed;
        EXPECT_NE(std::string(error.what()).find("undeclared_name"), std::string::npos) << error.what();
      }
    }
    EXPECT_EQ(failed, 0) << "even the call that found the broken program runs on the CPU body";
    int ran = 0;
    for (auto& buffer : buffers) {
      try {
        ran += buffer.to_vector() == std::vector<float>(256, 1.0f) ? 1 : 0;
      } catch (const TaskCancelled&) {  // the failed call's buffer: its read is cancelled
      }
    }
    EXPECT_EQ(ran + failed, 20);
    // Sent there on purpose, a call still fails at once.
    Buffer<float> forced(ctx, 256);
    EXPECT_THROW(ctx.submit(TaskOptions{.device = 1}, half_broken, write(forced)).wait(), Error);
  });
}

// scale_with(): make_scale()'s kernel with OpenCL launch options of the test's own.
Kernel scale_with(const std::string& name, opencl::Options options) {
  Kernel scale(name);
  scale.cpu([](const KernelArgs& args) {
    for (float& each : args.span<float>(0)) each *= args.value<float>(0);
  });
  opencl::attach(scale, add_source, "scale", std::move(options));
  return scale;
}

// heft_recording(): two workers and the OpenCL device under heft, models in `models`, tasks recorded.
Settings heft_recording(const std::filesystem::path& models) {
  Settings settings = opencl_settings(2);
  settings.set("scheduler.policy", "heft");
  settings.set("perf.model_dir", models.string());
  settings.set("perf.record_tasks", "true");
  return settings;
}

// lines_of(): a decision log's lines.
std::vector<std::string> lines_of(const std::filesystem::path& file) {
  std::vector<std::string> lines;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// succeeded_on(): how many recorded tasks named `name` succeeded on `device`.
std::size_t succeeded_on(const Context& ctx, const std::string& name, int device) {
  std::size_t count = 0;
  for (const TaskTimes& record : ctx.stats().task_records)
    count += record.name == name && record.device == device && record.status == "succeeded";
  return count;
}

// A call whose work sizes the device refuses (a local size that does not divide the global size
// taken from access 0, or one over the device's work-group limit) is known before placement: nerve
// places it where the kernel runs, under every policy, even with its data on the device; heft does
// not even weigh the device for it. Under heft every such call went to the device to calibrate it
// and failed (a failed call gives no sample): 19 of 20. Sent there on purpose, it still fails,
// saying why.
TEST_F(OpenclTest, CallsWithWorkSizesTheDeviceRefusesArePlacedWhereTheKernelRuns) {
  std::filesystem::create_directories(cache);
  for (const std::string policy : {"heft", "locality_aware_stealing", "eager"}) {
    SCOPED_TRACE(policy);
    Settings settings = opencl_settings(2);
    settings.set("scheduler.policy", policy);
    settings.set("perf.model_dir", (cache / ("models-" + policy)).string());
    const auto log = cache / ("decisions-" + policy + ".jsonl");
    if (policy == "heft") settings.set("perf.decision_log", log.string());
    ::testing::internal::CaptureStderr();
    run_in(settings, [&](Context& ctx) {
      const Kernel by_64 = scale_with("scale by 64", {.local_size = 64});
      const Kernel too_wide = scale_with("scale too wide", {.local_size = std::size_t{1} << 30});
      std::vector<Buffer<float>> buffers;
      for (int i = 0; i < 10; ++i) {
        buffers.emplace_back(ctx, std::vector<float>(1000, 1.0f));  // 1000: not a multiple of 64
        ctx.spawn(TaskOptions{.device = 1}, make_scale(), read_write(buffers.back()), value(1.0f));
      }
      ctx.wait_all();  // the data is on the device: locality would place the calls there
      for (auto& buffer : buffers) {
        EXPECT_NO_THROW(ctx.submit(by_64, read_write(buffer), value(2.0f)).wait());
        EXPECT_NO_THROW(ctx.submit(too_wide, read_write(buffer), value(3.0f)).wait());
      }
      for (auto& buffer : buffers) EXPECT_EQ(buffer.to_vector(), std::vector<float>(1000, 6.0f));
      Buffer<float> multiple(ctx, std::vector<float>(1024, 1.0f));  // a call the device takes
      EXPECT_NO_THROW(ctx.submit(TaskOptions{.device = 1}, by_64, read_write(multiple), value(2.0f)).wait());
      const auto forced_fails_saying = [&](const Kernel& kernel, Buffer<float>& buffer,
                                           const std::string& why) {
        try {
          ctx.submit(TaskOptions{.device = 1}, kernel, read_write(buffer), value(2.0f)).wait();
          ADD_FAILURE() << "a call forced onto the device ran with work sizes it refuses";
        } catch (const Error& error) {
          EXPECT_NE(std::string(error.what()).find(why), std::string::npos) << error.what();
        }
      };
      forced_fails_saying(by_64, buffers[0], "not a multiple of the local size 64");
      forced_fails_saying(too_wide, buffers[1], "work-group limit");
    });
    // None was tried on the device first: no launch refused, no device weighed.
    const std::string warnings = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(warnings.find("could not be launched"), std::string::npos) << warnings;
    if (policy != "heft") continue;
    std::size_t decisions = 0;
    for (const std::string& line : lines_of(log)) {
      if (line.find("\"kernel\":\"scale by 64\"") == std::string::npos &&
          line.find("\"kernel\":\"scale too wide\"") == std::string::npos)
        continue;
      ++decisions;
      EXPECT_NE(line.find("\"chosen\":0"), std::string::npos) << line;
      EXPECT_NE(line.find("left out"), std::string::npos) << line;
    }
    EXPECT_EQ(decisions, 20u);
  }
}

// A call whose arguments do not fit its OpenCL function (here one access too many) is refused when
// it is launched, as every call of the kernel would be: the call nerve placed runs on the CPU body,
// the device is left out for the kernel's later calls (one warning says so, and heft's decision log
// says why the CPU was alone), and a call sent there still fails.
TEST_F(OpenclTest, ACallTheDeviceRefusesAtLaunchRunsOnTheCpuBodyAndLaterOnesGoThere) {
  Settings settings = heft_recording(cache / "models");
  std::filesystem::create_directories(cache);
  const auto log = cache / "decisions.jsonl";
  settings.set("perf.decision_log", log.string());
  ::testing::internal::CaptureStderr();
  run_in(settings, [&](Context& ctx) {
    const Kernel mismatched = scale_with("mismatched", {});  // scale(x, factor), called with two accesses
    Buffer<float> unused(ctx, std::vector<float>(16, 0.0f));
    std::vector<Buffer<float>> buffers;
    for (int i = 0; i < 20; ++i) buffers.emplace_back(ctx, std::vector<float>(1024, 1.0f));
    int failed = 0;
    for (auto& buffer : buffers) {
      try {
        ctx.submit(mismatched, read_write(buffer), read(unused), value(2.0f)).wait();
      } catch (const Error& error) {
        if (failed++ == 0) ADD_FAILURE() << error.what();
      }
    }
    EXPECT_EQ(failed, 0);
    for (auto& buffer : buffers) EXPECT_EQ(buffer.to_vector(), std::vector<float>(1024, 2.0f));
    EXPECT_THROW(
        ctx.submit(TaskOptions{.device = 1}, mismatched, read_write(buffers[0]), read(unused), value(2.0f))
            .wait(),
        Error);
    for (const TaskTimes& record : ctx.stats().task_records) {
      if (record.device == 1 && record.status == "failed")
        EXPECT_EQ(record.start_ns, record.end_ns) << "no kernel ran: the record spans no time";
    }
    EXPECT_EQ(succeeded_on(ctx, "mismatched", 1), 0u);
  });
  const std::string warnings = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(warnings.find("kernel 'mismatched' could not be launched on device 1"), std::string::npos)
      << warnings;
  EXPECT_EQ(warnings.find("could not be launched"), warnings.rfind("could not be launched")) << "warned once";
  // The calls placed after the refusal had one candidate left, and the log says why it was alone.
  std::size_t alone = 0;
  for (const std::string& line : lines_of(log)) {
    if (line.find("\"mode\":\"only\"") == std::string::npos) continue;
    ++alone;
    EXPECT_NE(line.find("device 1 implements the kernel but is left out: its program did not build here, or "
                        "a launch of it was refused here"),
              std::string::npos)
        << line;
  }
  EXPECT_GE(alone, 18u);
}

// The decision log's reason for a call only one device could take names why the other was left
// out: it gave one list of every possible cause.
TEST_F(OpenclTest, TheDecisionLogSaysWhyADeviceWasLeftOut) {
  Settings settings = heft_recording(cache / "models");
  std::filesystem::create_directories(cache);
  const auto log = cache / "left_out.jsonl";
  settings.set("perf.decision_log", log.string());
  run_in(settings, [&](Context& ctx) {
    Buffer<float> x(ctx, std::vector<float>(1024, 1.0f));
    ctx.submit(scale_with("left_out", {}), read_write(x.slice(3, 100)), value(2.0f)).wait();
    EXPECT_EQ(x.to_vector()[3], 2.0f);
  });
  const std::vector<std::string> lines = lines_of(log);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_THAT(lines[0],
              ::testing::HasSubstr("device 1 implements the kernel but is left out: access 0 starts at "
                                   "byte 12, and this device starts a sub-buffer only at a multiple of"))
      << lines[0];
}

// A launch refused for its own sizes alone (a global size from Options::global_size that the local
// size does not divide, known only at launch) runs that call on the CPU body and leaves the device
// in: the kernel's calls the device takes still run there, and nothing warns.
TEST_F(OpenclTest, ACallRefusedAtLaunchForItsOwnSizesLeavesTheDeviceIn) {
  const Settings settings = heft_recording(cache / "models");
  ::testing::internal::CaptureStderr();
  run_in(settings, [&](Context& ctx) {
    const Kernel sized = scale_with(
        "sized", {.global_size = [](const KernelArgs& args) { return args.size_bytes(0) / sizeof(float); },
                  .local_size = 64});
    std::vector<Buffer<float>> buffers;
    for (int i = 0; i < 20; ++i)
      buffers.emplace_back(ctx, std::vector<float>(i % 2 == 0 ? 1000 : 1024, 1.0f));
    for (auto& buffer : buffers) EXPECT_NO_THROW(ctx.submit(sized, read_write(buffer), value(2.0f)).wait());
    for (auto& buffer : buffers) EXPECT_EQ(buffer.to_vector(), std::vector<float>(buffer.size(), 2.0f));
    EXPECT_GE(succeeded_on(ctx, "sized", 1), 1u) << "the device still runs the calls it takes";
  });
  const std::string warnings = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(warnings.find("could not be launched"), std::string::npos) << warnings;
}

// Calls nerve placed on the device before its program was found not to build (their data was there)
// fall back to the kernel's CPU body, as later calls do: all 16 used to fail with the compiler log,
// poisoning their buffers. Their data, valid only on the device, reaches the CPU first; each run is
// recorded where it ran; one warning names the kernel. Calls forced there, and calls of a kernel no
// other device runs, still fail with the compiler's log.
TEST_F(OpenclTest, CallsPlacedOnTheDeviceBeforeItsProgramFailedFallBackToTheCpuBody) {
  constexpr std::size_t calls = 16, size = 1024;
  for (const std::string policy : {"locality_aware_stealing", "eager", "heft"}) {
    SCOPED_TRACE(policy);
    Settings settings = opencl_settings(2);
    settings.set("scheduler.policy", policy);
    settings.set("perf.model_dir", (cache / ("models-" + policy)).string());
    settings.set("perf.record_tasks", "true");
    ::testing::internal::CaptureStderr();
    run_in(settings, [&](Context& ctx) {
      const Kernel scale = make_scale();
      Kernel half_broken("half broken");
      half_broken.cpu([](const KernelArgs& args) {
        for (float& v : args.span<float>(0)) v += 1.0f;
      });
      opencl::attach(half_broken, "__kernel void f(__global float* x) { x[0] += 1.0f /* ; */ }", "f");
      std::vector<Buffer<float>> buffers;
      std::vector<float> initial(size);
      std::iota(initial.begin(), initial.end(), 0.0f);
      for (std::size_t i = 0; i < calls; ++i) {
        buffers.emplace_back(ctx, initial, BufferOptions{.host_cached = i % 4 == 3});
        ctx.spawn(TaskOptions{.device = 1}, scale, read_write(buffers.back()), value(2.0f));
      }
      ctx.wait_all();  // the data is now valid on the device only (HOST_CACHED buffers: on both)
      std::vector<Task> placed;
      for (auto& buffer : buffers) placed.push_back(ctx.submit(half_broken, read_write(buffer)));
      int failed = 0;
      for (Task& task : placed) {
        try {
          task.wait();
        } catch (const Error& error) {
          if (failed++ == 0) ADD_FAILURE() << "a placed call failed: " << error.what();
        }
      }
      EXPECT_EQ(failed, 0);
      for (std::size_t i = 0; i < calls; ++i) {
        std::vector<float> result;
        try {
          result = buffers[i].to_vector();
        } catch (const TaskCancelled&) {
          ADD_FAILURE() << "buffer " << i << " is poisoned";
          continue;
        }
        for (std::size_t k = 0; k < size; ++k) {
          ASSERT_EQ(result[k], 2.0f * static_cast<float>(k) + 1.0f) << "buffer " << i << " element " << k;
        }
      }
      const ContextStats stats = ctx.stats();
      std::size_t recorded = 0;
      for (const TaskTimes& record : stats.task_records) {
        if (record.name != "half broken") continue;
        ++recorded;
        EXPECT_EQ(record.device, 0) << "recorded where it ran";
        EXPECT_GE(record.worker, 0);
        EXPECT_EQ(record.status, "succeeded");
      }
      EXPECT_EQ(recorded, calls);
      // Sent there on purpose, a call still fails, with the compiler's log.
      Buffer<float> forced(ctx, size);
      try {
        ctx.submit(TaskOptions{.device = 1}, half_broken, write(forced)).wait();
        ADD_FAILURE() << "forced onto a device whose program does not build";
      } catch (const Error& error) {
        EXPECT_EQ(error.code(), ErrorCode::task_failed);
        EXPECT_THAT(error.what(), ::testing::HasSubstr("kernel 'half broken'"));
      }
      // A kernel with no other body has nowhere to go: its placed calls fail with the compiler's log.
      Kernel broken("only broken");
      opencl::attach(broken, "__kernel void g(__global float* x) { x[0] = undeclared_name; }", "g");
      Buffer<float> alone(ctx, size);
      try {
        ctx.submit(broken, write(alone)).wait();
        ADD_FAILURE() << "no device runs it";
      } catch (const Error& error) {
        EXPECT_EQ(error.code(), ErrorCode::task_failed);
        EXPECT_THAT(error.what(), ::testing::HasSubstr("undeclared_name"));
      }
    });
    const std::string log = ::testing::internal::GetCapturedStderr();
    const auto count = [&](const std::string& text) {
      std::size_t found = 0;
      for (std::size_t at = log.find(text); at != std::string::npos; at = log.find(text, at + 1)) ++found;
      return found;
    };
    // One warning per kernel and device (with two devices, heft may try the second one too).
    EXPECT_EQ(count("kernel 'half broken' cannot run on device 1 (OpenCL device"), 1u) << log;
    EXPECT_LE(count("kernel 'half broken' cannot run on device"), opencl_device_count()) << log;
    EXPECT_THAT(log, ::testing::HasSubstr("fall back to the CPU workers"));
    EXPECT_THAT(log, ::testing::Not(::testing::HasSubstr("kernel 'only broken' cannot run")))
        << "nothing falls back: its calls fail, which says it";
  }
}

// A program that does not build is no run on the device: the failed call's record spans no time
// (start_ns = end_ns, when the failure was found) and the device's busy time stays 0 — as a program
// that builds is not counted either. It counted the compiler's time as the kernel's.
TEST_F(OpenclTest, AProgramThatDoesNotBuildTakesNoTimeOnTheDevice) {
  Settings settings = opencl_settings(2);
  settings.set("perf.record_tasks", "true");
  run_in(settings, [&](Context& ctx) {
    Kernel broken("broken for time");
    opencl::attach(broken, "__kernel void b(__global float* x) { x[0] = undeclared_name; }", "b");
    Buffer<float> x(ctx, 1024);
    EXPECT_THROW(ctx.submit(TaskOptions{.device = 1}, broken, write(x)).wait(), Error);
    const ContextStats stats = ctx.stats();
    ASSERT_EQ(stats.task_records.size(), 1u);
    const TaskTimes& record = stats.task_records[0];
    EXPECT_EQ(record.device, 1);
    EXPECT_EQ(record.status, "failed");
    EXPECT_GT(record.start_ns, 0);
    EXPECT_EQ(record.end_ns, record.start_ns)
        << "the build took " << record.end_ns - record.start_ns << " ns";
    EXPECT_EQ(stats.devices.at(1).busy_ns, 0u);
  });
}

// Calls of an OpenCL-only kernel cancelled before placement are finished by a worker, but they are
// no CPU runs: neither recorded nor counted among the CPU's tasks (they were counted as both).
TEST_F(OpenclTest, CancelledDeviceOnlyCallsAreNoCpuRuns) {
  Settings settings = opencl_settings(2);
  settings.set("perf.record_tasks", "true");
  Context& ctx = open(settings);
  Kernel broken("broken");
  opencl::attach(broken, "__kernel void broken(__global int* x) { x[0] = undeclared; }", "broken");
  Kernel increment("increment");  // no CPU body
  opencl::attach(increment, "__kernel void inc(__global int* x) { x[get_global_id(0)] += 1; }", "inc");
  Buffer<int> x(ctx, 64);
  ctx.spawn(broken, write(x));
  for (int i = 0; i < 20; ++i) ctx.spawn(increment, read_write(x));
  EXPECT_THROW(ctx.wait_all(), Error);
  const ContextStats stats = ctx.stats();
  EXPECT_EQ(stats.devices.at(0).tasks, 0u) << "the CPU ran nothing";
  for (const TaskTimes& record : stats.task_records) EXPECT_NE(record.device, 0) << record.name;
}

TEST_F(OpenclTest, GpuDevicesNoneLeavesOnlyTheCpuAndOpenclOnlyKernelsAreRefused) {
  Context& ctx = open(opencl_settings(2, "none"));
  EXPECT_EQ(ctx.devices().size(), 1u);
  Buffer<float> x(ctx, 16), y(ctx, 16), z(ctx, 16);
  try {
    ctx.spawn(make_add(), read(x), read(y), write(z));
    FAIL();
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::invalid_argument);
  }
}

}  // namespace
}  // namespace nerve::testing
