// Backend plugins end to end: a plugin built in tests/backend/plugins is found on NERVE_PLUGIN_PATH,
// its devices are selected by gpu.devices and run kernel tasks; a plugin of another ABI version, a
// library without the entry symbol and a Backend that fails make context creation fail with a
// message naming the file; a launch() that throws fails its task as a reported failure does.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <memory>
#include <string>
#include <thread>

#include <dlfcn.h>

#include <gmock/gmock.h>

#include "nerve/nerve.h"

#include "backend/registry.hpp"
#include "capi/handles.hpp"
#include "cuda_support.hpp"
#include "opencl_support.hpp"
#include "plugins/sim_implementation.hpp"

namespace nerve::testing {
namespace {

Kernel make_increment() {
  Kernel increment("increment");
  increment.cpu([](const KernelArgs& args) {
    for (int& each : args.span<int>(0)) each += args.value<int>(0);
  });
  return increment;
}

// A context with NERVE_PLUGIN_PATH = `directory` while it is created.
std::unique_ptr<Context> context_with_plugins(const char* directory, const std::string& devices,
                                              Settings settings = make_settings(2)) {
  ::setenv("NERVE_PLUGIN_PATH", directory, 1);
  settings.set("gpu.devices", devices);
  try {
    auto context = std::make_unique<Context>(settings);
    ::unsetenv("NERVE_PLUGIN_PATH");
    return context;
  } catch (...) {
    ::unsetenv("NERVE_PLUGIN_PATH");
    throw;
  }
}

std::string creation_error(const char* directory, const std::string& devices = "all") {
  try {
    (void)context_with_plugins(directory, devices);
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::invalid_config);
    return error.what();
  }
  ADD_FAILURE() << "creating the context should fail";
  return {};
}

TEST(BackendPlugin, DevicesOfAPluginRunKernelTasks) {
  auto context = context_with_plugins(NERVE_TEST_PLUGIN_DIR, "sim");
  const auto devices = context->devices();
  ASSERT_EQ(devices.size(), 3u) << "the CPU workers and the plugin's two devices";
  for (int i = 1; i <= 2; ++i) {
    EXPECT_EQ(devices[static_cast<std::size_t>(i)].backend, "sim");
    EXPECT_EQ(devices[static_cast<std::size_t>(i)].name, "sim" + std::to_string(i - 1));
    EXPECT_EQ(devices[static_cast<std::size_t>(i)].memory_node, i);
  }
  {
    const Kernel increment = make_increment();
    Buffer<int> data(*context, std::vector<int>(4096, 0));
    // Every chunk visits the CPU workers and both plugin devices, in order: the data moves each time.
    for (int round = 0; round < 3; ++round) {
      for (std::size_t chunk = 0; chunk < 4; ++chunk) {
        for (int device = 0; device < 3; ++device)
          context->spawn(TaskOptions{.device = device}, increment, read_write(data.slice(chunk * 1024, 1024)),
                         value(1));
      }
    }
    context->wait_all();
    EXPECT_EQ(data.to_vector(), std::vector<int>(4096, 9));
    EXPECT_GT(context->stats().bytes_transferred, 0u);
  }
  context->wait_all();
  expect_no_leaks(*context);
}

// A plugin device runs its own queues and copies: nerve reports (nerve-info, stats) the bounds it was
// opened with, gpu.stream_count and gpu.max_pending_transfers.
TEST(BackendPlugin, CapabilitiesReportTheBoundsThePluginWasOpenedWith) {
  Settings settings = make_settings(2);
  settings.set("gpu.stream_count", "3");
  settings.set("gpu.max_pending_transfers", "7");
  auto context = context_with_plugins(NERVE_TEST_PLUGIN_DIR, "sim", settings);
  ASSERT_FALSE(context->impl()->devices.empty());
  for (const auto& device : context->impl()->devices) {
    const detail::DeviceCapabilities capabilities = device->capabilities();
    EXPECT_EQ(capabilities.queues, 3u);
    EXPECT_EQ(capabilities.max_pending_transfers, 7u);
  }
}

TEST(BackendPlugin, GpuDevicesSelectsAmongPluginDevicesByIndexAndName) {
  // Built-in OpenCL devices (if any) come first: sim0 and sim1 are the last two.
  const std::size_t first = opencl_device_count();
  auto by_index = context_with_plugins(NERVE_TEST_PLUGIN_DIR, std::to_string(first + 1));
  ASSERT_EQ(by_index->devices().size(), 2u);
  EXPECT_EQ(by_index->devices()[1].name, "sim1");
  auto by_name = context_with_plugins(NERVE_TEST_PLUGIN_DIR, "SIM0");
  ASSERT_EQ(by_name->devices().size(), 2u);
  EXPECT_EQ(by_name->devices()[1].name, "sim0");
  auto none = context_with_plugins(NERVE_TEST_PLUGIN_DIR, "none");
  EXPECT_EQ(none->devices().size(), 1u);
  try {
    (void)context_with_plugins(NERVE_TEST_PLUGIN_DIR, "tpu");
    FAIL() << "no device is called tpu";
  } catch (const ConfigError& error) {
    EXPECT_EQ(error.key(), "gpu.devices");
    EXPECT_NE(std::string(error.what()).find("sim0"), std::string::npos)
        << "lists what exists: " << error.what();
  }
}

TEST(BackendPlugin, AnotherAbiVersionIsRefusedWithAClearError) {
  const std::string message = creation_error(NERVE_TEST_PLUGIN_OLD_ABI_DIR);
  EXPECT_NE(message.find("libnerve-backend-oldabi.so"), std::string::npos) << message;
  EXPECT_NE(message.find("ABI version 999"), std::string::npos) << message;
  EXPECT_NE(message.find("rebuild the plugin"), std::string::npos) << message;
}

TEST(BackendPlugin, ALibraryWithoutTheEntrySymbolIsRefused) {
  const std::string message = creation_error(NERVE_TEST_PLUGIN_NO_SYMBOL_DIR);
  EXPECT_NE(message.find("libnerve-backend-nosymbol.so"), std::string::npos) << message;
  EXPECT_NE(message.find("no entry symbol 'nerve_backend_entry'"), std::string::npos) << message;
}

TEST(BackendPlugin, AFileThatIsNoLibraryIsRefusedWithTheLoadersMessage) {
  const std::string message = creation_error(NERVE_TEST_PLUGIN_BROKEN_DIR);
  EXPECT_NE(message.find("libnerve-backend-broken.so"), std::string::npos) << message;
  EXPECT_NE(message.find("dlopen failed"), std::string::npos) << message;
}

// The environment variable `name` (one of the test plugin's, sim_plugin.cpp) is `value` while one of
// these lives.
class SimPluginSetting {
 public:
  SimPluginSetting(const char* name, const char* value) : name_(name) { ::setenv(name, value, 1); }
  ~SimPluginSetting() { ::unsetenv(name_); }
  SimPluginSetting(const SimPluginSetting&) = delete;
  SimPluginSetting& operator=(const SimPluginSetting&) = delete;

