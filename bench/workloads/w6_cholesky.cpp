// w6_cholesky.cpp — W6: tiled Cholesky factorisation A = L Lᵀ (double, lower), the classic
// right-looking tile algorithm (Buttari et al., "A class of parallel tiled linear algebra algorithms
// for multicore architectures", 2009): for each k, POTRF on the diagonal tile, TRSM on the tiles
// below it, SYRK/GEMM on the trailing matrix. Each tile operation is one single-threaded BLAS call
// and one task; the parallelism comes from the task graph alone.
// Cases: n = 4096 with nb = 256 and 512, n = 8192 with nb = 512 (quick: n = 1024, nb = 128 and 256).
// Variants:
//   nerve            one task per tile operation over tile slices of one nerve::Buffer; the DAG is
//                    inferred from the declared read / read_write accesses
//   OpenMP tasks     the same tile kernels as `omp task depend(in/inout)` on the tiles
//   LAPACK dpotrf    one call on the whole (column-major) matrix, OpenBLAS with T threads: the
//                    reference; every other variant's note gives its "N% of LAPACK dpotrf"
// Input: symmetric, entries in (0, 1), plus n·I (SPD). Checks: before its first sample, each variant
// (every scheduler policy's in its own context) factors an n = 1024 matrix with the case's nb and
// must reach ‖A − LLᵀ‖/‖A‖ < 1e-12 (WORKLOADS.md);
// every sample at full size is checked by a random probe ‖Ax − L(Lᵀx)‖/(‖A‖‖x‖) < 1e-12, which is
// O(n²) and catches any wrong element. Figure: GFLOP/s counting n³/3 flops.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <iterator>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "nerve/nerve.hpp"

#include "blas_support.hpp"
#include "measure.hpp"
#include "runtimes.hpp"
#include "tile_kernels.hpp"
#include "workload.hpp"

