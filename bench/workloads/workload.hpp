// workload.hpp — the standard workloads (docs/WORKLOADS, /work/shared/WORKLOADS.md) as a library:
// each run_wN() times nerve and the baselines built into this binary (oneTBB, OpenMP) on the same
// work, in the same process, and returns verified measurements. nerve-bench-core prints them;
// openclaw-benchmark links the same library for its JSON and HTML reports.
//
// Contract: a run_wN() call is self-contained (it creates and destroys its own nerve::Context, TBB
// concurrency limit and OpenMP team size) and must be called from one application thread at a time,
// outside any nerve task or OpenMP region. It never throws for a wrong result: a failed check is a
// Measurement with verified == false and a note saying what was wrong. It throws only when it cannot
// run at all (nerve::ConfigError for invalid settings, std::bad_alloc).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "nerve/config.hpp"

namespace nerve::bench {

// WorkloadOptions apply to every runtime of a run alike.
struct WorkloadOptions {
  unsigned threads = 2;  // T: nerve's pool size, OpenMP's team size and oneTBB's max parallelism
  bool quick = false;    // smaller sizes and fewer repetitions (CI smoke runs)
  int repetitions = 5;   // timed samples per variant
  int warmup = 1;        // untimed (but verified) samples per variant before the timed ones
  // Pause between two variants so that the previous runtime's idle workers stop spinning before the
  // next one is timed (see idle_probe.hpp and docs/BENCHMARKS.md). 0 disables it.
  int settle_ms = 20;
  // nerve's settings; run_wN() adds parallel.thread_pool_size = threads on top.
  nerve::Settings settings;
  // Run only the variants of these runtimes ("nerve", "oneTBB", "OpenMP"); empty: all. For profiling
  // one runtime alone (perf record nerve-bench-core --runtimes nerve).
  std::vector<std::string> runtimes;
};

// One variant's figures: the median of `samples` and their spread.
struct Measurement {
  std::string case_name;  // the sub-case within the workload, e.g. "fib(30)" or "fib(30), cutoff n<20"
  std::string runtime;    // "nerve", "oneTBB" or "OpenMP"
  std::string variant;    // unique label within the workload, e.g. "OpenMP parallel for"
  double value = 0;       // median of samples
  std::string unit;       // e.g. "ns/task", "ms", "us/fork-join"
  bool lower_is_better = true;
  double min = 0, max = 0;
  double mad = 0;           // median absolute deviation of the samples
  std::uint64_t tasks = 0;  // tasks (or fork-joins) per sample, 0 if not meaningful
  bool verified = false;    // every sample, warm-up included, produced the exact expected result
  std::string note;         // what failed, or a secondary figure ("41.2 ns/task")
  std::vector<double> samples;
};

// A performance goal: nerve's figure over the best (lowest time) of `baselines` must be <= max_ratio.
struct Goal {
  std::string case_name;
  std::vector<std::string> baselines;  // variant labels; the best one present is used
  double max_ratio = 1.0;
  std::string text;  // e.g. "<= 0.5x min(oneTBB, OpenMP)"
};

struct WorkloadResult {
  std::string id;                         // "W1"
  std::string title;                      // "independent tasks"
  std::string size;                       // the size actually run, e.g. "N = 1,000,000"
  std::vector<Measurement> measurements;  // per case: nerve first, then the baselines
  std::vector<Goal> goals;
  bool verified() const;
};

// GoalCheck is a goal evaluated against a result; absent when nerve or every baseline is missing.
struct GoalCheck {
  const Goal* goal;
  const Measurement* nerve;
  const Measurement* baseline;  // the best baseline
  double ratio;                 // nerve / baseline
  bool met;
};
std::optional<GoalCheck> check_goal(const WorkloadResult& result, const Goal& goal);

// The baselines compiled into this library.
bool have_tbb() noexcept;
bool have_openmp() noexcept;

WorkloadResult run_w1_independent(const WorkloadOptions& options);
WorkloadResult run_w2_fib(const WorkloadOptions& options);
WorkloadResult run_w3_chain(const WorkloadOptions& options);
WorkloadResult run_w4_wavefront(const WorkloadOptions& options);
WorkloadResult run_w5_vector_add(const WorkloadOptions& options);  // CPU workers + OpenCL device
WorkloadResult run_w8_allocations(const WorkloadOptions& options);
WorkloadResult run_w9_fork_join(const WorkloadOptions& options);
WorkloadResult run_w12_streaming(const WorkloadOptions& options);  // through an OpenCL device

// The registry: every workload this library implements, in id order.
struct WorkloadEntry {
  const char* id;
  const char* title;
  WorkloadResult (*run)(const WorkloadOptions&);
};
const std::vector<WorkloadEntry>& core_workloads();

}  // namespace nerve::bench