 private:
  const char* name_;
};

// The test plugin fails the way SIM_PLUGIN_FAIL says while one of these lives.
class SimPluginFails : SimPluginSetting {
 public:
  explicit SimPluginFails(const char* mode) : SimPluginSetting("SIM_PLUGIN_FAIL", mode) {}
};

// thread_count(): the process's threads once the count has settled. A thread that was joined may
// still be listed in /proc/self/task for a moment (it is reaped after its joiner returns), which
// under load made a count taken right after a context's destruction one too high.
std::size_t thread_count() {
  const auto count = [] {
    const std::filesystem::directory_iterator tasks("/proc/self/task");
    return static_cast<std::size_t>(std::distance(begin(tasks), end(tasks)));
  };
  std::size_t last = count();
  for (int stable = 0, round = 0; stable < 3 && round < 200; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const std::size_t now = count();
    stable = now == last ? stable + 1 : 0;
    last = now;
  }
  return last;
}

const std::string sim_plugin_file = std::string(NERVE_TEST_PLUGIN_DIR) + "/libnerve-backend-sim.so";

// perf.enable_counters: the first sample marks the end of construction, devices opened included
// (it was taken before the devices were opened, so the first interval held their start-up).
TEST(BackendPlugin, TheFirstCounterSampleComesAfterTheDevicesAreOpen) {
  const SimPluginFails slow("slow_open");
  Settings settings = make_settings(2);
  settings.set("perf.enable_counters", "true");
  settings.set("perf.counter_interval_ms", "60000");
  auto context = context_with_plugins(NERVE_TEST_PLUGIN_DIR, "sim0", settings);
  const CounterStats counters = context->stats().counters;
  ASSERT_FALSE(counters.samples.empty());
  EXPECT_GE(counters.samples.front().time_ns, 300'000'000) << "sampled before the slow device opened";
}

// Regression: the plugin's own std::runtime_error escaped Context(), naming neither plugin nor file.
TEST(BackendPlugin, ABackendWhoseDescribeThrowsIsRefusedNamingTheFile) {
  const SimPluginFails failing("describe");
  const std::string message = creation_error(NERVE_TEST_PLUGIN_DIR);
  EXPECT_NE(message.find(sim_plugin_file), std::string::npos) << message;
  EXPECT_NE(message.find("Backend::describe(0) threw: sim: describe() failed on purpose"), std::string::npos)
      << message;
}

// The context started its workers, and opened sim0, before sim1's open() threw: all of them are
// stopped and closed again (sim0's thread included), and the error names the file.
TEST(BackendPlugin, ABackendWhoseOpenThrowsIsRefusedAndWhatWasStartedIsStopped) {
  (void)context_with_plugins(NERVE_TEST_PLUGIN_DIR, "sim");  // loads the plugin: no thread of its own
  const std::size_t threads_before = thread_count();
  {
    const SimPluginFails failing("open_throw");
    const std::string message = creation_error(NERVE_TEST_PLUGIN_DIR, "sim");
    EXPECT_NE(message.find(sim_plugin_file), std::string::npos) << message;
    EXPECT_NE(message.find("Backend::open(1) threw: sim: open() failed on purpose"), std::string::npos)
        << message;
  }
  EXPECT_EQ(thread_count(), threads_before) << "threads of the failed context (workers, sim0's) still run";
}

// Regression: this was Error(internal), a bug of nerve's, and named only the plugin's name.
TEST(BackendPlugin, ABackendWhoseOpenReturnsNoDeviceIsRefusedNamingTheFile) {
  (void)context_with_plugins(NERVE_TEST_PLUGIN_DIR, "sim");
  const std::size_t threads_before = thread_count();
  {
    const SimPluginFails failing("open_null");
    const std::string message = creation_error(NERVE_TEST_PLUGIN_DIR, "sim");
    EXPECT_NE(message.find(sim_plugin_file), std::string::npos) << message;
    EXPECT_NE(message.find("Backend::open(1) returned no device ('sim1')"), std::string::npos) << message;
  }
  EXPECT_EQ(thread_count(), threads_before);
}

// Regression: Task::wait() threw the plugin's own std::runtime_error. A launch() that throws fails
// the task as done(false, message) does: Error(task_failed) naming kernel, task and device.
// A copy of a task's input that the device reports failed fails that task (task_failed, naming the
// copy and the device's message) — it was no predecessor's doing, so it is not cancelled; its
// dependents are cancelled with it as the cause, and the device goes on working.
TEST(BackendPlugin, AFailedCopyFailsTheTaskThatNeededIt) {
  auto context = context_with_plugins(NERVE_TEST_PLUGIN_DIR, "sim");
  {
    const Kernel increment = make_increment();
    Buffer<int> data(*context, std::vector<int>(64, 0));
    Task failed;
    Task dependent;
    {
      const SimPluginFails failing("copy_fail");
      failed = context->submit(TaskOptions{.name = "needs-data", .device = 1}, increment, read_write(data),
                               value(1));
      dependent =
          context->submit(TaskOptions{.name = "after", .device = 0}, increment, read_write(data), value(1));
      try {
        failed.wait();
        ADD_FAILURE() << "the task should fail";
      } catch (const TaskCancelled& error) {
        ADD_FAILURE() << "cancelled, not failed: " << error.what();
      } catch (const Error& error) {
        EXPECT_EQ(error.code(), ErrorCode::task_failed);
        EXPECT_NE(std::string(error.what()).find("sim: copy failed on purpose"), std::string::npos)
            << error.what();
      }
      EXPECT_THROW(dependent.wait(), TaskCancelled);
    }
    EXPECT_EQ(failed.status(), TaskStatus::failed);
    EXPECT_EQ(dependent.status(), TaskStatus::cancelled);
    Buffer<int> other(*context, std::vector<int>(64, 0));
    context->submit(TaskOptions{.device = 1}, increment, read_write(other), value(2)).wait();
    EXPECT_EQ(other.to_vector(), std::vector<int>(64, 2));
  }
  EXPECT_NO_THROW(context->wait_all()) << "task.wait() reported the failure (once)";
  expect_no_leaks(*context);
}

// A HOST_CACHED copy-back the device reports failed is no task's failure: the device's copy stays the
// valid one. The next writer of those bytes, on the host (where the copy would land over its bytes) or
// on the device (which the copy reads), waits for it to be over, needs none of its bytes, and runs.
// (Both failed with the copy's error.)
TEST(BackendPlugin, AFailedHostCachedCopyBackFailsNoWriterThatWaitedForIt) {
  const SimPluginSetting slow_copies("SIM_PLUGIN_COPY_DELAY_US", "100000");  // in flight when they start
  auto context = context_with_plugins(NERVE_TEST_PLUGIN_DIR, "sim0");
  {
    const Kernel increment = make_increment();
    Kernel fill("fill");
    fill.cpu([](const KernelArgs& args) {
      for (int& each : args.span<int>(0)) each = args.value<int>(0);
    });
    Buffer<int> data(*context, std::vector<int>(64, 0), BufferOptions{.host_cached = true});
    {
      const SimPluginFails failing("copy_back_fail");
      context->spawn(TaskOptions{.device = 1}, increment, read_write(data), value(1));
      Task host_writer = context->submit(
          TaskOptions{.name = "host-writer", .device = 0},
          [](std::span<int> values) { std::fill(values.begin(), values.end(), 5); }, write(data));
      EXPECT_NO_THROW(host_writer.wait());
      context->spawn(TaskOptions{.device = 1}, increment, read_write(data), value(1));
      Task device_writer =
          context->submit(TaskOptions{.name = "device-writer", .device = 1}, fill, write(data), value(9));
      EXPECT_NO_THROW(device_writer.wait());
    }
    EXPECT_EQ(data.to_vector(), std::vector<int>(64, 9));
  }
  EXPECT_NO_THROW(context->wait_all());
  expect_no_leaks(*context);
}

TEST(BackendPlugin, ALaunchThatThrowsFailsTheTaskWithTaskFailed) {
  auto context = context_with_plugins(NERVE_TEST_PLUGIN_DIR, "sim");
  {
    const Kernel increment = make_increment();
    Buffer<int> data(*context, std::vector<int>(64, 0));
    Task failed;
    {
      const SimPluginFails failing("launch_throw");
      failed = context->submit(TaskOptions{.name = "throwing-launch", .device = 1}, increment,
                               read_write(data), value(1));
      try {
        failed.wait();
        ADD_FAILURE() << "the task should fail";
      } catch (const Error& error) {
        EXPECT_EQ(error.code(), ErrorCode::task_failed);
        EXPECT_STREQ(
            error.what(),
            "kernel 'increment' (task 'throwing-launch') failed on device 'sim0': its launch() threw: "
            "sim: launch() failed on purpose");
      }
    }
    EXPECT_EQ(failed.status(), TaskStatus::failed);
    // The device is still usable: the next launch (on new data) runs.
    Buffer<int> other(*context, std::vector<int>(64, 0));
    context->submit(TaskOptions{.device = 1}, increment, read_write(other), value(2)).wait();
    EXPECT_EQ(other.to_vector(), std::vector<int>(64, 2));
  }
  context->wait_all();
  expect_no_leaks(*context);
}

TEST(BackendPlugin, MissingDirectoriesOnThePathAreSkipped) {
  auto context = context_with_plugins("/nonexistent/nerve/plugins::" NERVE_TEST_PLUGIN_DIR, "sim");
  EXPECT_EQ(context->devices().size(), 3u);
}

// nerve_buffer_alloc's preferred_device: the host copy of a buffer meant for a device is in the memory
// of the NUMA node the device is attached to (sim1 says node 1 under SIM_PLUGIN_NUMA); the CPU and
// NERVE_DEVICE_ANY leave it to memory.numa_policy (node 0 for the application thread).
TEST(BackendPlugin, ABufferPreferringADeviceLivesOnThatDevicesNumaNode) {
  ::setenv("NERVE_PLUGIN_PATH", NERVE_TEST_PLUGIN_DIR, 1);
  ::setenv("SIM_PLUGIN_NUMA", "1", 1);
  const char* settings[] = {"topology.synthetic=pack:1 numa:2 core:1 pu:1", "gpu.devices=sim",
                            "parallel.thread_pool_size=2"};
  nerve_context_config_t config = NERVE_CONTEXT_CONFIG_DEFAULT;
  config.settings = settings;
  config.setting_count = std::size(settings);
  config.use_environment = 0;  // NERVE_PLUGIN_PATH is no NERVE_<SECTION>_<KEY> setting: still read
  const std::unique_ptr<nerve_context_t, void (*)(nerve_context_t*)> context(nerve_init_with_config(&config),
                                                                             nerve_shutdown);
  ::unsetenv("NERVE_PLUGIN_PATH");
  ::unsetenv("SIM_PLUGIN_NUMA");
  nerve_context_t* ctx = context.get();
  ASSERT_NE(ctx, nullptr) << nerve_last_error();
  ASSERT_EQ(ctx->runtime->devices().at(2).numa_node, 1);
  constexpr std::size_t bytes = std::size_t{1} << 20;
  const auto in_use = [&](std::size_t node) {
    return ctx->runtime->stats().memory.host_pools.at(node).bytes_in_use;
  };
  const std::size_t before[2] = {in_use(0), in_use(1)};
  nerve_buffer_t* for_sim1 = nerve_buffer_alloc(ctx, bytes, 2, 0);
  ASSERT_NE(for_sim1, nullptr) << nerve_last_error();
  EXPECT_GE(in_use(1) - before[1], bytes) << "on sim1's node";
  EXPECT_LT(in_use(0) - before[0], bytes);
  for (const nerve_device_t device : {NERVE_DEVICE_ANY, NERVE_DEVICE_CPU}) {
    const std::size_t node1 = in_use(1);
    nerve_buffer_t* anywhere = nerve_buffer_alloc(ctx, bytes, device, 0);
    ASSERT_NE(anywhere, nullptr) << nerve_last_error();
    EXPECT_EQ(in_use(1), node1) << "device " << device << ": the policy's node 0";
    EXPECT_EQ(nerve_buffer_free(anywhere), NERVE_OK);
  }
  EXPECT_EQ(nerve_buffer_free(for_sim1), NERVE_OK);
}

// A plugin's NUMA node that the topology lacks (sim1 says node 1 on a machine of one node) is unknown,
// with a warning naming it: it was shown as the device's locality (nerve-info) and kept in devices().
TEST(BackendPlugin, ANumaNodeTheMachineLacksIsUnknown) {
  ::setenv("SIM_PLUGIN_NUMA", "1", 1);
  Settings settings = make_settings(2);
  settings.set("topology.synthetic", "pack:1 core:2 pu:1");
  ::testing::internal::CaptureStderr();
  const std::unique_ptr<Context> context = context_with_plugins(NERVE_TEST_PLUGIN_DIR, "sim", settings);
  const std::string warnings = ::testing::internal::GetCapturedStderr();
  ::unsetenv("SIM_PLUGIN_NUMA");
  const auto devices = context->devices();
  ASSERT_EQ(devices.size(), 3u);
  EXPECT_EQ(devices[1].numa_node, 0) << "sim0 says node 0, which exists";
  EXPECT_EQ(devices[2].numa_node, -1) << "sim1's node 1 is not on this machine";
  EXPECT_THAT(warnings, ::testing::HasSubstr("device 'sim1' says it is attached to NUMA node 1, which this "
                                             "machine's topology does not have (nodes 0 to 0)"));
}

// Regression: "dir:dir/", or a link to a plugin file beside the file itself, listed the plugin twice:
// create() ran once, but each device was opened twice, each with a memory node of its own.
TEST(BackendPlugin, APluginReachedByTwoPathsIsOneBackend) {
  const std::string good = NERVE_TEST_PLUGIN_DIR;
  const std::string path = good + ":" + good + "/:" + NERVE_TEST_PLUGIN_LINK_DIR;
  auto context = context_with_plugins(path.c_str(), "sim");
  const auto devices = context->devices();
  ASSERT_EQ(devices.size(), 3u) << "the CPU workers, sim0 and sim1, each once";
  EXPECT_EQ(devices[1].name, "sim0");
  EXPECT_EQ(devices[2].name, "sim1");
}

// Regression: a directory named like a plugin was dlopen()ed, and every context failed.
TEST(BackendPlugin, ADirectoryNamedLikeAPluginIsSkippedWithAWarning) {
  const std::string path = std::string(NERVE_TEST_PLUGIN_DIRECTORY_DIR) + ":" + NERVE_TEST_PLUGIN_DIR;
  ::testing::internal::CaptureStderr();
  std::unique_ptr<Context> context;
  EXPECT_NO_THROW(context = context_with_plugins(path.c_str(), "sim"));
  const std::string warnings = ::testing::internal::GetCapturedStderr();
  ASSERT_NE(context, nullptr);
  EXPECT_EQ(context->devices().size(), 3u);
  EXPECT_NE(warnings.find("skipping '" NERVE_TEST_PLUGIN_DIRECTORY_DIR "/libnerve-backend-directory.so'"),
            std::string::npos)
      << warnings;
}

// Regression (BACKENDS.md review D4): a NERVE_PLUGIN_PATH entry that does not exist (a typo), or a
// file where a directory belongs, was ignored without a word, even at debug level: it looked like
// "the plugin has no devices". Each is a warning naming it, once per process; the other entries
// still load.
TEST(BackendPlugin, AMissingPluginPathEntryIsAWarning) {
  const std::string missing = "/nonexistent/nerve-plugin-dir-d4";
  const std::string file = std::string(NERVE_TEST_PLUGIN_DIR) + "/libnerve-backend-sim.so";
  const std::string path = missing + ":" + file + ":" + NERVE_TEST_PLUGIN_DIR;
  ::testing::internal::CaptureStderr();
  std::unique_ptr<Context> context;
  EXPECT_NO_THROW(context = context_with_plugins(path.c_str(), "sim"));
  std::string warnings = ::testing::internal::GetCapturedStderr();
  ASSERT_NE(context, nullptr);
  EXPECT_EQ(context->devices().size(), 3u) << "the directory that exists still gives its plugin";
  EXPECT_NE(warnings.find("warn: NERVE_PLUGIN_PATH: '" + missing + "' does not exist"), std::string::npos)
      << warnings;
  EXPECT_NE(warnings.find("warn: NERVE_PLUGIN_PATH: '" + file + "' is not a directory"), std::string::npos)
      << warnings;
  context.reset();
  ::testing::internal::CaptureStderr();
  EXPECT_NO_THROW(context = context_with_plugins(path.c_str(), "sim"));
  warnings = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(warnings.find(missing), std::string::npos) << "once per process: " << warnings;
}

// Regression (BACKENDS.md review D5): a plugin that found no device had no reason to give, so
// nerve-info listed nothing for it (NERVE_INFO.md promises a line below the device list) and
// gpu.devices naming it said only "is in this build but found no device;" — odd for a plugin loaded
// at run time. The plugin ABI has no reason of its own: nerve says what it knows, that
// Backend::device_count() returned 0, and from which file.
TEST(BackendPlugin, APluginWithoutDevicesSaysWhy) {
  const SimPluginSetting none("SIM_PLUGIN_COUNT", "0");
  const std::string message = creation_error(NERVE_TEST_PLUGIN_DIR, "sim");
  // The file is the path the process first loaded the plugin by (this directory, or a link to it).
  const std::string reason = "no device (its Backend::device_count() returned 0; plugin file ";
  EXPECT_NE(message.find("the plugin backend 'sim' was loaded but found no device, and says why: " + reason),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("libnerve-backend-sim.so)"), std::string::npos) << message;
  EXPECT_EQ(message.find("in this build"), std::string::npos) << message;
  // A context that does not name it is made without its devices; the backend keeps the reason, which
  // nerve-info lists (tests/backend/CMakeLists.txt runs nerve-info so).
  for (const DeviceInfo& device : context_with_plugins(NERVE_TEST_PLUGIN_DIR, "all")->devices())
    EXPECT_NE(device.backend, "sim");
  ::setenv("NERVE_PLUGIN_PATH", NERVE_TEST_PLUGIN_DIR, 1);
  const auto all = detail::backends();
  ::unsetenv("NERVE_PLUGIN_PATH");
  const auto sim =
      std::find_if(all.begin(), all.end(), [](const auto& each) { return each->name() == "sim"; });
  ASSERT_NE(sim, all.end());
  EXPECT_TRUE((*sim)->unavailable_reason().starts_with(reason)) << (*sim)->unavailable_reason();
}

// Entry::create() that threw is called again by the next context, and once it succeeded never again
// (backend_plugin.hpp: once per process until it succeeds). libnerve-backend-simretry.so is a file of
// its own, which no other test loads.
TEST(BackendPlugin, ACreateThatFailedIsCalledAgainUntilItSucceeds) {
  {
    const SimPluginFails failing("create");
    const std::string message = creation_error(NERVE_TEST_PLUGIN_RETRY_DIR, "sim");
    EXPECT_NE(message.find("creating its backend failed: sim: create() failed on purpose"), std::string::npos)
        << message;
  }
  EXPECT_EQ(context_with_plugins(NERVE_TEST_PLUGIN_RETRY_DIR, "sim")->devices().size(), 3u);
  const SimPluginFails failing("create");
  EXPECT_EQ(context_with_plugins(NERVE_TEST_PLUGIN_RETRY_DIR, "sim")->devices().size(), 3u)
      << "the backend created already is used";
}

// sim_peak_copies(): the most copies a sim device had in flight at once since the last reset.
std::size_t sim_peak_copies(bool reset) {
  void* library = ::dlopen(sim_plugin_file.c_str(), RTLD_NOLOAD | RTLD_LAZY);
  if (library == nullptr) throw std::runtime_error("the sim plugin is not loaded");
  const auto peak = reinterpret_cast<std::size_t (*)(bool)>(::dlsym(library, "sim_plugin_peak_copies"));
  ::dlclose(library);  // the reference RTLD_NOLOAD took; nerve's keeps it loaded
  return peak(reset);
}

// Regression: gpu.max_pending_transfers was only passed to the plugin (OpenOptions), which may ignore
// it: 40 copies were in flight with the setting at 2. nerve holds the later ones back itself.
TEST(BackendPlugin, CopiesInFlightToAPluginDeviceStayWithinMaxPendingTransfers) {
  const SimPluginSetting slow_copies("SIM_PLUGIN_COPY_DELAY_US", "2000");
  Settings settings = make_settings(2);
  settings.set("gpu.max_pending_transfers", "2");
  auto context = context_with_plugins(NERVE_TEST_PLUGIN_DIR, "sim0", settings);
  {
    const Kernel increment = make_increment();
    std::vector<Buffer<int>> buffers;
    for (int i = 0; i < 16; ++i) buffers.emplace_back(*context, std::vector<int>(1024, i));
    (void)sim_peak_copies(/*reset=*/true);
    for (auto& buffer : buffers)
      context->spawn(TaskOptions{.device = 1}, increment, read_write(buffer), value(1));
    context->wait_all();
    for (int i = 0; i < 16; ++i)
      EXPECT_EQ(buffers[static_cast<std::size_t>(i)].to_vector(), std::vector<int>(1024, i + 1));
    EXPECT_LE(sim_peak_copies(false), 2u) << "copies the plugin had in flight at once";
    const detail::DeviceCounters counters = context->impl()->devices.at(0)->counters();
    EXPECT_EQ(counters.copies, 32u) << "16 buffers there and back";
    EXPECT_GT(counters.copies_deferred, 0u);
    EXPECT_LE(counters.peak_copies_in_flight, 2u);
  }
  context->wait_all();
  expect_no_leaks(*context);
}

// A memory node goes by its device's name. With sim0 alone selected, device 1 is sim0, and its node
// is 'sim0' in an out_of_memory message and a failed copy's message: it was named after its backend
// and number, 'sim1', which is the other device's name.
TEST(BackendPlugin, AMemoryNodeIsNamedAfterItsDevice) {
  const SimPluginSetting small("SIM_PLUGIN_MEMORY", "1048576");
  auto context = context_with_plugins(NERVE_TEST_PLUGIN_DIR, "sim0");
  ASSERT_EQ(context->devices().at(1).name, "sim0");
  EXPECT_EQ(context->impl()->devices.at(0)->memory().name(), "sim0");
  {
    const Kernel increment = make_increment();
    Buffer<int> big(*context, std::vector<int>(524288, 1), BufferOptions{.name = "big"});
    try {
      context->submit(TaskOptions{.device = 1}, increment, read_write(big), value(1)).wait();
      ADD_FAILURE() << "2 MiB cannot fit a 1 MiB device";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::out_of_memory);
      EXPECT_THAT(error.what(), ::testing::HasSubstr("memory node 'sim0'"));
    }
    Buffer<int> data(*context, std::vector<int>(64, 0));
    const SimPluginFails failing("copy_fail");
    try {
      context->submit(TaskOptions{.device = 1}, increment, read_write(data), value(1)).wait();
      ADD_FAILURE() << "its copy fails";
    } catch (const Error& error) {
      EXPECT_THAT(error.what(), ::testing::HasSubstr("from host to sim0 failed"));
    }
  }
  context->wait_all();
}

