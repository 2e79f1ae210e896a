// w10_glm.cpp — W10: logistic regression fitted by IRLS (Newton's method), 10^6 rows × 64 features
// (quick: 2·10^4 rows), 10 iterations. Each iteration is a map over row blocks followed by a tiny solve:
//   block b: η = X_b β, μ = σ(η), w = μ(1 − μ); H_b = X_bᵀ diag(w) X_b (dsyrk on √w ⊙ X_b),
//            g_b = X_bᵀ (y_b − μ) (dgemv)                                  — O(rows · p²), the work
//   then   H = Σ H_b, g = Σ g_b in block order; β += H⁻¹ g (dposv, 64 × 64) — O(p³), negligible
// Variants (same block kernels, single-threaded BLAS inside each block):
//   nerve     one task per block per iteration: read(X slice), read(y slice), write(partials slot)
//   OpenMP    `parallel for schedule(dynamic)` over blocks
//   oneTBB    tbb::parallel_for over blocks
//   naive     T std::threads per iteration, static split of the blocks
//   BLAS      no blocks: whole-matrix dgemv / dsyrk / dgemv with OpenBLAS on T threads (the weighted
//             copy √w ⊙ X is made serially, as a program that "just calls BLAS" would)
// Check: β after 10 iterations against a serial reference computed once (same algorithm, one thread):
// max |β − β_ref| ≤ 1e-9 · max |β_ref|. Figure: seconds per iteration; rows/s as the secondary
// figure "rows/s" (Measurement::extra, the JSON's `extra`).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <cblas.h>
#include <lapacke.h>

#if NERVE_HAVE_TBB
#include <tbb/parallel_for.h>
#endif

#include "nerve/nerve.hpp"

#include "blas_support.hpp"
#include "irls.hpp"
#include "measure.hpp"
#include "naive_threads.hpp"
#include "runtimes.hpp"
#include "workload.hpp"

namespace nerve::bench {
namespace {

constexpr int features = 64;
constexpr int iterations = 10;
constexpr std::size_t partial_size = irls::partial_size<features>;  // H_b then g_b
constexpr auto blas_settle = std::chrono::milliseconds(150);        // see w6_cholesky.cpp
const char* const case_name = "IRLS, 10 iterations";

void block_partials(std::span<const double> x, std::span<const double> y, const double* beta, double* out) {
  irls::block_partials<features>(x, y, beta, out);
}

// newton_step() sums the partials in block order and updates beta; "" or the failure.
std::string newton_step(std::span<const double> partials, std::size_t blocks, std::vector<double>& beta) {
  const int info = irls::newton_step<features>(partials, blocks, beta.data());
  return info == 0 ? std::string() : "dposv failed, info = " + std::to_string(info);
}

struct Data {
  std::size_t rows, block_rows, blocks;
  std::vector<double> x, y, partials;
  nerve::Buffer<double> nerve_x, nerve_y, nerve_partials;
  std::vector<double> reference;

