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
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "nerve/config.hpp"

namespace nerve::bench {

// Progress is reported after every sample (warm-up included) of every variant, from the thread
// that runs the workload: `done` of `total` samples of the current case.
struct Progress {
  std::string case_name;
  std::string variant;
  int done = 0;
  int total = 0;
};

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
  // Run only the variants of these runtimes (names from runtime_names()); empty: all. For profiling
  // one runtime alone (perf record nerve-bench-core --runtimes nerve).
  std::vector<std::string> runtimes;
  // Called after every sample; may be empty. openclaw-benchmark draws its progress bar with it.
  std::function<void(const Progress&)> on_progress;
  // Workload parameters, "W11.max_batch" → "16" (openclaw-benchmark --param): each workload lists
  // the names it reads in its registry entry; absent ones take the workload's defaults.
  std::map<std::string, std::string> parameters;
  // parameter() is the value of parameters["<workload>.<name>"] as a number, or `fallback` when
  // absent; throws std::invalid_argument (naming it) when the text is not a number in [low, high].
  double parameter(const std::string& workload, const std::string& name, double fallback, double low,
                   double high) const;
  // integer_parameter(): the same for a count; a fraction (max_batch=1.5) throws rather than truncates.
  long long integer_parameter(const std::string& workload, const std::string& name, long long fallback,
                              long long low, long long high) const;
  // For the tests of the verification only (openclaw-benchmark's hidden --inject-fault): nerve's
  // variants corrupt their result after timing and before the check, which must then fail.
  bool inject_fault = false;
};

// One variant's figures: the median of `samples` and their spread.
struct Measurement {
  std::string case_name;  // the sub-case within the workload, e.g. "fib(30)" or "fib(30), cutoff n<20"
  std::string runtime;    // one of runtime_names(): "nerve", "oneTBB", "OpenMP", ...
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
  // Secondary figures, each the median over the timed samples, in the order the workload gives
  // them: e.g. W11's {"p50 latency ms", ...}, {"p99 latency ms", ...}.
  std::vector<std::pair<std::string, double>> extra;
};

// A performance goal: nerve's figure over the best (lowest time) of `baselines` must be <= max_ratio.
struct Goal {
  Goal(std::string case_name, std::vector<std::string> baselines, double max_ratio, std::string text,
       std::string nerve_variant = {})
      : case_name(std::move(case_name)),
        baselines(std::move(baselines)),
        max_ratio(max_ratio),
        text(std::move(text)),
        nerve_variant(std::move(nerve_variant)) {}

  std::string case_name;
  std::vector<std::string> baselines;  // variant labels; the best one present is used
  double max_ratio = 1.0;
  std::string text;           // e.g. "<= 0.5x min(oneTBB, OpenMP)"
  std::string nerve_variant;  // the nerve variant judged; empty: the case's first nerve figure
};

struct WorkloadResult {
  std::string id;                         // "W1"
  std::string title;                      // "independent tasks"
  std::string size;                       // the size actually run, e.g. "N = 1,000,000"
  std::vector<Measurement> measurements;  // per case: nerve first, then the baselines
  std::vector<Goal> goals;
  // verified() is true when the result has measurements and every one verified: a result with none
  // (a runtime filter that keeps none of its variants) verified nothing, and does not claim to have.
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
WorkloadResult run_w5_vector_add(const WorkloadOptions& options);
WorkloadResult run_w8_allocations(const WorkloadOptions& options);
WorkloadResult run_w9_fork_join(const WorkloadOptions& options);
// Built with OpenBLAS + LAPACKE only (NERVE_HAVE_BLAS); the registry says why they are missing.
WorkloadResult run_w6_cholesky(const WorkloadOptions& options);
WorkloadResult run_w7_gemm(const WorkloadOptions& options);
WorkloadResult run_w10_glm(const WorkloadOptions& options);
WorkloadResult run_w11_inference(const WorkloadOptions& options);
// The device workloads (device_workload.hpp): an OpenCL device must be there (needs_opencl_device()).
// run_w5_heterogeneous() is W5's CPU workers + OpenCL case, empty without a device.
WorkloadResult run_w5_heterogeneous(const WorkloadOptions& options);
// run_w6_devices(): W6's CPU workers + OpenCL cases (tiled Cholesky on Kernels with both
// implementations, and an unbalanced mixed graph), one variant per scheduler policy; empty without
// a device. run_w6_cholesky() appends them.
std::vector<Measurement> run_w6_devices(const WorkloadOptions& options);
WorkloadResult run_w12_streaming(const WorkloadOptions& options);
// needs_opencl_device(): "" when a context under `settings` (the run's: --config, the environment)
// opens an OpenCL device, else why not.
std::string needs_opencl_device(const nerve::Settings& settings);

// parse_number(): a finite decimal number, the whole of `text` ("12", "0.5", "1e6"; not "0x10", " 5",
// "+5", "nan", "inf"), else nullopt. What --param values and openclaw-benchmark's --fail-over must be.
std::optional<double> parse_number(std::string_view text);

// The registry. An entry is a workload this library knows; supported() says whether it can run in
// this build on this machine (a BLAS workload without OpenBLAS, a device workload without a device)
// and, if not, why. Tools list and run what the registry holds, so adding a workload is: one
// wN_name.cpp with run_wN_name(), its declaration above, a line in workload_registry()
// (workload.cpp) and the file in bench/CMakeLists.txt; a workload that lives with a backend registers
// itself with nerve_add_workload() instead (registered_workloads() below).
struct WorkloadEntry {
  const char* id;
  const char* title;
  WorkloadResult (*run)(const WorkloadOptions&);
  // why_unsupported(settings) is "" when the workload can run here under the run's settings (a
  // --config that opens no device leaves a device workload nothing to run on); nullptr: always.
  std::string (*why_unsupported)(const nerve::Settings&) = nullptr;
  // The parameters it reads (WorkloadOptions::parameters), space-separated, e.g. "rate max_batch".
  const char* parameters = "";

  bool supported(const nerve::Settings& settings, std::string* reason = nullptr) const {
    const std::string why = why_unsupported != nullptr ? why_unsupported(settings) : std::string();
    if (reason != nullptr) *reason = why;
    return why.empty();
  }
};
// registered_workloads() are the workloads registered from outside bench/ with nerve_add_workload()
// (cmake/NerveWorkloads.cmake): those of backends that are built, e.g. W12 in the OpenCL backend.
// Generated at configure time; empty when no built part registers one.
std::vector<WorkloadEntry> registered_workloads();
// runtime_names() is every runtime a variant may belong to (Measurement::runtime; what --runtimes
// selects): nerve, oneTBB, OpenMP, naive (plain threads), BLAS, STREAM, and W8's allocators (glibc
// malloc, jemalloc, tcmalloc). measure_interleaved() refuses a variant of any other runtime, so this
// list stays complete.
const std::vector<std::string>& runtime_names();

// workload_registry() is every workload of this build — this library's and the registered ones —
// in id order (W1, W2, ..., W10, W11, W12).
const std::vector<WorkloadEntry>& workload_registry();
// core_workloads() is the core-runtime subset W1 W2 W3 W4 W8 W9 (nerve-bench-core's default list).
const std::vector<WorkloadEntry>& core_workloads();
// have_blas() is true when OpenBLAS and LAPACKE were found at build time.
bool have_blas() noexcept;

}  // namespace nerve::bench
