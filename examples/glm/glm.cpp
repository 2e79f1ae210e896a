// glm.cpp — fitting a generalized linear model (logistic regression) by IRLS with nerve: the
// seed's "GLM fitting on BLAS", as a program to copy from. The benchmark version is W10
// (bench/workloads/w10_glm.cpp, run by openclaw-benchmark).
//
// IRLS is Newton's method on the log-likelihood. Each iteration needs, over all rows r,
//   H = Σ w_r x_r x_rᵀ  (w_r = μ_r (1 − μ_r), μ_r = σ(x_r · β))   and   g = Σ (y_r − μ_r) x_r,
// then β += H⁻¹ g. The sums over rows are the work (rows × features² flops) and split into
// independent row blocks: one nerve task per block reads its slice of X and y and writes its own
// partial (H_b, g_b). Summing the partials in block order on the host makes the result the same on
// every run and every number of workers; the 16 × 16 solve is negligible.
//
// Usage: glm [rows] (4096 to 4294967296, default 200,000). Prints the fitted coefficients next to the
// true ones and checks them against a plain serial fit; exit 1 if they differ (1 too if the rows do
// not fit in memory).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <random>
#include <span>
#include <vector>

#include "nerve/nerve.hpp"

#include "arguments.hpp"
#include "irls.hpp"

namespace {

constexpr int features = 16;
constexpr std::size_t block_rows = 4096;
constexpr std::size_t partial_size = irls::partial_size<features>;  // H_b (column-major), then g_b
// At most 2^32 rows: rows × features doubles cannot wrap a size_t (whether they fit in memory is
// another matter: run() then throws std::bad_alloc).
constexpr std::size_t max_rows = std::size_t{1} << 32;

}  // namespace

int run(std::size_t rows);

int main(int argc, char** argv) {
  if (argc > 1 && nerve_examples::is_help(argv[1])) {
    std::printf("usage: glm [rows, %zu to %zu]\n", block_rows, max_rows);
    return 0;
  }
  const auto parsed =
      argc > 1 ? nerve_examples::parse_count(argv[1]) : std::optional<unsigned long long>(200'000);
  if (argc > 2 || !parsed || *parsed < block_rows || *parsed > max_rows) {
    std::fprintf(stderr, "usage: glm [rows, %zu to %zu]\n", block_rows, max_rows);
    return 2;
  }
  try {
    return run(*parsed);
  } catch (const std::exception& error) {  // e.g. more rows than the memory holds: std::bad_alloc
    std::fprintf(stderr, "glm: %llu rows: %s\n", *parsed, error.what());
    return 1;
  }
}

int run(std::size_t rows) {
  // Tile kernels run one per worker: keep OpenBLAS itself single-threaded, or every BLAS call
  // inside a task would start its own threads on the same cores.
  openblas_set_num_threads(1);

  // Synthetic data from known coefficients (column 0 is the intercept).
  std::mt19937_64 random(42);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  std::vector<double> truth(features), x(rows * features), y(rows);
  for (double& b : truth) b = 0.5 * uniform(random);
  for (std::size_t r = 0; r < rows; ++r) {
    double eta = 0;
    for (int c = 0; c < features; ++c)
      eta += truth[c] * (x[r * features + c] = c == 0 ? 1.0 : uniform(random));
    y[r] = (uniform(random) + 1) / 2 < 1 / (1 + std::exp(-eta)) ? 1.0 : 0.0;
  }

  nerve::Context context;
  nerve::Buffer<double> bx(context, std::span<const double>(x)), by(context, std::span<const double>(y));
  const std::size_t blocks = (rows + block_rows - 1) / block_rows;
  nerve::Buffer<double> partials(context, blocks * partial_size);

  std::vector<double> beta(features, 0.0);
  for (int iteration = 0; iteration < 10; ++iteration) {
    std::array<double, features> current{};  // each task gets its own copy of β
    std::copy(beta.begin(), beta.end(), current.begin());
    for (std::size_t b = 0; b < blocks; ++b) {
      const std::size_t first = b * block_rows, count = std::min(block_rows, rows - first);
      context.spawn(
          [current](std::span<const double> xs, std::span<const double> ys, std::span<double> out) {
            irls::block_partials<features>(xs, ys, current.data(), out.data());
          },
          nerve::read(bx.slice(first * features, count * features)), nerve::read(by.slice(first, count)),
          nerve::write(partials.slice(b * partial_size, partial_size)));
    }
    auto sums = partials.map_read();  // waits for this iteration's tasks
    if (irls::newton_step<features>(sums.span(), blocks, beta.data()) != 0) {
      std::fprintf(stderr, "glm: the Hessian is not positive definite\n");
      return 1;
    }
  }

  // The same fit, serially, as the check.
  std::vector<double> reference(features, 0.0), serial(blocks * partial_size);
  for (int iteration = 0; iteration < 10; ++iteration) {
    for (std::size_t b = 0; b < blocks; ++b) {
      const std::size_t first = b * block_rows, count = std::min(block_rows, rows - first);
      irls::block_partials<features>({&x[first * features], count * features}, {&y[first], count},
                                     reference.data(), &serial[b * partial_size]);
    }
    irls::newton_step<features>(serial, blocks, reference.data());
  }
  double difference = 0;
  std::printf("%zu rows x %d features, 10 IRLS iterations on %u workers\n feature      true    fitted\n",
              rows, features, context.worker_count());
  for (int c = 0; c < features; ++c) {
    std::printf("  %6d  %8.4f  %8.4f\n", c, truth[c], beta[c]);
    difference = std::max(difference, std::abs(beta[c] - reference[c]));
  }
  std::printf("largest difference from the serial fit: %.3g\n", difference);
  return difference <= 1e-9 ? 0 : 1;
}
