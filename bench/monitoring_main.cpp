// nerve-bench-monitoring — what monitoring and deterministic mode cost, measured in one run:
//  - tiny independent tasks (W1's shape) with recording off, perf.record_tasks and perf.trace on
//    (the trace file is written when the context ends, timed separately);
//  - parallel_reduce with grain 0 (sum of doubles) with parallel.deterministic_mode off and on.
// Variants run interleaved, round by round; the figure is the median of the rounds.
//
//   nerve-bench-monitoring [--threads N] [--rounds N] [--quick]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "nerve/nerve.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

nerve::Settings settings_for(unsigned threads) {
  nerve::Settings settings;
  settings.use_environment(false);
  settings.set("parallel.thread_pool_size", std::to_string(threads));
  return settings;
}

// ns per task for `tasks` spawns and one wait; `write_ns` gets the context's teardown time (the
// trace is written then).
double spawn_ns(nerve::Settings settings, std::uint64_t tasks, double* teardown_s) {
  auto context = std::make_unique<nerve::Context>(settings);
  std::atomic<std::uint64_t> count{0};
  const auto start = Clock::now();
  for (std::uint64_t i = 0; i < tasks; ++i)
    context->spawn([&count] { count.fetch_add(1, std::memory_order_relaxed); });
  context->wait_all();
  const double elapsed = seconds_since(start);
  const auto end_start = Clock::now();
  context.reset();
  if (teardown_s != nullptr) *teardown_s = seconds_since(end_start);
  if (count.load() != tasks) {
    std::fprintf(stderr, "spawn: counted %llu of %llu\n", static_cast<unsigned long long>(count.load()),
                 static_cast<unsigned long long>(tasks));
    std::exit(1);
  }
  return elapsed * 1e9 / static_cast<double>(tasks);
}

double reduce_ms(nerve::Context& context, const std::vector<double>& values, double expected_bits_check,
                 int repeat) {
  const auto start = Clock::now();
  double sum = 0;
  for (int r = 0; r < repeat; ++r) {
    sum = nerve::parallel_reduce(
        context, 0, values.size(), 0, 0.0,
        [&](std::size_t begin, std::size_t end) {
          double partial = 0;
          for (std::size_t i = begin; i < end; ++i) partial += values[i];
          return partial;
        },
        [](double a, double b) { return a + b; });
  }
  const double ms = seconds_since(start) * 1e3 / repeat;
  if (std::abs(sum - expected_bits_check) > 1e-6 * std::abs(expected_bits_check)) {
    std::fprintf(stderr, "reduce: %.17g, expected about %.17g\n", sum, expected_bits_check);
    std::exit(1);
  }
  return ms;
}

}  // namespace

int main(int argc, char** argv) {
  unsigned threads = 2;
  int rounds = 7;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
      threads = static_cast<unsigned>(std::atoi(argv[++i]));
    } else if (std::strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) {
      rounds = std::max(1, std::atoi(argv[++i]));
    } else if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else {
      std::fprintf(stderr, "usage: nerve-bench-monitoring [--threads N] [--rounds N] [--quick]\n");
      return 2;
    }
  }
  const std::uint64_t tasks = quick ? 100'000 : 1'000'000;
  const std::uint64_t trace_tasks = quick ? 20'000 : 100'000;  // the trace of 1M tasks is ~150 MB
  std::uintmax_t trace_bytes = 0;

  std::printf("nerve-bench-monitoring: %u threads, %d rounds, median per variant\n\n", threads, rounds);
  std::vector<double> off, recording, tracing, trace_off, teardown;
  for (int round = 0; round < rounds; ++round) {
    off.push_back(spawn_ns(settings_for(threads), tasks, nullptr));
    nerve::Settings record = settings_for(threads);
    record.set("perf.record_tasks", "true");
    recording.push_back(spawn_ns(record, tasks, nullptr));
    trace_off.push_back(spawn_ns(settings_for(threads), trace_tasks, nullptr));
    // A path per round: a later context of the process naming an earlier one's trace file writes
    // <stem>.<context id>.json instead (docs/TRACING.md).
    const auto trace_path = std::filesystem::temp_directory_path() /
                            ("nerve-bench-monitoring." + std::to_string(round) + ".trace.json");
    nerve::Settings trace = settings_for(threads);
    trace.set("perf.trace", trace_path.string());
    double teardown_s = 0;
    tracing.push_back(spawn_ns(trace, trace_tasks, &teardown_s));
    teardown.push_back(teardown_s);
    trace_bytes = std::filesystem::file_size(trace_path);
    std::filesystem::remove(trace_path);
  }
  std::printf("tiny tasks (%llu spawns + wait_all)\n", static_cast<unsigned long long>(tasks));
  std::printf("  recording off            %8.1f ns/task\n", median(off));
  std::printf("  perf.record_tasks        %8.1f ns/task   %.2fx\n", median(recording),
              median(recording) / median(off));
  std::printf("tiny tasks (%llu spawns + wait_all)\n", static_cast<unsigned long long>(trace_tasks));
  std::printf("  recording off            %8.1f ns/task\n", median(trace_off));
  std::printf(
      "  perf.trace               %8.1f ns/task   %.2fx; writing the trace at the end: %.1f ms (%.1f MB)\n",
      median(tracing), median(tracing) / median(trace_off), median(teardown) * 1e3,
      static_cast<double>(trace_bytes) / 1e6);

  const std::size_t count = quick ? (std::size_t{1} << 20) : (std::size_t{1} << 23);
  std::vector<double> values(count);
  double expected = 0;
  for (std::size_t i = 0; i < count; ++i) {
    values[i] = 1.0 / static_cast<double>(i + 1) + static_cast<double>(i % 7);
    expected += values[i];
  }
  nerve::Settings deterministic_settings = settings_for(threads);
  deterministic_settings.set("parallel.deterministic_mode", "true");
  nerve::Context normal(settings_for(threads));
  nerve::Context deterministic(deterministic_settings);
  std::vector<double> normal_ms, deterministic_ms;
  const int repeat = quick ? 5 : 20;
  reduce_ms(normal, values, expected, 1);  // first touch, warm-up
  reduce_ms(deterministic, values, expected, 1);
  for (int round = 0; round < rounds; ++round) {
    normal_ms.push_back(reduce_ms(normal, values, expected, repeat));
    deterministic_ms.push_back(reduce_ms(deterministic, values, expected, repeat));
  }
  std::printf("parallel_reduce, grain 0, sum of %zu doubles\n", count);
  std::printf("  deterministic_mode off   %8.3f ms\n", median(normal_ms));
  std::printf("  deterministic_mode on    %8.3f ms   %.3fx\n", median(deterministic_ms),
              median(deterministic_ms) / median(normal_ms));
  return 0;
}
