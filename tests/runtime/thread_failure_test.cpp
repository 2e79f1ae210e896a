// A thread the system refuses: every thread nerve starts (the workers, the counter sampler, a device's
// executor) is tried with its N-th creation failing as pthread_create fails under `ulimit -u` or
// `ulimit -v` (EAGAIN). The construction must throw Error(out_of_memory) naming the thread, with the
// threads it had started joined and nothing else given up: no crash, no hang, no thread or file
// descriptor left behind, and the next context works.
//
// This executable interposes pthread_create (the libraries' calls resolve to the program's definition
// first), so it is a test binary of its own.
#include <atomic>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include <dlfcn.h>
#include <pthread.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "nerve/nerve.h"
#include "nerve/nerve.hpp"

#include "backend/test_device.hpp"
#include "support/runtime_fixture.hpp"

namespace {

// Thread creations left before they fail (each one from then on, until reset); negative: none fails.
std::atomic<long> creations_before_failure{-1};

}  // namespace

extern "C" int pthread_create(pthread_t* thread, const pthread_attr_t* attributes, void* (*body)(void*),
                              void* argument) {
  using Create = int (*)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);
  static const auto real = reinterpret_cast<Create>(dlsym(RTLD_NEXT, "pthread_create"));
  long left = creations_before_failure.load();
  while (left > 0 && !creations_before_failure.compare_exchange_weak(left, left - 1)) {
  }
  if (left == 0) return EAGAIN;
  return real(thread, attributes, body, argument);
}

namespace nerve::testing {
namespace {

std::size_t entries_in(const char* directory) {
  std::size_t count = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(directory)) ++count;
  return count;
}

std::size_t process_threads() { return entries_in("/proc/self/task"); }
std::size_t open_descriptors() { return entries_in("/proc/self/fd"); }

// threads_settled_to(): the process's thread count once it is at most `at_most` (waiting up to
// `patience_ms`): a joined thread can still be listed for a moment, its exit finishing after join().
std::size_t threads_settled_to(std::size_t at_most, int patience_ms = 2000) {
  std::size_t count = process_threads();
  for (int tick = 0; tick < patience_ms && count > at_most; ++tick) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    count = process_threads();
  }
  return count;
}

// threads_at_rest(): the process's threads once a thread has been started before (a sanitizer's
// runtime starts a background thread of its own at the first: it is not the runtime's to give back).
std::size_t threads_at_rest() {
  const std::size_t before = process_threads();
  std::thread([] {}).join();
  return threads_settled_to(before, 200);  // or one more: the sanitizer's
}

// FailThreads fails the thread creations after the first `allowed` until it goes out of scope.
struct FailThreads {
  explicit FailThreads(long allowed) { creations_before_failure = allowed; }
  FailThreads(const FailThreads&) = delete;
  FailThreads& operator=(const FailThreads&) = delete;
  ~FailThreads() { creations_before_failure = -1; }
};

// expect_thread_refused(): `attempt`, with the thread creations after the first `allowed` failing,
// throws Error(out_of_memory) whose message holds `expected`.
template <class Attempt>
void expect_thread_refused(long allowed, Attempt&& attempt, const std::string& expected) {
  try {
    const FailThreads fail(allowed);
    attempt();
    ADD_FAILURE() << "made without a thread the system refused";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::out_of_memory);
    EXPECT_THAT(error.what(), ::testing::HasSubstr(expected));
  }
}

// The context works: every task runs.
void expect_runs_tasks(Context& context) {
  std::atomic<int> ran{0};
  TaskGroup group(context);
  for (int i = 0; i < 1000; ++i) group.spawn([&ran] { ran.fetch_add(1); });
  group.wait();
  EXPECT_EQ(ran.load(), 1000);
}

TEST(ThreadFailure, AWorkerTheSystemRefusesFailsTheContextCleanly) {
  constexpr unsigned workers = 8;  // 7 worker threads
  const std::size_t threads_before = threads_at_rest();
  // Repeated: the workers already started were racing the unwinding (a crash or a hang in a third of
  // the runs, in register_current_thread() on freed members, or in a thread's exit).
  for (int round = 0; round < 10; ++round) {
    for (long allowed = 0; allowed < workers - 1; ++allowed) {
      SCOPED_TRACE("round " + std::to_string(round) + ", " + std::to_string(allowed) + " threads allowed");
      expect_thread_refused(
          allowed, [] { const Context context(make_settings(workers)); },
          "cannot start worker thread " + std::to_string(allowed + 1) +
              " of 7 (8 worker slots with the calling thread's: a smaller parallel.thread_pool_size needs "
              "fewer): Resource temporarily unavailable");
      EXPECT_EQ(threads_settled_to(threads_before), threads_before)
          << "a worker outlived its context's construction";
    }
  }
  Context context(make_settings(workers));
  expect_runs_tasks(context);
}

TEST(ThreadFailure, TheCounterSamplerRefusedStopsTheWorkersAndClosesItsEvents) {
  Settings settings = make_settings(2);
  settings.set("perf.enable_counters", "true");
  { Context warm(settings); }  // the process's one-time state (logger, topology caches) made first
  const std::size_t threads_before = threads_at_rest();
  const std::size_t descriptors_before = open_descriptors();
  for (int round = 0; round < 10; ++round) {
    // The worker starts, the sampler does not.
    expect_thread_refused(
        1, [&settings] { const Context context(settings); },
        "cannot start the perf.enable_counters sampling thread");
    EXPECT_EQ(threads_settled_to(threads_before), threads_before);
    EXPECT_EQ(open_descriptors(), descriptors_before) << "the sampler's perf events were left open";
  }
  Context context(settings);
  EXPECT_TRUE(context.stats().counters.enabled);
}

TEST(ThreadFailure, ADeviceWhoseThreadIsRefusedIsNotAddedAndTheContextGoesOn) {
  Context context(make_settings(2));
  const std::size_t threads_before = threads_at_rest();
  expect_thread_refused(
      0, [&context] { context.impl()->add_test_device({}); },
      "cannot start the test device's executor thread");
  EXPECT_EQ(threads_settled_to(threads_before), threads_before);
  expect_runs_tasks(context);
}

TEST(ThreadFailure, TheCApiReportsOutOfMemoryWithTheThreadNamed) {
  const std::size_t threads_before = threads_at_rest();
  const char* const settings[] = {"gpu.devices=none"};
  nerve_context_config_t config = NERVE_CONTEXT_CONFIG_DEFAULT;
  config.settings = settings;
  config.setting_count = 1;
  config.use_environment = 0;
  config.thread_pool_size = 4;
  {
    const FailThreads fail(2);
    nerve_clear_last_error();
    nerve_context_t* context = nerve_init_with_config(&config);
    EXPECT_EQ(context, nullptr);
    EXPECT_EQ(nerve_last_status(), NERVE_ERROR_OUT_OF_MEMORY);
    EXPECT_NE(std::string(nerve_last_error()).find("cannot start worker thread 3 of 3"), std::string::npos)
        << nerve_last_error();
  }
  EXPECT_EQ(threads_settled_to(threads_before), threads_before);
  nerve_context_t* context = nerve_init_with_config(&config);
  ASSERT_NE(context, nullptr) << nerve_last_error();
  nerve_clear_last_error();
  nerve_shutdown(context);
  EXPECT_EQ(nerve_last_status(), NERVE_OK) << nerve_last_error();
}

}  // namespace
}  // namespace nerve::testing