void add_hundred(const detail::KernelCall& call) {
  for (int& each : KernelArgs(call).span<int>(0)) each += 100;
}

// A kernel with the sim plugin's own implementation for `kind` (and no CPU body).
Kernel make_sim_kernel(DeviceKind kind) {
  Kernel kernel("add_hundred");
  kernel.implement(kind, std::make_shared<sim::Implementation>(&add_hundred));
  return kernel;
}

// Regression: Kernel::implement(DeviceKind::test, ...) was refused, though test is the default kind of
// plugin devices: a plugin of that kind could never be given its own implementation.
TEST(BackendPlugin, APluginDeviceOfTheDefaultKindRunsTheKernelsImplementationForTest) {
  auto context = context_with_plugins(NERVE_TEST_PLUGIN_DIR, "sim0");
  ASSERT_EQ(context->devices().at(1).kind, DeviceKind::test);
  {
    const Kernel own = make_sim_kernel(DeviceKind::test);
    Kernel both = make_sim_kernel(DeviceKind::test);
    both.cpu([](const KernelArgs& args) {
      for (int& each : args.span<int>(0)) each += 1;
    });
    Buffer<int> data(*context, std::vector<int>(64, 0));
    context->submit(own, read_write(data)).wait();  // nerve's choice: sim0 alone runs it
    EXPECT_EQ(data.to_vector(), std::vector<int>(64, 100));
    context->submit(TaskOptions{.device = 1}, both, read_write(data)).wait();
    EXPECT_EQ(data.to_vector(), std::vector<int>(64, 200)) << "the plugin's implementation, not the CPU body";
  }
  context->wait_all();
  expect_no_leaks(*context);
}

