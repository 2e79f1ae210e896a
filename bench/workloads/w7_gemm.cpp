// w7_gemm.cpp — W7: tiled matrix multiply C = A B (double), n = 4096 with tiles of 512 (quick:
// n = 1024, tiles of 256), every tile product one single-threaded dgemm.
// Variants:
//   nerve          one task per (i, j, k): C_ij (+)= A_ik B_kj with read(A_ik), read(B_kj),
//                  read_write(C_ij) — the k-chain of each C tile is ordered by its accesses, the
//                  nt² chains run in parallel
//   OpenMP         `parallel for collapse(2) schedule(dynamic)` over (i, j), k inside
//   oneTBB         tbb::parallel_for over the nt² tiles of C, k inside
//   BLAS dgemm     one call on the whole column-major matrices, OpenBLAS with T threads: the
//                  reference; every other variant's note gives its "N% of BLAS dgemm"
// Check: every sample, ‖Cx − A(Bx)‖/(‖A‖‖B‖‖x‖) < 1e-12 for a random x (O(n²)). Figure: GFLOP/s
// counting 2n³ flops.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <span>
#include <string>
#include <thread>
#include <vector>

#if NERVE_HAVE_TBB
#include <tbb/parallel_for.h>
#endif

#include "nerve/nerve.hpp"

#include "blas_support.hpp"
#include "measure.hpp"
#include "runtimes.hpp"
#include "tile_kernels.hpp"
#include "workload.hpp"

namespace nerve::bench {
namespace {

constexpr double tolerance = 1e-12;
constexpr auto blas_settle = std::chrono::milliseconds(150);               // see w6_cholesky.cpp
constexpr const char* dgemm_variant = "BLAS dgemm (OpenBLAS, T threads)";  // the % reference

struct Problem {
  TileLayout layout;
  std::vector<double> a, b;  // column-major
  std::vector<double> a_tiles, b_tiles, c_tiles;
  std::vector<double> c;  // column-major: dgemm's result; where tiled results are checked
  nerve::Buffer<double> nerve_a, nerve_b, nerve_c;