  Data(nerve::Context& context, std::size_t count, std::size_t block)
      : rows(count),
        block_rows(block),
        blocks((count + block_rows - 1) / block_rows),
        x(count * features),
        y(count),
        partials(blocks * partial_size),
        nerve_x(context, count * features),
        nerve_y(context, count),
        nerve_partials(context, blocks * partial_size) {
    std::vector<double> truth(features);
    for (int c = 0; c < features; ++c) truth[c] = uniform(101, c) - 0.5;
    for (std::size_t r = 0; r < rows; ++r) {
      double eta = 0;
      for (int c = 0; c < features; ++c) {
        const double v = c == 0 ? 1.0 : 2.0 * uniform(102, r * features + c) - 1.0;  // column 0: intercept
        x[r * features + c] = v;
        eta += v * truth[c];
      }
      y[r] = uniform(103, r) < 1.0 / (1.0 + std::exp(-eta)) ? 1.0 : 0.0;
    }
    std::copy(x.begin(), x.end(), nerve_x.map_write().begin());
    std::copy(y.begin(), y.end(), nerve_y.map_write().begin());
  }
  std::size_t block_begin(std::size_t b) const { return b * block_rows; }
  std::size_t block_count(std::size_t b) const { return std::min(block_rows, rows - block_begin(b)); }
  void block(std::size_t b, const double* beta) {
    const std::size_t r0 = block_begin(b), n = block_count(b);
    block_partials({&x[r0 * features], n * features}, {&y[r0], n}, beta, &partials[b * partial_size]);
  }
  std::string check(const std::vector<double>& beta) const {
    double scale = 0, error = 0;
    for (int c = 0; c < features; ++c) {
      scale = std::max(scale, std::abs(reference[c]));
      error = std::max(error, std::abs(beta[c] - reference[c]));
    }
    if (error <= 1e-9 * scale) return {};
    char text[128];
    std::snprintf(text, sizeof text, "coefficients differ from the serial reference by %.3g (scale %.3g)",
                  error, scale);
    return text;
  }
};

// fit() runs the iterations with `map(beta)` filling data.partials (or nerve's); times them.
template <class Map>
Trial fit(Data& data, std::span<const double> partials, Map map, bool corrupt = false) {
  std::vector<double> beta(features, 0.0);
  std::string failure;
  Stopwatch watch;
  for (int it = 0; it < iterations && failure.empty(); ++it) {
    map(beta);
    failure = newton_step(partials, data.blocks, beta);
  }
  const double seconds = watch.elapsed_ns() / 1e9 / iterations;
  if (corrupt) beta[features / 2] += 1e-3;
  if (failure.empty()) failure = data.check(beta);
  return {seconds, failure, {{"rows/s", static_cast<double>(data.rows) / seconds}}};
}

Trial fit_nerve(nerve::Context& context, Data& data, bool corrupt) {
  std::vector<double> beta(features, 0.0);
  std::string failure;
  static const nerve::TaskOptions block_task = named("IRLS block");
  Stopwatch watch;
  for (int it = 0; it < iterations && failure.empty(); ++it) {
    std::array<double, features> b{};
    std::copy(beta.begin(), beta.end(), b.begin());
    for (std::size_t k = 0; k < data.blocks; ++k) {
      const std::size_t r0 = data.block_begin(k), n = data.block_count(k);
      context.spawn(
          block_task,
          [b](std::span<const double> x, std::span<const double> y, std::span<double> out) {
            block_partials(x, y, b.data(), out.data());
          },
          nerve::read(data.nerve_x.slice(r0 * features, n * features)),
          nerve::read(data.nerve_y.slice(r0, n)),
          nerve::write(data.nerve_partials.slice(k * partial_size, partial_size)));
    }
    auto partials = data.nerve_partials.map_read();  // waits for this iteration's blocks
    failure = newton_step(partials.span(), data.blocks, beta);
  }
  const double seconds = watch.elapsed_ns() / 1e9 / iterations;
  if (corrupt) beta[features / 2] += 1e-3;
  if (failure.empty()) failure = data.check(beta);
  return {seconds, failure, {{"rows/s", static_cast<double>(data.rows) / seconds}}};
}

// The whole-matrix version on multithreaded BLAS.
Trial fit_blas(Data& data, irls::Scratch& scratch, int threads) {
  Trial trial;
  {
    BlasThreads blas(threads);
    trial = fit(data, data.partials, [&](const std::vector<double>& beta) {
      // One "block": the whole matrix, the other blocks' partials zero.
      irls::block_partials<features>(data.x, data.y, beta.data(), data.partials.data(), scratch);
      std::fill(data.partials.begin() + partial_size, data.partials.end(), 0.0);
    });
  }
  std::this_thread::sleep_for(blas_settle);
  return trial;
}

}  // namespace

WorkloadResult run_w10_glm(const WorkloadOptions& options) {
  const std::size_t rows = options.quick ? 20'000 : 1'000'000;
  const std::size_t block_rows = options.quick ? 1024 : 8192;
  WorkloadResult result{"W10",
                        "GLM fit (IRLS)",
                        format_count(rows) + " rows x 64 features, logistic, 10 iterations, blocks of " +
                            std::to_string(block_rows) + " rows",
                        {},
                        {}};
  nerve::Context context(nerve_settings(options));
  TbbLimit tbb_limit(options.threads);
  set_openmp_threads(options.threads);
  BlasThreads single(1);
  const unsigned threads = options.threads;
  Data data(context, rows, block_rows);
  // The serial reference: one thread, the same block kernels and summation order.
  {
    std::vector<double> beta(features, 0.0);
    for (int it = 0; it < iterations; ++it) {
      for (std::size_t b = 0; b < data.blocks; ++b) data.block(b, beta.data());
      if (auto failure = newton_step(data.partials, data.blocks, beta); !failure.empty())
        throw std::runtime_error("W10 reference: " + failure);
    }
    data.reference = beta;
  }
  irls::Scratch scratch;  // the whole-matrix variant's, kept between its samples
  const std::string unit = "s/iteration";
  std::vector<Variant> variants;
  variants.push_back({case_name,
                      "nerve",
                      "nerve row-block tasks",
                      unit,
                      true,
                      data.blocks * iterations,
                      {},
                      [&] { return fit_nerve(context, data, options.inject_fault); },
                      {}});
#if NERVE_HAVE_OPENMP
  variants.push_back({case_name,
                      "OpenMP",
                      "OpenMP parallel for over blocks",
                      unit,
                      true,
                      data.blocks * iterations,
                      {},
                      [&] {
                        return fit(data, data.partials, [&](const std::vector<double>& beta) {
                          const long blocks = static_cast<long>(data.blocks);
#pragma omp parallel for schedule(dynamic) num_threads(threads)
                          for (long b = 0; b < blocks; ++b)
                            data.block(static_cast<std::size_t>(b), beta.data());
                        });
                      },
                      {}});
#endif
#if NERVE_HAVE_TBB
  variants.push_back({case_name,
                      "oneTBB",
                      "oneTBB parallel_for over blocks",
                      unit,
                      true,
                      data.blocks * iterations,
                      {},
                      [&] {
                        return fit(data, data.partials, [&](const std::vector<double>& beta) {
                          tbb::parallel_for(std::size_t{0}, data.blocks,
                                            [&](std::size_t b) { data.block(b, beta.data()); });
                        });
                      },
                      {}});
#endif
  variants.push_back({case_name,
                      "naive",
                      "naive threads (static split)",
                      unit,
                      true,
                      // The same block computations as the others, T threads taking a static share
                      // each: counted alike so that per-block figures compare (BLAS has no blocks: 0).
                      data.blocks * iterations,
                      {},
                      [&] {
                        return fit(data, data.partials, [&](const std::vector<double>& beta) {
                          static_split(data.blocks, threads, [&](std::size_t begin, std::size_t end) {
                            for (std::size_t b = begin; b < end; ++b) data.block(b, beta.data());
                          });
                        });
                      },
                      {}});
  variants.push_back({case_name,
                      "BLAS",
                      "whole-matrix BLAS (OpenBLAS, T threads)",
                      unit,
                      true,
                      0,
                      {},
                      [&] { return fit_blas(data, scratch, static_cast<int>(threads)); },
                      {}});
  result.measurements = measure_interleaved(variants, options);
  return result;
}

}  // namespace nerve::bench
