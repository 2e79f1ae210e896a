// measure.hpp — timing, statistics and the interleaved measurement loop shared by the workloads.
//
// Every variant of a workload (nerve, oneTBB, OpenMP, ...) is measured in rounds: round r runs
// variant 0, 1, 2, ... once each, so slow phases of a shared, noisy machine hit all of them alike
// instead of whichever happened to run during the disturbance. The first `warmup` rounds are
// verified but not recorded. Before each variant the loop sleeps WorkloadOptions::settle_ms, then
// until the process is quiet, so the previous runtime's idle workers have stopped spinning
// (idle_probe.hpp measures how long they spin).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "workload.hpp"

namespace nerve::bench {

// Stopwatch: steady_clock, started on construction.
class Stopwatch {
 public:
  Stopwatch() noexcept : start_(std::chrono::steady_clock::now()) {}
  void restart() noexcept { start_ = std::chrono::steady_clock::now(); }
  double elapsed_ns() const noexcept {
    return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

// One sample of one variant: the value in the variant's unit, and what failed verification (empty
// when the result was exactly right).
struct Trial {
  double value = 0;
  std::string failure;
  // Secondary figures of this sample (e.g. {"p99 latency ms", 3.2}); the Measurement gets the
  // median of each over the timed samples, under the same name.
  std::vector<std::pair<std::string, double>> extra = {};
};

struct Variant {
  std::string case_name;
  std::string runtime;
  std::string variant;
  std::string unit;
  bool lower_is_better = true;
  std::uint64_t tasks = 0;
  std::function<void()> prepare;  // untimed, before every sample (reset inputs); may be empty
  std::function<Trial()> run;     // one sample: times itself, verifies its result
  // describe() adds a secondary figure to the note from the finished measurement; may be empty.
  std::function<std::string(const Measurement&)> describe;
};

// Summary statistics of a sample set.
struct Summary {
  double median = 0, min = 0, max = 0, mad = 0;
};
Summary summarize(std::vector<double> samples);

// measure_interleaved() runs warmup + repetitions rounds over `variants` (those of
// options.runtimes, if given) and returns one Measurement per variant run, in the same order.
std::vector<Measurement> measure_interleaved(const std::vector<Variant>& variants,
                                             const WorkloadOptions& options);

// runnable_other_threads(): how many threads of the process besides the caller are running or
// waiting for a core (state R in /proc/self/task/<tid>/stat); -1 when /proc cannot tell.
int runnable_other_threads();

// wait_until_quiet() checks every millisecond until no other thread of the process is runnable (every
// runtime's idle workers are asleep), or until `limit` has passed (false). Runnable, not CPU time:
// on a loaded machine a spinning thread may get no core for a while, yet it competes as soon as it
// does. OpenBLAS's pthread build keeps a core busy for ~115 ms after it loads and after every
// threaded call (its threads spin with sched_yield before they block), longer than any runtime's
// idle spin. Without /proc it returns true at once.
inline constexpr std::chrono::milliseconds max_quiet_wait{500};
bool wait_until_quiet(std::chrono::milliseconds limit);

// settle() sleeps options.settle_ms, then waits until the process is quiet (at most max_quiet_wait
// more): lets other runtimes' and libraries' spinning threads go to sleep. settle_ms 0: neither.
void settle(const WorkloadOptions& options);

// expect_equal() is "" when got == expected, else "<what>: got X, expected Y".
template <class T>
std::string expect_equal(const char* what, const T& got, const T& expected) {
  if (got == expected) return {};
  return std::string(what) + ": got " + std::to_string(got) + ", expected " + std::to_string(expected);
}

// format_count() writes 1000000 as "1,000,000" (sizes in titles).
std::string format_count(std::uint64_t value);

// note_share_of() adds "N% of <label>" to the note of every verified measurement but the variant
// `reference` (W5: "97% of STREAM add", what the memory gives, measured in the same run); nothing
// when the reference did not run (--runtimes), failed its check or measured 0. A failed
// measurement's note stays what failed.
void note_share_of(std::vector<Measurement>& measurements, const std::string& reference,
                   const std::string& label);

}  // namespace nerve::bench