  Problem(nerve::Context& context, std::size_t n, std::size_t nb)
      : layout(n, nb),
        a(n * n),
        b(n * n),
        a_tiles(n * n),
        b_tiles(n * n),
        c_tiles(n * n),
        c(n * n),
        nerve_a(context, n * n),
        nerve_b(context, n * n),
        nerve_c(context, n * n) {
    for (std::size_t i = 0; i < n * n; ++i) {
      a[i] = uniform(71, i) - 0.5;
      b[i] = uniform(72, i) - 0.5;
    }
    to_tiles(layout, a, a_tiles);
    to_tiles(layout, b, b_tiles);
    std::copy(a_tiles.begin(), a_tiles.end(), nerve_a.map_write().begin());
    std::copy(b_tiles.begin(), b_tiles.end(), nerve_b.map_write().begin());
  }
  std::string check(std::span<const double> result, bool column_major, bool corrupt) {
    if (!column_major) from_tiles(layout, result, c);
    if (corrupt) c[c.size() / 2] += 1e-3;
    const double error = gemm_probe_error(layout.n, a, b, c);
    if (error < tolerance) return {};
    char text[96];
    std::snprintf(text, sizeof text, "probe error %.3g exceeds %.0e", error, tolerance);
    return text;
  }
  // tile_product() computes C_ij over all k from the plain tile arrays (the OpenMP/oneTBB body).
  void tile_product(std::size_t i, std::size_t j) {
    const int nb = static_cast<int>(layout.nb);
    for (std::size_t k = 0; k < layout.nt; ++k) {
      tile::gemm_nn(nb, &a_tiles[layout.offset(i, k)], &b_tiles[layout.offset(k, j)], k == 0 ? 0.0 : 1.0,
                    &c_tiles[layout.offset(i, j)]);
    }
  }
};

void multiply_nerve(nerve::Context& context, Problem& p) {
  const TileLayout& layout = p.layout;
  const int nb = static_cast<int>(layout.nb);
  const std::size_t size = layout.tile_elements();
  static const nerve::TaskOptions gemm = named("GEMM");
  for (std::size_t k = 0; k < layout.nt; ++k)
    for (std::size_t j = 0; j < layout.nt; ++j)
      for (std::size_t i = 0; i < layout.nt; ++i) {
        auto body = [nb, k](std::span<const double> aik, std::span<const double> bkj, std::span<double> cij) {
          tile::gemm_nn(nb, aik.data(), bkj.data(), k == 0 ? 0.0 : 1.0, cij.data());
        };
        auto c = p.nerve_c.slice(layout.offset(i, j), size);
        context.spawn(gemm, body, nerve::read(p.nerve_a.slice(layout.offset(i, k), size)),
                      nerve::read(p.nerve_b.slice(layout.offset(k, j), size)), nerve::read_write(c));
      }
  context.wait_all();
}

double gflops(std::size_t n, double ns) { return 2.0 * static_cast<double>(n) * n * n / ns; }

}  // namespace

WorkloadResult run_w7_gemm(const WorkloadOptions& options) {
  const std::size_t n = options.quick ? 1024 : 4096, nb = options.quick ? 256 : 512;
  const std::string name = "n=" + std::to_string(n) + " nb=" + std::to_string(nb);
  WorkloadResult result{"W7", "tiled GEMM", name + " (double; GFLOP/s = 2n^3 per s)", {}, {}};
  nerve::Context context(nerve_settings(options));
  TbbLimit tbb_limit(options.threads);
  set_openmp_threads(options.threads);
  BlasThreads single(1);
  const unsigned threads = options.threads;
  Problem p(context, n, nb);
  const std::size_t nt = p.layout.nt;
  auto poison = [&p] { std::fill(p.c_tiles.begin(), p.c_tiles.end(), -1.0); };

  std::vector<Variant> variants;
  variants.push_back({name,
                      "nerve",
                      "nerve tile tasks",
                      "GFLOP/s",
                      false,
                      nt * nt * nt,
                      [&] {
                        auto mapped = p.nerve_c.map_write();
                        std::fill(mapped.begin(), mapped.end(), -1.0);
                      },
                      [&]() -> Trial {
                        Stopwatch watch;
                        multiply_nerve(context, p);
                        const double ns = watch.elapsed_ns();
                        auto mapped = p.nerve_c.map_read();
                        return {gflops(n, ns), p.check(mapped.span(), false, options.inject_fault)};
                      },
                      {}});
#if NERVE_HAVE_OPENMP
  variants.push_back({name,
                      "OpenMP",
                      "OpenMP parallel for over tiles",
                      "GFLOP/s",
                      false,
                      nt * nt,
                      poison,
                      [&]() -> Trial {
                        Stopwatch watch;
                        const long count = static_cast<long>(nt);
#pragma omp parallel for collapse(2) schedule(dynamic) num_threads(threads)
                        for (long j = 0; j < count; ++j)
                          for (long i = 0; i < count; ++i)
                            p.tile_product(static_cast<std::size_t>(i), static_cast<std::size_t>(j));
                        const double ns = watch.elapsed_ns();
                        return {gflops(n, ns), p.check(p.c_tiles, false, false)};
                      },
                      {}});
#endif
#if NERVE_HAVE_TBB
  variants.push_back({name,
                      "oneTBB",
                      "oneTBB parallel_for over tiles",
                      "GFLOP/s",
                      false,
                      nt * nt,
                      poison,
                      [&]() -> Trial {
                        Stopwatch watch;
                        tbb::parallel_for(std::size_t{0}, nt * nt,
                                          [&](std::size_t t) { p.tile_product(t % nt, t / nt); });
                        const double ns = watch.elapsed_ns();
                        return {gflops(n, ns), p.check(p.c_tiles, false, false)};
                      },
                      {}});
#endif
  variants.push_back({name,
                      "BLAS",
                      dgemm_variant,
                      "GFLOP/s",
                      false,
                      0,
                      [&] { std::fill(p.c.begin(), p.c.end(), -1.0); },
                      [&]() -> Trial {
                        double ns = 0;
                        {
                          BlasThreads blas(static_cast<int>(threads));
                          const int size = static_cast<int>(n);
                          Stopwatch watch;
                          cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, size, size, size, 1.0,
                                      p.a.data(), size, p.b.data(), size, 0.0, p.c.data(), size);
                          ns = watch.elapsed_ns();
                        }
                        std::this_thread::sleep_for(blas_settle);
                        return {gflops(n, ns), p.check(p.c, true, false)};
                      },
                      {}});
  result.measurements = measure_interleaved(variants, options);
  // WORKLOADS.md's second figure: each variant's % of multithreaded dgemm in the same run.
  note_share_of(result.measurements, dgemm_variant, "BLAS dgemm");
  return result;
}

}  // namespace nerve::bench
