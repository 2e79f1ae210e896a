// perf.enable_counters / perf.counter_interval_ms: sampled counters, with the source that was
// available (hardware perf_event, software perf_event, getrusage) named; never a failure.
#include "perf/counters.hpp"

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <sys/resource.h>

#include "perf/perf_test.hpp"

namespace nerve::testing {
namespace {

TEST(Counters, SampledWhileTheContextLivesAndNamed) {
  Settings settings = make_settings(2);
  settings.set("perf.enable_counters", "true");
  settings.set("perf.counter_interval_ms", "5");
  Context context(settings);
  std::atomic<std::uint64_t> sink{0};
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(60);
  while (std::chrono::steady_clock::now() < until) {
    context.spawn([&] {
      std::uint64_t x = 0;
      for (int i = 0; i < 10000; ++i) x += static_cast<std::uint64_t>(i) * i;
      sink.fetch_add(x);
    });
    context.wait_all();
  }
  const nlohmann::json json = dump_stats(context);
  const auto& counters = json["counters"];
  EXPECT_EQ(counters["enabled"], true);
  const std::string source = counters["source"];
  EXPECT_TRUE(source == "perf_event hardware" || source == "perf_event software" || source == "getrusage")
      << source;
  const auto names = counters["names"].get<std::vector<std::string>>();
  ASSERT_EQ(names.size(), 3u);
  if (source == "perf_event hardware") {
    EXPECT_EQ(names[0], "cycles");
  } else {
    EXPECT_EQ(names[0], "task_clock_ns");
  }
  const auto& samples = counters["samples"];
  ASSERT_GE(samples.size(), 2u) << "one at start, then every 5 ms";
  const auto first = samples.front()["values"].get<std::vector<std::uint64_t>>();
  const auto last = samples.back()["values"].get<std::vector<std::uint64_t>>();
  ASSERT_EQ(first.size(), 3u);
  EXPECT_GT(last[0], first[0]) << "the first counter grew while tasks ran";
  // 60 ms of spawn-and-wait rounds: the workers sleep and wake, the sampler sleeps 5 ms at a time.
  if (source != "perf_event hardware") EXPECT_GT(last[1], first[1]) << "context switches are counted";
  for (std::size_t i = 1; i < samples.size(); ++i)
    EXPECT_LE(samples[i - 1]["time_ns"].get<std::int64_t>(), samples[i]["time_ns"].get<std::int64_t>());
}

// The software counters and getrusage are cumulative for the whole process (PERF_STATS.md): what it
// spent before the context opened its sampler counts too, as getrusage counts it.
TEST(Counters, SoftwareCountersCountFromTheProcessStart) {
  volatile std::uint64_t sink = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
  while (std::chrono::steady_clock::now() < until) sink = sink + 1;  // CPU time before the context
  rusage before{};
  getrusage(RUSAGE_SELF, &before);
  const std::uint64_t cpu_ns =
      (static_cast<std::uint64_t>(before.ru_utime.tv_sec + before.ru_stime.tv_sec) * 1'000'000 +
       static_cast<std::uint64_t>(before.ru_utime.tv_usec + before.ru_stime.tv_usec)) *
      1000;
  const auto faults = static_cast<std::uint64_t>(before.ru_minflt + before.ru_majflt);
  Settings settings = make_settings(2);
  settings.set("perf.enable_counters", "true");
  Context context(settings);
  const nlohmann::json json = dump_stats(context);
  const std::string source = json["counters"]["source"];
  if (source == "perf_event hardware") GTEST_SKIP() << "hardware counters count from the sampler's start";
  const auto first = json["counters"]["samples"].front()["values"].get<std::vector<std::uint64_t>>();
  EXPECT_GE(first[0], cpu_ns) << source << ": task_clock_ns includes the CPU time spent before";
  EXPECT_GE(first[2], faults) << source << ": page_faults includes the faults taken before";
}

TEST(Counters, IntervalSetsTheSampleRate) {
  auto samples_in = [](const char* interval) {
    Settings settings = make_settings(1);
    settings.set("perf.enable_counters", "true");
    settings.set("perf.counter_interval_ms", interval);
    Context context(settings);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    return context.stats().counters.samples.size();
  };
  // 100 ms at 1 ms gives far more samples than at 1000 ms (one at start only); loose bounds, since
  // a loaded machine may delay the sampler.
  EXPECT_GT(samples_in("1"), samples_in("1000"));
  EXPECT_EQ(samples_in("1000"), 1u);
}

std::size_t open_descriptors() {
  std::size_t count = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) ++count;
  return count;
}

// Each watched thread holds a descriptor per event: a program that starts and ends threads by the
// hundred must not run out of them (an open() elsewhere would fail), and what the exited threads
// counted stays in the totals.
TEST(Counters, ThreadsThatExitGiveTheirDescriptorsBackAndKeepTheirCounts) {
  detail::CounterSampler sampler(std::chrono::milliseconds(1));
  const std::size_t before = open_descriptors();
  std::uint64_t burned_ns = 0;
  for (int i = 0; i < 400; ++i) {
    std::thread([&] {
      const auto start = std::chrono::steady_clock::now();
      volatile std::uint64_t sink = 0;
      while (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(3)) sink = sink + 1;
    }).join();
    burned_ns += 3'000'000;
    // The sampler may hold one exited thread's descriptors not yet closed, and have /proc open.
    EXPECT_LE(open_descriptors(), before + 2 * 3 + 2) << "after thread " << i;
    if (::testing::Test::HasFailure()) break;
  }
  sampler.stop();
  const CounterStats stats = sampler.snapshot();
  if (stats.source == "getrusage") GTEST_SKIP() << "no perf_event here: nothing is opened per thread";
  const auto& samples = stats.samples;
  EXPECT_GT(samples.size(), 100u);
  for (std::size_t i = 1; i < samples.size(); ++i) {
    for (std::size_t e = 0; e < samples[i].values.size(); ++e)
      EXPECT_LE(samples[i - 1].values[e], samples[i].values[e])
          << "cumulative, sample " << i << " event " << e;
  }
  if (stats.source == "perf_event software") {
    // Most of each thread's 3 ms is seen (a thread that starts and ends between two samples is not).
    EXPECT_GT(samples.back().values[0] - samples.front().values[0], burned_ns / 2);
  }
}

TEST(Counters, OffByDefault) {
  Context context(make_settings(1));
  EXPECT_FALSE(context.stats().counters.enabled);
}

TEST(Counters, SamplerFallsBackAndNeverThrows) {
  detail::CounterSampler sampler(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  sampler.stop();
  const CounterStats stats = sampler.snapshot();
  EXPECT_TRUE(stats.enabled);
  EXPECT_FALSE(stats.source.empty());
  EXPECT_GE(stats.samples.size(), 2u) << "the first sample and the one stop() takes";
}

}  // namespace
}  // namespace nerve::testing