// submit_everywhere(): `kernel` called `calls` times where nerve places it; each adds 100.
void expect_placed_calls_run(Context& context, const Kernel& kernel, int calls) {
  Buffer<int> data(context, std::vector<int>(256, 0));
  for (int i = 0; i < calls; ++i) EXPECT_NO_THROW(context.submit(kernel, read_write(data)).wait());
  EXPECT_EQ(data.to_vector(), std::vector<int>(256, 100 * calls));
}

// An explicit request for `device`, which does not run the kernel's implementation: refused at
// submit, naming the device's backend.
void expect_refused_on(Context& context, const Kernel& kernel, int device, const std::string& backend) {
  Buffer<int> data(context, std::vector<int>(256, 0));
  try {
    context.submit(TaskOptions{.device = device}, kernel, read_write(data)).wait();
    ADD_FAILURE() << "device " << device << " should be refused";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::invalid_argument) << error.what();
    EXPECT_NE(std::string(error.what()).find("not one that device " + std::to_string(device)),
              std::string::npos)
        << error.what();
    EXPECT_NE(std::string(error.what()).find("backend '" + backend + "'"), std::string::npos) << error.what();
  }
}

// Regression: with a plugin's devices of kind opencl beside PoCL's, a call of a kernel carrying the
// plugin's implementation for opencl went to the built-in device — even when nerve placed it — and
// failed with Error(internal) "reached OpenCL device ... without an OpenCL implementation".
TEST(BackendPlugin, BuiltInOpenclDevicesRunOnlyNervesOpenclPrograms) {
  NERVE_SKIP_WITHOUT_OPENCL();
  const SimPluginSetting kind("SIM_PLUGIN_KIND", "opencl");
  auto context = context_with_plugins(NERVE_TEST_PLUGIN_DIR, "all");
  int built_in = -1;
  for (const DeviceInfo& device : context->devices())
    if (device.backend == "opencl" && built_in < 0) built_in = device.index;
  ASSERT_GT(built_in, 0);
  {
    const Kernel kernel = make_sim_kernel(DeviceKind::opencl);
    expect_placed_calls_run(*context, kernel, 6);
    expect_refused_on(*context, kernel, built_in, "opencl");
  }
  context->wait_all();
}

