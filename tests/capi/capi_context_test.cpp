// C API: context creation and configuration, queries, perf stats, status strings, the last error.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "capi/settings_from_config.hpp"
#include "capi_test.hpp"

namespace nerve::testing {
namespace {

nerve_context_config_t hermetic_config() {
  nerve_context_config_t config = NERVE_CONTEXT_CONFIG_DEFAULT;
  config.use_environment = 0;
  return config;
}

nlohmann::json dump_stats(nerve_context_t* ctx) {
  const auto path =
      std::filesystem::temp_directory_path() / ("nerve_capi_stats_" + std::to_string(::getpid()) + ".json");
  EXPECT_EQ(nerve_context_dump_perf_stats(ctx, path.c_str()), NERVE_OK) << nerve_last_error();
  std::ifstream in(path);
  nlohmann::json json = nlohmann::json::parse(in);  // throws (failing the test) if not JSON
  std::filesystem::remove(path);
  return json;
}

TEST(CapiContext, InitWithDefaults) {
  ContextPtr ctx(nerve_init());
  ASSERT_NE(ctx, nullptr) << nerve_last_error();
  EXPECT_EQ(nerve_context_get_device_count(ctx.get()), 1);
  EXPECT_GE(nerve_context_get_worker_count(ctx.get()), 1);
  EXPECT_EQ(nerve_wait_all(ctx.get()), NERVE_OK);
}

TEST(CapiContext, NullConfigMeansDefaults) {
  ContextPtr ctx(nerve_init_with_config(nullptr));
  ASSERT_NE(ctx, nullptr) << nerve_last_error();
  EXPECT_EQ(nerve_context_get_device_count(ctx.get()), 1);
}

TEST(CapiContext, ThreadPoolSizeFieldIsHonoured) {
  nerve_context_config_t config = hermetic_config();
  config.thread_pool_size = 3;
  ContextPtr ctx(nerve_init_with_config(&config));
  ASSERT_NE(ctx, nullptr) << nerve_last_error();
  EXPECT_EQ(nerve_context_get_worker_count(ctx.get()), 3);
  EXPECT_EQ(dump_stats(ctx.get())["workers"].size(), 3u);
}

TEST(CapiContext, PerfCounterFieldsAreHonoured) {
  nerve_context_config_t config = hermetic_config();
  config.enable_perf_counter = 1;
  config.perf_counter_interval_ms = 10;
  ContextPtr ctx(nerve_init_with_config(&config));
  ASSERT_NE(ctx, nullptr) << nerve_last_error();
  EXPECT_EQ(ctx->runtime->config().perf.counter_interval, std::chrono::milliseconds(10));
  const nlohmann::json counters = dump_stats(ctx.get())["counters"];
  EXPECT_EQ(counters["enabled"], true);
  EXPECT_FALSE(counters["source"].get<std::string>().empty());
}

TEST(CapiContext, SpinFieldIsHonoured) {
  nerve_context_config_t config = hermetic_config();
  config.scheduler_spin_us = 7;
  ContextPtr ctx(nerve_init_with_config(&config));
  ASSERT_NE(ctx, nullptr) << nerve_last_error();
  EXPECT_EQ(ctx->runtime->config().scheduler.spin, std::chrono::microseconds(7));
  EXPECT_EQ(ctx->runtime->config().origin("scheduler.spin_us").source, ConfigSource::api);
}

TEST(CapiContext, SettingsArrayIsApplied) {
  const char* settings[] = {"parallel.thread_pool_size=2", " scheduler.policy = eager "};
  nerve_context_config_t config = hermetic_config();
  config.settings = settings;
  config.setting_count = 2;
  ContextPtr ctx(nerve_init_with_config(&config));
  ASSERT_NE(ctx, nullptr) << nerve_last_error();
  EXPECT_EQ(nerve_context_get_worker_count(ctx.get()), 2);
  EXPECT_EQ(ctx->runtime->config().scheduler.policy, SchedulerPolicy::eager);
}

TEST(CapiContext, SettingsArrayWinsOverField) {
  const char* settings[] = {"parallel.thread_pool_size=2"};
  nerve_context_config_t config = hermetic_config();
  config.thread_pool_size = 3;
  config.settings = settings;
  config.setting_count = 1;
  ContextPtr ctx(nerve_init_with_config(&config));
  ASSERT_NE(ctx, nullptr) << nerve_last_error();
  EXPECT_EQ(nerve_context_get_worker_count(ctx.get()), 2);
}

// The field's value is replaced, not checked: settings win even over a field out of range (0 here).
TEST(CapiContext, SettingsArrayWinsOverAnInvalidField) {
  const char* settings[] = {"gpu.max_pending_transfers=8"};
  nerve_context_config_t config = hermetic_config();
  config.max_pending_transfers = 0;
  config.settings = settings;
  config.setting_count = 1;
  ContextPtr ctx(nerve_init_with_config(&config));
  ASSERT_NE(ctx, nullptr) << nerve_last_error();
  EXPECT_EQ(ctx->runtime->config().gpu.max_pending_transfers, 8);
}

TEST(CapiContext, UnknownKeyFailsNamingTheKey) {
  const char* settings[] = {"scheduler.polcy=eager"};
  nerve_context_config_t config = hermetic_config();
  config.settings = settings;
  config.setting_count = 1;
  EXPECT_NERVE_ERROR(nerve_init_with_config(&config), NERVE_ERROR_INVALID_CONFIG, "scheduler.polcy");
  EXPECT_NE(std::string(nerve_last_error()).find("nerve_init_with_config"), std::string::npos);
}

TEST(CapiContext, BadValueFailsNamingTheKey) {
  nerve_context_config_t config = hermetic_config();
  config.scheduler_spin_us = -5;
  EXPECT_NERVE_ERROR(nerve_init_with_config(&config), NERVE_ERROR_INVALID_CONFIG, "scheduler.spin_us");
}

TEST(CapiContext, MalformedSettingFails) {
  const char* settings[] = {"parallel.thread_pool_size"};
  nerve_context_config_t config = hermetic_config();
  config.settings = settings;
  config.setting_count = 1;
  EXPECT_NERVE_ERROR(nerve_init_with_config(&config), NERVE_ERROR_INVALID_CONFIG, "key=value");
  const char* empty_key[] = {"=3"};
  config.settings = empty_key;
  EXPECT_NERVE_ERROR(nerve_init_with_config(&config), NERVE_ERROR_INVALID_CONFIG, "key=value");
}

TEST(CapiContext, NullSettingsAreInvalidArguments) {
  nerve_context_config_t config = hermetic_config();
  config.setting_count = 1;
  EXPECT_NERVE_ERROR(nerve_init_with_config(&config), NERVE_ERROR_INVALID_ARGUMENT, "settings");
  const char* settings[] = {nullptr};
  config.settings = settings;
  EXPECT_NERVE_ERROR(nerve_init_with_config(&config), NERVE_ERROR_INVALID_ARGUMENT, "settings[0]");
}

// enable_device_cache_hints is the seed's switch for gpu.cache_hints (cudaMemAdvise on managed memory;
// tests/backend/cuda_fake_test.cpp shows what it changes): it reaches the configuration both ways.
TEST(CapiContext, EnableDeviceCacheHintsSetsGpuCacheHints) {
  for (int value : {0, 1}) {
    nerve_context_config_t config = hermetic_config();
    config.enable_device_cache_hints = value;
    ContextPtr ctx(nerve_init_with_config(&config));
    EXPECT_NE(ctx, nullptr) << value << ": " << nerve_last_error();
    const Config loaded = Config::load(capi::settings_from_config(config));
    EXPECT_EQ(loaded.gpu.cache_hints, value != 0);
    EXPECT_EQ(loaded.origin("gpu.cache_hints").describe(), "api");
  }
}

// numa_memory_policy is the seed's integer for memory.numa_policy: 0 local, 1 interleave, 2+k
// preferred:k (the node is checked against the machine when a memory pool is created).
TEST(CapiContext, NumaMemoryPolicyReachesTheConfiguration) {
  for (int value : {0, 1, 2}) {
    nerve_context_config_t config = hermetic_config();
    config.numa_memory_policy = value;
    ContextPtr ctx(nerve_init_with_config(&config));
    EXPECT_NE(ctx, nullptr) << value << ": " << nerve_last_error();
  }
  nerve_context_config_t config = hermetic_config();
  config.numa_memory_policy = -5;
  EXPECT_NERVE_ERROR(nerve_init_with_config(&config), NERVE_ERROR_INVALID_CONFIG, "memory.numa_policy");
}

TEST(CapiContext, ConfigFile) {
  const auto path =
      std::filesystem::temp_directory_path() / ("nerve_capi_" + std::to_string(::getpid()) + ".yaml");
  std::ofstream(path) << "parallel:\n  thread_pool_size: 2\n";
  nerve_context_config_t config = hermetic_config();
  const std::string file = path.string();
  config.config_file = file.c_str();
  {
    ContextPtr ctx(nerve_init_with_config(&config));
    ASSERT_NE(ctx, nullptr) << nerve_last_error();
    EXPECT_EQ(nerve_context_get_worker_count(ctx.get()), 2);
  }
  std::ofstream(path) << "parallel:\n  thread_pool_sise: 2\n";
  EXPECT_NERVE_ERROR(nerve_init_with_config(&config), NERVE_ERROR_INVALID_CONFIG, "thread_pool_sise");
  EXPECT_NE(std::string(nerve_last_error()).find(file), std::string::npos) << "the message names the file";
  std::filesystem::remove(path);
  EXPECT_NERVE_ERROR(nerve_init_with_config(&config), NERVE_ERROR_INVALID_CONFIG, file);
}

TEST(CapiContext, UseEnvironmentFlag) {
  ::setenv("NERVE_PARALLEL_THREAD_POOL_SIZE", "7", 1);
  nerve_context_config_t config = NERVE_CONTEXT_CONFIG_DEFAULT;
  {
    ContextPtr ctx(nerve_init_with_config(&config));
    ASSERT_NE(ctx, nullptr) << nerve_last_error();
    EXPECT_EQ(nerve_context_get_worker_count(ctx.get()), 7);
  }
  {
    ContextPtr ctx(nerve_init());
    ASSERT_NE(ctx, nullptr) << nerve_last_error();
    EXPECT_EQ(nerve_context_get_worker_count(ctx.get()), 7);
  }
  config.use_environment = 0;
  config.thread_pool_size = 2;
  {
    ContextPtr ctx(nerve_init_with_config(&config));
    ASSERT_NE(ctx, nullptr) << nerve_last_error();
    EXPECT_EQ(nerve_context_get_worker_count(ctx.get()), 2);
  }
  ::unsetenv("NERVE_PARALLEL_THREAD_POOL_SIZE");
}

TEST(CapiContext, NullContextArguments) {
  EXPECT_NERVE_ERROR(nerve_context_get_device_count(nullptr), NERVE_ERROR_INVALID_ARGUMENT, "NULL");
  EXPECT_EQ(nerve_context_get_device_count(nullptr), -1);
  EXPECT_EQ(nerve_context_get_worker_count(nullptr), -1);
  EXPECT_EQ(nerve_wait_all(nullptr), NERVE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nerve_context_dump_perf_stats(nullptr, "x.json"), NERVE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nerve_buffer_alloc_unified(nullptr, 8, MEM_FLAG_READ), nullptr);
  EXPECT_EQ(nerve_task_pool_create(nullptr, 1), nullptr);
  nerve_shutdown(nullptr);  // accepted
}

// A context's handle after nerve_shutdown is kept as a tombstone: calls with it are errors that say
// so (they read freed memory, and crashed or said "the context is NULL").
TEST(CapiContext, CallsAfterShutdownAreErrorsThatSaySo) {
  for (int round = 0; round < 3; ++round) {
    nerve_context_t* ctx = nerve_init();
    ASSERT_NE(ctx, nullptr) << nerve_last_error();
    nerve_shutdown(ctx);
    EXPECT_NERVE_ERROR(nerve_context_get_worker_count(ctx), NERVE_ERROR_INVALID_ARGUMENT,
                       "has been shut down");
    EXPECT_EQ(nerve_context_get_device_count(ctx), -1);
    EXPECT_EQ(nerve_wait_all(ctx), NERVE_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(nerve_buffer_alloc_unified(ctx, 8, MEM_FLAG_READ), nullptr);
    EXPECT_EQ(nerve_task_pool_create(ctx, 1), nullptr);
    EXPECT_EQ(nerve_memory_compact(ctx), 0u);
    EXPECT_NERVE_ERROR(nerve_shutdown(ctx), NERVE_ERROR_INVALID_ARGUMENT,
                       "the context has been shut down already (a second nerve_shutdown)");
  }
}

// The tombstone keeps the handle's few hundred bytes, nothing more (nerve.h): the task names the
// context interned and its pools' table were kept with it for the rest of the process, ~130 bytes a
// name, and their tables, allocated after the task records, held the freed records' heap from the
// system (a repeated init/shutdown grew by ~200 KB each).
TEST(CapiContext, AShutDownContextKeepsOnlyItsHandle) {
  nerve_context_t* ctx = nerve_init();
  ASSERT_NE(ctx, nullptr) << nerve_last_error();
  for (int i = 0; i < 100; ++i) {
    nerve_task_t* task = nerve_task_create(
        +[](void*, nerve_device_t, void*) {}, nullptr);
    ASSERT_NE(task, nullptr);
    ASSERT_EQ(nerve_task_set_name(task, ("request-" + std::to_string(i)).c_str()), NERVE_OK);
    ASSERT_EQ(nerve_task_submit(ctx, task, NERVE_DEVICE_ANY), NERVE_OK) << nerve_last_error();
  }
  nerve_task_pool_t* pool = nerve_task_pool_create(ctx, 4);
  ASSERT_NE(pool, nullptr) << nerve_last_error();  // left for nerve_shutdown to destroy
  EXPECT_EQ(ctx->names.size(), 100u);
  nerve_shutdown(ctx);
  EXPECT_EQ(ctx->names.size(), 0u);
  EXPECT_EQ(ctx->names.bucket_count(), 1u) << "the names' table was kept";
  EXPECT_EQ(ctx->pools.bucket_count(), 1u) << "the pools' table was kept";
  EXPECT_EQ(ctx->buffers.capacity(), 0u);
  EXPECT_EQ(ctx->detached_pools.capacity(), 0u);
  EXPECT_NERVE_ERROR(nerve_wait_all(ctx), NERVE_ERROR_INVALID_ARGUMENT, "has been shut down");
}

// nerve_shutdown() waits for every task: a kernel still running when it starts may still query the
// context and submit follow-up work, which runs (nerve.h). The context used to be marked gone before
// its destruction waited, so such a kernel's submission was refused ("has been shut down").
struct ShutdownRace {
  nerve_context_t* ctx = nullptr;
  std::atomic<bool> parent_running{false};
  std::atomic<int> workers_seen{0};
  std::atomic<int> children_run{0};
  std::atomic<int> refused{0};
};
ShutdownRace* shutdown_race = nullptr;  // the kernels' descriptor-free access to the test's state

void shutdown_child(void*, nerve_device_t, nerve_stream_t) { shutdown_race->children_run.fetch_add(1); }

void shutdown_parent(void*, nerve_device_t, nerve_stream_t) {
  shutdown_race->parent_running.store(true);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // main is in nerve_shutdown() by now
  shutdown_race->workers_seen.store(nerve_context_get_worker_count(shutdown_race->ctx));
  if (nerve_task_submit(shutdown_race->ctx, nerve_task_create(shutdown_child, nullptr), NERVE_DEVICE_ANY) !=
      NERVE_OK)
    shutdown_race->refused.fetch_add(1);
}

// A pool such a kernel creates and leaves is destroyed by the shutdown like any other (nerve.h): it
// was created after the shutdown had destroyed the pools it found, and leaked with the whole runtime
// (LeakSanitizer: 324 kB in 134 allocations).
void shutdown_leaf(void*, nerve_device_t, nerve_stream_t) { shutdown_race->children_run.fetch_add(1); }

void shutdown_pool_maker(void*, nerve_device_t, nerve_stream_t) {
  shutdown_race->parent_running.store(true);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // main is in nerve_shutdown() by now
  nerve_task_pool_t* pool = nerve_task_pool_create(shutdown_race->ctx, 4);
  if (pool == nullptr) {
    shutdown_race->refused.fetch_add(1);
    return;
  }
  for (int i = 0; i < 4; ++i)
    (void)nerve_task_pool_submit(pool, nerve_task_create(shutdown_leaf, nerve_task_pool_alloc_desc(pool)));
  if (nerve_task_pool_launch(pool) != NERVE_OK) shutdown_race->refused.fetch_add(1);
}  // left to the shutdown

TEST(CapiContext, APoolAKernelLeavesDuringShutdownIsDestroyedByIt) {
  ShutdownRace race;
  shutdown_race = &race;
  nerve_context_config_t config = hermetic_config();
  config.thread_pool_size = 2;
  race.ctx = nerve_init_with_config(&config);
  ASSERT_NE(race.ctx, nullptr) << nerve_last_error();
  ASSERT_EQ(nerve_task_submit(race.ctx, nerve_task_create(shutdown_pool_maker, nullptr), NERVE_DEVICE_ANY),
            NERVE_OK);
  while (!race.parent_running.load()) std::this_thread::yield();
  nerve_shutdown(race.ctx);
  EXPECT_EQ(race.refused.load(), 0);
  EXPECT_EQ(race.children_run.load(), 4) << "the pool's tasks ran";
  shutdown_race = nullptr;  // the leak, if any, is LeakSanitizer's to report (make test-asan)
}

TEST(CapiContext, AKernelRunningDuringShutdownMaySubmitFollowUpWork) {
  for (const unsigned workers : {1u, 2u}) {
    ShutdownRace race;
    shutdown_race = &race;
    nerve_context_config_t config = hermetic_config();
    config.thread_pool_size = workers;
    race.ctx = nerve_init_with_config(&config);
    ASSERT_NE(race.ctx, nullptr) << nerve_last_error();
    ASSERT_EQ(nerve_task_submit(race.ctx, nerve_task_create(shutdown_parent, nullptr), NERVE_DEVICE_ANY),
              NERVE_OK)
        << nerve_last_error();
    // With a worker, the parent is running there when the shutdown starts; with none, it runs inside
    // the shutdown's own wait.
    if (workers > 1) {
      while (!race.parent_running.load()) std::this_thread::yield();
    }
    nerve_shutdown(race.ctx);
    EXPECT_EQ(race.refused.load(), 0) << workers << " worker(s)";
    EXPECT_EQ(race.children_run.load(), 1) << workers << " worker(s)";
    EXPECT_EQ(race.workers_seen.load(), static_cast<int>(workers));
    shutdown_race = nullptr;
  }
}
// Regression: nerve_wait_all() and nerve_shutdown() are refused inside a task (nerve.h), but only a
// task of the context named was looked for: inside a kernel of A, nerve_wait_all(B) waited (a hang
// when B's work waited for that kernel: a mapping of A's buffer it writes) and nerve_shutdown(B)
// shut B down.
struct TwoContexts {
  nerve_context_t* other = nullptr;
  nerve_status_t waited = NERVE_OK;
  nerve_status_t shut_down = NERVE_OK;
};
TwoContexts* two_contexts = nullptr;

void waits_for_the_other_context(void* /*data*/, nerve_device_t /*device*/, nerve_stream_t /*stream*/) {
  two_contexts->waited = nerve_wait_all(two_contexts->other);
  nerve_clear_last_error();
  nerve_shutdown(two_contexts->other);
  two_contexts->shut_down = nerve_last_status();
}

TEST(CapiContext, WaitAllAndShutdownOfAnotherContextInsideATaskAreRefused) {
  ContextPtr first = make_context(2);
  ContextPtr second = make_context(2);
  TwoContexts seen{second.get()};
  two_contexts = &seen;
  ASSERT_EQ(nerve_task_submit(first.get(), nerve_task_create(waits_for_the_other_context, nullptr),
                              NERVE_DEVICE_ANY),
            NERVE_OK);
  ASSERT_EQ(nerve_wait_all(first.get()), NERVE_OK);
  two_contexts = nullptr;
  EXPECT_EQ(seen.waited, NERVE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(seen.shut_down, NERVE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nerve_context_get_worker_count(second.get()), 2) << "the other context is still alive";
}

TEST(CapiContext, DumpPerfStatsWritesJson) {
  ContextPtr ctx = make_context(2);
  ASSERT_NE(ctx, nullptr);
  static std::atomic<int> runs{0};
  runs = 0;
  for (int i = 0; i < 10; ++i) {
    ASSERT_EQ(submit(
                  ctx.get(), +[](void*, nerve_device_t, nerve_stream_t) { ++runs; }, nullptr),
              NERVE_OK);
  }
  ASSERT_EQ(nerve_wait_all(ctx.get()), NERVE_OK);
  EXPECT_EQ(runs.load(), 10);
  const nlohmann::json json = dump_stats(ctx.get());
  EXPECT_EQ(json["schema"], "nerve.perf_stats/1");
  EXPECT_EQ(json["workers"].size(), 2u);
  EXPECT_GE(json["tasks"]["completed"].get<std::uint64_t>(), 10u);
  EXPECT_NERVE_ERROR(nerve_context_dump_perf_stats(ctx.get(), "/nonexistent-dir/perf.json"),
                     NERVE_ERROR_INVALID_ARGUMENT, "/nonexistent-dir/perf.json");
  EXPECT_NERVE_ERROR(nerve_context_dump_perf_stats(ctx.get(), nullptr), NERVE_ERROR_INVALID_ARGUMENT, "path");
}

TEST(CapiStatus, StringsAreStable) {
  EXPECT_STREQ(nerve_status_string(NERVE_OK), "ok");
  EXPECT_STREQ(nerve_status_string(NERVE_ERROR_INVALID_CONFIG), "invalid_config");
  EXPECT_STREQ(nerve_status_string(NERVE_ERROR_INVALID_ARGUMENT), "invalid_argument");
  EXPECT_STREQ(nerve_status_string(NERVE_ERROR_BUFFER_MISUSE), "buffer_misuse");
  EXPECT_STREQ(nerve_status_string(NERVE_ERROR_OUT_OF_MEMORY), "out_of_memory");
  EXPECT_STREQ(nerve_status_string(NERVE_ERROR_TASK_FAILED), "task_failed");
  EXPECT_STREQ(nerve_status_string(NERVE_ERROR_CANCELLED), "cancelled");
  EXPECT_STREQ(nerve_status_string(NERVE_ERROR_NOT_SUPPORTED), "not_supported");
  EXPECT_STREQ(nerve_status_string(NERVE_ERROR_BUSY), "busy");
  EXPECT_STREQ(nerve_status_string(NERVE_ERROR_INTERNAL), "internal");
  EXPECT_STREQ(nerve_status_string(static_cast<nerve_status_t>(42)), "unknown");
}

TEST(CapiStatus, LastErrorPersistsUntilTheNextFailureAndCanBeCleared) {
  nerve_clear_last_error();
  EXPECT_STREQ(nerve_last_error(), "");
  EXPECT_EQ(nerve_last_status(), NERVE_OK);
  EXPECT_EQ(nerve_wait_all(nullptr), NERVE_ERROR_INVALID_ARGUMENT);
  const std::string message = nerve_last_error();
  EXPECT_NE(message.find("nerve_wait_all"), std::string::npos) << message;
  EXPECT_STREQ(nerve_status_string(NERVE_OK), "ok");  // a successful call
  EXPECT_EQ(nerve_last_error(), message);
  nerve_clear_last_error();
  EXPECT_STREQ(nerve_last_error(), "");
}

TEST(CapiStatus, LastErrorIsPerThread) {
  nerve_clear_last_error();
  EXPECT_EQ(nerve_wait_all(nullptr), NERVE_ERROR_INVALID_ARGUMENT);
  const std::string main_message = nerve_last_error();
  std::string other_before;
  std::string other_after;
  nerve_status_t other_status = NERVE_OK;
  std::thread other([&] {
    other_before = nerve_last_error();
    nerve_task_set_name(nullptr, "x");
    other_after = nerve_last_error();
    other_status = nerve_last_status();
  });
  other.join();
  EXPECT_EQ(other_before, "") << "a new thread starts without an error";
  EXPECT_NE(other_after.find("nerve_task_set_name"), std::string::npos) << other_after;
  EXPECT_EQ(other_status, NERVE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nerve_last_error(), main_message)
      << "another thread's failure does not touch this thread's error";
  EXPECT_EQ(nerve_last_status(), NERVE_ERROR_INVALID_ARGUMENT);
}

TEST(CapiContext, MemoryCompactReturnsFreedBufferMemory) {
  nerve_context_config_t config = hermetic_config();
  ContextPtr first(nerve_init_with_config(&config));
  ContextPtr second(nerve_init_with_config(&config));
  ASSERT_NE(first, nullptr) << nerve_last_error();
  ASSERT_NE(second, nullptr) << nerve_last_error();
  for (nerve_context_t* ctx : {first.get(), second.get()}) {
    for (int i = 0; i < 8; ++i) {
      nerve_buffer_t* buffer = nerve_buffer_alloc(ctx, std::size_t{1} << 20, NERVE_DEVICE_ANY, 0);
      ASSERT_NE(buffer, nullptr) << nerve_last_error();
      EXPECT_EQ(nerve_buffer_free(buffer), NERVE_OK) << nerve_last_error();
    }
  }
  const nlohmann::json before = dump_stats(first.get())["memory"];
  EXPECT_GT(before["host_bytes_reserved"].get<std::size_t>(), 0u);
  EXPECT_EQ(before["host_bytes_in_use"].get<std::size_t>(), 0u);

  const std::size_t from_first = nerve_memory_compact(first.get());
  EXPECT_GT(from_first, 0u);
  EXPECT_EQ(dump_stats(first.get())["memory"]["host_bytes_reserved"].get<std::size_t>(),
            before["host_bytes_reserved"].get<std::size_t>() - from_first);
  // The seed's call without a context reaches the other live context.
  EXPECT_GT(openclaw_memory_compact(), 0u);
  EXPECT_EQ(openclaw_memory_compact(), 0u) << "nothing left in either context";
}

TEST(CapiContext, MemoryCompactRefusesNull) {
  EXPECT_EQ(nerve_memory_compact(nullptr), 0u);
  EXPECT_EQ(nerve_last_status(), NERVE_ERROR_INVALID_ARGUMENT);
}

}  // namespace
}  // namespace nerve::testing