namespace nerve::bench {
namespace {

constexpr double tolerance = 1e-12;
constexpr const char* lapack_variant = "LAPACK dpotrf (OpenBLAS, T threads)";  // the % reference
constexpr std::size_t check_size = 1024;  // WORKLOADS.md: the full residual is checked at n = 1024
// OpenBLAS's own threads spin for a while after a multithreaded call (2^28 cycles by default,
// ~0.1 s); the next variant would share the cores with them.
constexpr auto blas_settle = std::chrono::milliseconds(150);

// rank_priority(): under scheduler.policy heft, tile tasks carry HEFT's upward rank as their integer
// priority — the ranking half of HEFT, which an online runtime cannot compute (it never sees the
// rest of the graph), so the application gives it, as StarPU's Cholesky does: 2·nt − 2k for
// POTRF(k), minus the row for TRSM(m, k) and row + column for SYRK/GEMM(m, n, k); offset so every
// priority is ≥ 1 (0 is "normal": the work-stealing path, unordered).
int rank_priority(bool ranked, std::size_t nt, std::size_t k, std::size_t m = 0, std::size_t n = 0) {
  if (!ranked) return nerve::Priority::normal;
  return static_cast<int>(4 * nt - 2 * k - m - n) + 1;
}

void factor_nerve(nerve::Context& context, const TileLayout& layout, const nerve::Buffer<double>& matrix,
                  bool ranked = false) {
  const int nb = static_cast<int>(layout.nb);
  const std::size_t nt = layout.nt;
  auto tile = [&](std::size_t i, std::size_t j) {
    return matrix.slice(layout.offset(i, j), layout.tile_elements());
  };
  auto options = [ranked](const char* name, int priority) {
    nerve::TaskOptions task = named(name);
    task.priority = ranked ? priority : nerve::Priority::normal;
    return task;
  };
  for (std::size_t k = 0; k < nt; ++k) {
    context.spawn(
        options("POTRF", rank_priority(ranked, nt, k)),
        [nb](std::span<double> akk) { tile::potrf(nb, akk.data()); }, nerve::read_write(tile(k, k)));
    for (std::size_t i = k + 1; i < nt; ++i) {
      context.spawn(
          options("TRSM", rank_priority(ranked, nt, k, i)),
          [nb](std::span<const double> lkk, std::span<double> aik) {
            tile::trsm(nb, lkk.data(), aik.data());
          },
          nerve::read(tile(k, k)), nerve::read_write(tile(i, k)));
    }
    for (std::size_t i = k + 1; i < nt; ++i) {
      context.spawn(
          options("SYRK", rank_priority(ranked, nt, k, i, i)),
          [nb](std::span<const double> aik, std::span<double> aii) {
            tile::syrk(nb, aik.data(), aii.data());
          },
          nerve::read(tile(i, k)), nerve::read_write(tile(i, i)));
      for (std::size_t j = k + 1; j < i; ++j) {
        context.spawn(
            options("GEMM", rank_priority(ranked, nt, k, i, j)),
            [nb](std::span<const double> aik, std::span<const double> ajk, std::span<double> aij) {
              tile::gemm_nt(nb, aik.data(), ajk.data(), aij.data());
            },
            nerve::read(tile(i, k)), nerve::read(tile(j, k)), nerve::read_write(tile(i, j)));
      }
    }
  }
  context.wait_all();
}

// factor_openmp() is the same DAG with OpenMP task dependences; returns "" or the first failure.
std::string factor_openmp([[maybe_unused]] const TileLayout& layout, [[maybe_unused]] double* tiles,
                          [[maybe_unused]] unsigned threads) {
#if NERVE_HAVE_OPENMP
  const int nb = static_cast<int>(layout.nb);
  const std::size_t nt = layout.nt;
  std::atomic<bool> failed{false};
#pragma omp parallel num_threads(threads)
#pragma omp single
  for (std::size_t k = 0; k < nt; ++k) {
    double* akk = tiles + layout.offset(k, k);
#pragma omp task depend(inout : akk[0]) shared(failed)
    try {
      tile::potrf(nb, akk);
    } catch (const std::exception&) {
      failed = true;
    }
    for (std::size_t i = k + 1; i < nt; ++i) {
      double* aik = tiles + layout.offset(i, k);
#pragma omp task depend(in : akk[0]) depend(inout : aik[0])
      tile::trsm(nb, akk, aik);
    }
    for (std::size_t i = k + 1; i < nt; ++i) {
      double* aik = tiles + layout.offset(i, k);
      double* aii = tiles + layout.offset(i, i);
#pragma omp task depend(in : aik[0]) depend(inout : aii[0])
      tile::syrk(nb, aik, aii);
      for (std::size_t j = k + 1; j < i; ++j) {
        double* ajk = tiles + layout.offset(j, k);
        double* aij = tiles + layout.offset(i, j);
#pragma omp task depend(in : aik[0], ajk[0]) depend(inout : aij[0])
        tile::gemm_nt(nb, aik, ajk, aij);
      }
    }
  }
  return failed ? "POTRF of a diagonal tile failed" : "";
#else
  return "built without OpenMP";
#endif
}

std::string factor_lapack(std::size_t n, double* a) {
  const lapack_int info =
      LAPACKE_dpotrf(LAPACK_COL_MAJOR, 'L', static_cast<lapack_int>(n), a, static_cast<lapack_int>(n));
  return info == 0 ? "" : "dpotrf failed, info = " + std::to_string(info);
}

std::string describe_error(const char* what, double error) {
  if (error < tolerance) return {};
  char text[128];
  std::snprintf(text, sizeof text, "%s %.3g exceeds %.0e", what, error, tolerance);
  return text;
}

// One problem size: the pristine input in both layouts and the arrays every variant works in.
struct Problem {
  TileLayout layout;
  std::vector<double> input;        // column-major, both triangles
  std::vector<double> input_tiles;  // the same in tile layout
  std::vector<double> work;         // LAPACK's matrix; also where the tiled results are checked
  std::vector<double> omp_tiles;
  nerve::Buffer<double> nerve_tiles;