// The same rule for the CUDA backend (on its fake driver), both ways: its devices run only
// cuda::attach's launchers, and a plugin's devices of kind cuda never receive those.
TEST(BackendPlugin, BuiltInCudaDevicesRunOnlyNervesCudaLaunchers) {
  const FakeCuda cuda(detail::cuda::FakeOptions{.devices = 1});
  const SimPluginSetting kind("SIM_PLUGIN_KIND", "cuda");
  auto context = context_with_plugins(NERVE_TEST_PLUGIN_DIR, "cuda-fake,sim0");
  ASSERT_EQ(context->devices().size(), 3u);
  ASSERT_EQ(context->devices()[1].backend, "cuda-fake");
  ASSERT_EQ(context->devices()[2].kind, DeviceKind::cuda);
  {
    const Kernel plugins = make_sim_kernel(DeviceKind::cuda);
    expect_placed_calls_run(*context, plugins, 4);
    expect_refused_on(*context, plugins, 1, "cuda-fake");
    Kernel nerves("add_hundred_cuda");
    cuda::attach(nerves, cpu_launcher([](const KernelArgs& args) {
                   for (int& each : args.span<int>(0)) each += 100;
                 }));
    expect_placed_calls_run(*context, nerves, 2);
    expect_refused_on(*context, nerves, 2, "sim");
  }
  context->wait_all();
}

// Regression: only "none" in lower case skipped the drivers; "None" selected nothing, but only after
// every backend and plugin had been loaded and asked for its devices: a failing plugin failed the context.
TEST(BackendPlugin, NoneInAnyCaseAsksNoPluginForItsDevices) {
  const SimPluginFails failing("describe");
  for (const char* none : {"none", "None", "NONE"}) {
    SCOPED_TRACE(none);
    std::unique_ptr<Context> context;
    ASSERT_NO_THROW(context = context_with_plugins(NERVE_TEST_PLUGIN_DIR, none));
    EXPECT_EQ(context->devices().size(), 1u);
  }
}

// Regression: a plugin device of kind cpu was opened, and nerve-info showed it as memory node 0.
TEST(BackendPlugin, APluginDeviceOfKindCpuIsRefused) {
  const SimPluginSetting kind("SIM_PLUGIN_KIND", "cpu");
  const std::string message = creation_error(NERVE_TEST_PLUGIN_DIR, "sim0");
  EXPECT_NE(message.find(sim_plugin_file), std::string::npos) << message;
  EXPECT_NE(message.find("device 0 ('sim0') of backend 'sim' declares DeviceKind::cpu"), std::string::npos)
      << message;
}

// Regression: a kind outside DeviceKind indexed the kernels' implementations out of bounds at the
// first submission (a crash), instead of refusing the plugin like a device of kind cpu.
TEST(BackendPlugin, APluginDeviceOfAKindOutsideTheEnumerationIsRefused) {
  const SimPluginSetting kind("SIM_PLUGIN_KIND", "out-of-range");
  const std::string message = creation_error(NERVE_TEST_PLUGIN_DIR, "sim0");
  EXPECT_NE(message.find(sim_plugin_file), std::string::npos) << message;
  EXPECT_NE(
      message.find("device 0 ('sim0') of backend 'sim' declares DeviceKind 7, which is no kind of device"),
      std::string::npos)
      << message;
}