  Problem(nerve::Context& context, std::size_t n, std::size_t nb)
      : layout(n, nb),
        input(spd_matrix(n, 6)),
        input_tiles(n * n),
        work(n * n),
        omp_tiles(n * n),
        nerve_tiles(context, n * n) {
    to_tiles(layout, input, input_tiles);
  }
  void reset_nerve() const {
    auto mapped = nerve_tiles.map_write();
    std::copy(input_tiles.begin(), input_tiles.end(), mapped.begin());
  }
  // check_tiles() converts a tiled factor into `work` and probes it (or, `full`, the whole residual).
  std::string check_tiles(std::span<const double> tiles, bool corrupt, bool full) {
    from_tiles(layout, tiles, work);
    if (corrupt) work[layout.n * (layout.n / 2) + layout.n / 2 + 1] += 1e-3;
    return full ? describe_error("residual", cholesky_residual(layout.n, input, work))
                : describe_error("probe error", cholesky_probe_error(layout.n, input, work));
  }
};

double gflops(std::size_t n, double ns) { return static_cast<double>(n) * n * n / 3.0 / ns; }

// The tile tasks of one factorisation over t = n / nb tiles a side: t POTRF, t(t-1)/2 TRSM and as many
// SYRK, t(t-1)(t-2)/6 GEMM.
std::uint64_t tile_tasks(std::size_t n, std::size_t nb) {
  const std::uint64_t t = n / nb;
  return t + t * (t - 1) + t * (t - 1) * (t - 2) / 6;
}

// other_policies(): the scheduler policies other than the one `context` (the "nerve" variant) runs.
std::vector<nerve::SchedulerPolicy> other_policies(const nerve::Context& context) {
  std::vector<nerve::SchedulerPolicy> policies;
  for (const auto policy : {nerve::SchedulerPolicy::eager, nerve::SchedulerPolicy::locality_aware_stealing,
                            nerve::SchedulerPolicy::heft}) {
    if (policy != context.config().scheduler.policy) policies.push_back(policy);
  }
  return policies;
}

// A context with another scheduler policy and its own tiled matrix (the per-policy variants).
struct PolicyRun {
  nerve::Context context;
  nerve::Buffer<double> tiles;
  bool ranked;           // heft: tile tasks carry their upward rank as priority
  bool checked = false;  // the n = 1024 residual check ran (before the first sample)
  PolicyRun(const WorkloadOptions& options, nerve::SchedulerPolicy policy, std::size_t n)
      : context(policy_settings(options, policy)),
        tiles(context, n * n),
        ranked(policy == nerve::SchedulerPolicy::heft) {}
  static nerve::Settings policy_settings(const WorkloadOptions& options, nerve::SchedulerPolicy policy) {
    nerve::Settings settings = nerve_settings(options);
    settings.set("scheduler.policy", policy_name(policy));
    return settings;
  }
};

// The full-residual check at n = 1024 (WORKLOADS.md), run by every variant before its first sample:
// the nerve variants factor in the context (and so under the scheduler policy) they are timed in,
// with the same rank priorities, so a policy that ordered the graph wrongly fails here too.
std::string residual_check_nerve(nerve::Context& context, std::size_t nb, bool ranked) {
  Problem small(context, check_size, nb);
  small.reset_nerve();
  try {
    factor_nerve(context, small.layout, small.nerve_tiles, ranked);
  } catch (const std::exception& error) {
    return error.what();
  }
  auto mapped = small.nerve_tiles.map_read();
  return small.check_tiles(mapped.span(), false, true);
}

std::string residual_check_openmp(nerve::Context& context, std::size_t nb, unsigned threads) {
  Problem small(context, check_size, nb);
  small.omp_tiles = small.input_tiles;
  const std::string failure = factor_openmp(small.layout, small.omp_tiles.data(), threads);
  return failure.empty() ? small.check_tiles(small.omp_tiles, false, true) : failure;
}

void add_case(std::vector<Measurement>& out, nerve::Context& context, std::size_t n, std::size_t nb,
              const WorkloadOptions& options) {
  const unsigned threads = options.threads;
  Problem problem(context, n, nb);
  const std::string name = "n=" + std::to_string(n) + " nb=" + std::to_string(nb);
  bool nerve_checked = false, omp_checked = false, lapack_checked = false;
  std::vector<Variant> variants;
  // The context's own policy (scheduler.policy as configured: locality_aware_stealing by default).
  const bool configured_heft = context.config().scheduler.policy == nerve::SchedulerPolicy::heft;
  variants.push_back({name,
                      "nerve",
                      "nerve tile tasks",
                      "GFLOP/s",
                      false,
                      tile_tasks(n, nb),
                      [&] { problem.reset_nerve(); },
                      [&]() -> Trial {
                        if (!std::exchange(nerve_checked, true)) {
                          if (auto failure = residual_check_nerve(context, nb, configured_heft);
                              !failure.empty())
                            return {0, "n=1024 check: " + failure};
                        }
                        const std::uint64_t before = context.stats().bytes_transferred;
                        Stopwatch watch;
                        try {
                          factor_nerve(context, problem.layout, problem.nerve_tiles, configured_heft);
                        } catch (const std::exception& error) {
                          return {0, error.what()};
                        }
                        const double ns = watch.elapsed_ns();
                        const auto bytes = static_cast<double>(context.stats().bytes_transferred - before);
                        auto mapped = problem.nerve_tiles.map_read();
                        return {gflops(n, ns),
                                problem.check_tiles(mapped.span(), options.inject_fault, false),
                                {{"bytes moved", bytes}}};
                      },
                      {}});
  // The baselines, listed after every nerve variant (the policies' below).
  std::vector<Variant> baselines;
#if NERVE_HAVE_OPENMP
  baselines.push_back(
      {name,
       "OpenMP",
       "OpenMP tile tasks (depend)",
       "GFLOP/s",
       false,
       tile_tasks(n, nb),
       [&] { std::copy(problem.input_tiles.begin(), problem.input_tiles.end(), problem.omp_tiles.begin()); },
       [&]() -> Trial {
         if (!std::exchange(omp_checked, true)) {
           if (auto failure = residual_check_openmp(context, nb, threads); !failure.empty())
             return {0, "n=1024 check: " + failure};
         }
         Stopwatch watch;
         const std::string failure = factor_openmp(problem.layout, problem.omp_tiles.data(), threads);
         const double ns = watch.elapsed_ns();
         return {gflops(n, ns),
                 failure.empty() ? problem.check_tiles(problem.omp_tiles, false, false) : failure};
       },
       {}});
#endif
  baselines.push_back({name,
                       "BLAS",
                       lapack_variant,
                       "GFLOP/s",
                       false,
                       0,
                       [&] { std::copy(problem.input.begin(), problem.input.end(), problem.work.begin()); },
                       [&]() -> Trial {
                         if (!std::exchange(lapack_checked, true)) {
                           std::vector<double> a = spd_matrix(check_size, 6), l = a;
                           BlasThreads blas(static_cast<int>(threads));
                           std::string failure = factor_lapack(check_size, l.data());
                           if (failure.empty())
                             failure = describe_error("residual", cholesky_residual(check_size, a, l));
                           if (!failure.empty()) return {0, "n=1024 check: " + failure};
                         }
                         std::string failure;
                         double ns = 0;
                         {
                           BlasThreads blas(static_cast<int>(threads));
                           Stopwatch watch;
                           failure = factor_lapack(n, problem.work.data());
                           ns = watch.elapsed_ns();
                         }
                         std::this_thread::sleep_for(blas_settle);
                         if (failure.empty())
                           failure = describe_error("probe error",
                                                    cholesky_probe_error(n, problem.input, problem.work));
                         return {gflops(n, ns), failure};
                       },
                       {}});
  // One variant per other scheduler policy, each in its own context over its own copy of the matrix,
  // in the same interleaved rounds as the others (heft with HEFT's rank priorities, above).
  std::vector<std::unique_ptr<PolicyRun>> policy_runs;
  for (const nerve::SchedulerPolicy policy : other_policies(context)) {
    policy_runs.push_back(std::make_unique<PolicyRun>(options, policy, n));
    PolicyRun& run = *policy_runs.back();
    const std::string label = "nerve tile tasks (" + std::string(policy_name(policy)) + ")";
    variants.push_back(
        {name,
         "nerve",
         label,
         "GFLOP/s",
         false,
         tile_tasks(n, nb),
         [&run, &problem] {
           auto mapped = run.tiles.map_write();
           std::copy(problem.input_tiles.begin(), problem.input_tiles.end(), mapped.begin());
         },
         [&run, &problem, &options, n, nb]() -> Trial {
           if (!std::exchange(run.checked, true)) {
             if (auto failure = residual_check_nerve(run.context, nb, run.ranked); !failure.empty())
               return {0, "n=1024 check: " + failure};
           }
           const std::uint64_t before = run.context.stats().bytes_transferred;
           Stopwatch watch;
           try {
             factor_nerve(run.context, problem.layout, run.tiles, run.ranked);
           } catch (const std::exception& error) {
             return {0, error.what()};
           }
           const double ns = watch.elapsed_ns();
           const auto bytes = static_cast<double>(run.context.stats().bytes_transferred - before);
           auto mapped = run.tiles.map_read();
           return {gflops(n, ns),
                   problem.check_tiles(mapped.span(), options.inject_fault, false),
                   {{"bytes moved", bytes}}};
         },
         {}});
  }
  std::move(baselines.begin(), baselines.end(), std::back_inserter(variants));
  auto measured = measure_interleaved(variants, options);
  // WORKLOADS.md's second figure: each variant's % of multithreaded dpotrf in the same run, per case
  // (every case has a dpotrf variant of the same label, so only this case's measurements are given).
  note_share_of(measured, lapack_variant, "LAPACK dpotrf");
  out.insert(out.end(), measured.begin(), measured.end());
}

}  // namespace

WorkloadResult run_w6_cholesky(const WorkloadOptions& options) {
  WorkloadResult result{"W6", "tiled Cholesky", "", {}, {}};
  nerve::Context context(nerve_settings(options));
  set_openmp_threads(options.threads);
  BlasThreads single(1);  // tile kernels: one thread each (blas_support.hpp)
  const std::vector<std::pair<std::size_t, std::size_t>> cases =
      options.quick ? std::vector<std::pair<std::size_t, std::size_t>>{{1024, 128}, {1024, 256}}
                    : std::vector<std::pair<std::size_t, std::size_t>>{{4096, 256}, {4096, 512}, {8192, 512}};
  for (const auto& [n, nb] : cases) {
    result.size +=
        (result.size.empty() ? "" : ", ") + ("n=" + std::to_string(n) + " nb=" + std::to_string(nb));
    add_case(result.measurements, context, n, nb, options);
  }
  result.size += " (double; GFLOP/s = n^3/3 per s)";
  // With an OpenCL device: the same graph over CPU workers + device, and a mixed graph, per policy.
  if (options.runtimes.empty() ||
      std::find(options.runtimes.begin(), options.runtimes.end(), "nerve") != options.runtimes.end()) {
    std::vector<Measurement> devices = run_w6_devices(options);
    if (!devices.empty()) result.size += "; device cases: CPU workers + OpenCL, per scheduler policy";
    for (Measurement& measurement : devices) result.measurements.push_back(std::move(measurement));
  }
  return result;
}

}  // namespace nerve::bench