// Regression: a device that runs Kernels' CPU bodies on memory it says a CPU cannot address was
// opened, and the bodies were given its device pointers to dereference.
TEST(BackendPlugin, CpuBodiesOnMemoryNotHostAddressableAreRefused) {
  const SimPluginSetting not_addressable("SIM_PLUGIN_NOT_ADDRESSABLE", "1");
  const std::string message = creation_error(NERVE_TEST_PLUGIN_DIR, "sim0");
  EXPECT_NE(message.find(sim_plugin_file), std::string::npos) << message;
  EXPECT_NE(message.find("runs Kernels' CPU bodies (runs_cpu_kernels) on memory a CPU cannot address"),
            std::string::npos)
      << message;
}

// Regression: memory_bytes 0 ("unknown") made a memory node of limit 0, where every task failed with
// out_of_memory. Now the plugin's allocate() decides: eviction makes room, then out_of_memory.
TEST(BackendPlugin, APluginDeviceOfUnknownMemorySizeIsBoundedByItsAllocator) {
  const SimPluginSetting unknown("SIM_PLUGIN_MEMORY", "0");
  const SimPluginSetting capacity("SIM_PLUGIN_CAPACITY", "3145728");  // 3 MiB
  auto context = context_with_plugins(NERVE_TEST_PLUGIN_DIR, "sim0");
  EXPECT_EQ(context->devices().at(1).memory_bytes, 0u);
  {
    const Kernel increment = make_increment();
    constexpr std::size_t two_mib = std::size_t{1} << 19;  // ints
    Buffer<int> first(*context, std::vector<int>(two_mib, 0));
    Buffer<int> second(*context, std::vector<int>(two_mib, 0));
    for (int round = 0; round < 2; ++round) {
      // Each evicts the other: both do not fit at once.
      context->submit(TaskOptions{.device = 1}, increment, read_write(first), value(1)).wait();
      context->submit(TaskOptions{.device = 1}, increment, read_write(second), value(1)).wait();
    }
    EXPECT_EQ(first.to_vector(), std::vector<int>(two_mib, 2));
    EXPECT_EQ(second.to_vector(), std::vector<int>(two_mib, 2));
    Buffer<int> too_big(*context, std::vector<int>(2 * two_mib, 0));
    try {
      context->submit(TaskOptions{.device = 1}, increment, read_write(too_big), value(1)).wait();
      ADD_FAILURE() << "4 MiB do not fit in 3";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::out_of_memory) << error.what();
      EXPECT_NE(std::string(error.what()).find("no limit"), std::string::npos) << error.what();
    }
  }
  context->wait_all();
  expect_no_leaks(*context);
}

void never_called(void* /*desc*/, nerve_device_t /*device*/, nerve_stream_t /*stream*/) {}

// Regression: the C API's messages about a plugin device of kind cuda said "CUDA devices can" run a C
// kernel and "this context has none", while Context::devices() listed a cuda device: the C launcher
// form is for the built-in CUDA backend's devices, and the messages say so.
TEST(BackendPlugin, CKernelsAreForTheBuiltInCudaBackendNotForPluginDevicesOfKindCuda) {
  const SimPluginSetting kind("SIM_PLUGIN_KIND", "cuda");
  ::setenv("NERVE_PLUGIN_PATH", NERVE_TEST_PLUGIN_DIR, 1);
  const char* settings[] = {"gpu.devices=sim0", "parallel.thread_pool_size=2"};
  nerve_context_config_t config = NERVE_CONTEXT_CONFIG_DEFAULT;
  config.settings = settings;
  config.setting_count = std::size(settings);
  config.use_environment = 0;
  const std::unique_ptr<nerve_context_t, void (*)(nerve_context_t*)> context(nerve_init_with_config(&config),
                                                                             nerve_shutdown);
  ::unsetenv("NERVE_PLUGIN_PATH");
  ASSERT_NE(context, nullptr) << nerve_last_error();
  ASSERT_EQ(context->runtime->devices().at(1).kind, DeviceKind::cuda);
  nerve_task_t* on_plugin = nerve_task_create(never_called, nullptr);
  EXPECT_EQ(nerve_task_submit(context.get(), on_plugin, 1), NERVE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(nerve_last_error()).find("the built-in CUDA backend's devices alone can"),
            std::string::npos)
      << nerve_last_error();
  nerve_task_t* cuda_only = nerve_task_create(never_called, nullptr);
  ASSERT_EQ(nerve_task_set_device_kinds(cuda_only, NERVE_DEVICE_KIND_CUDA), NERVE_OK);
  EXPECT_EQ(nerve_task_submit(context.get(), cuda_only, NERVE_DEVICE_ANY), NERVE_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(nerve_last_error()).find("no device of the built-in CUDA backend"), std::string::npos)
      << nerve_last_error();
}

}  // namespace
}  // namespace nerve::testing
