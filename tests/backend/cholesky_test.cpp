// A tiled Cholesky factorisation whose tile kernels (POTRF, TRSM, SYRK, GEMM) exist for both the CPU
// workers and OpenCL, its tasks spread over both at random: one graph, two kinds of device, the memory
// layer moving tiles between them. Checked by the residual ||A - L L^T|| / ||A||. Skips without OpenCL.
#include <cmath>
#include <random>

#include "nerve/opencl.hpp"

#include "opencl_cholesky_tiles.hpp"
#include "opencl_support.hpp"

namespace nerve::testing {
namespace {

// Tiles are nb x nb, column-major: element (row r, column c) at c * nb + r. The OpenCL bodies are
// examples/common/opencl_cholesky_tiles.hpp; the CPU ones below are their plain reference.
const char* const tile_source = nerve::examples::opencl_cholesky_tiles;

void potrf(double* a, int nb) {
  for (int j = 0; j < nb; ++j) {
    double d = a[j * nb + j];
    for (int k = 0; k < j; ++k) d -= a[k * nb + j] * a[k * nb + j];
    d = std::sqrt(d);
    a[j * nb + j] = d;
    for (int i = j + 1; i < nb; ++i) {
      double s = a[j * nb + i];
      for (int k = 0; k < j; ++k) s -= a[k * nb + i] * a[k * nb + j];
      a[j * nb + i] = s / d;
    }
    for (int i = 0; i < j; ++i) a[j * nb + i] = 0.0;
  }
}
void trsm(const double* l, double* b, int nb) {
  for (int r = 0; r < nb; ++r) {
    for (int j = 0; j < nb; ++j) {
      double s = b[j * nb + r];
      for (int k = 0; k < j; ++k) s -= b[k * nb + r] * l[k * nb + j];
      b[j * nb + r] = s / l[j * nb + j];
    }
  }
}
void gemm(const double* a, const double* b, double* c, int nb) {  // syrk is gemm with b = a
  for (int j = 0; j < nb; ++j) {
    for (int i = 0; i < nb; ++i) {
      double s = 0.0;
      for (int k = 0; k < nb; ++k) s += a[k * nb + i] * b[k * nb + j];
      c[j * nb + i] -= s;
    }
  }
}

struct TileKernels {
  Kernel potrf{"potrf"}, trsm{"trsm"}, syrk{"syrk"}, gemm{"gemm"};
  explicit TileKernels(int nb) {
    const auto elements = [nb](const KernelArgs&) { return static_cast<std::size_t>(nb) * nb; };
    const auto rows = [nb](const KernelArgs&) { return static_cast<std::size_t>(nb); };
    potrf.cpu([](const KernelArgs& args) {
      nerve::testing::potrf(args.span<double>(0).data(), args.value<int>(0));
    });
    trsm.cpu([](const KernelArgs& args) {
      nerve::testing::trsm(args.span<const double>(0).data(), args.span<double>(1).data(),
                           args.value<int>(0));
    });
    syrk.cpu([](const KernelArgs& args) {
      const double* a = args.span<const double>(0).data();
      nerve::testing::gemm(a, a, args.span<double>(1).data(), args.value<int>(0));
    });
    gemm.cpu([](const KernelArgs& args) {
      nerve::testing::gemm(args.span<const double>(0).data(), args.span<const double>(1).data(),
                           args.span<double>(2).data(), args.value<int>(0));
    });
    opencl::attach(potrf, tile_source, "potrf",
                   {.global_size = [](const KernelArgs&) { return std::size_t{1}; }});
    opencl::attach(trsm, tile_source, "trsm", {.global_size = rows});
    opencl::attach(syrk, tile_source, "syrk", {.global_size = elements});
    opencl::attach(gemm, tile_source, "gemm", {.global_size = elements});
  }
};

TEST(HeterogeneousCholesky, TilesFactoredOnCpuWorkersAndOpenclMatchTheMatrix) {
  NERVE_SKIP_WITHOUT_OPENCL();
  constexpr int tiles = 4, nb = 32, n = tiles * nb;
  // A symmetric positive definite matrix: random + n I.
  std::mt19937 random(42);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::vector<double> matrix(static_cast<std::size_t>(n) * n);
  for (int c = 0; c < n; ++c)
    for (int r = c; r < n; ++r) matrix[c * n + r] = matrix[r * n + c] = uniform(random) + (r == c ? n : 0.0);
  const auto at = [&](int r, int c) { return matrix[static_cast<std::size_t>(c) * n + r]; };

  auto context = std::make_unique<Context>(opencl_settings(2));
  {
    const TileKernels kernels(nb);
    std::vector<std::vector<Buffer<double>>> tile(tiles);  // lower triangle: tile[i][j], j <= i
    for (int i = 0; i < tiles; ++i) {
      for (int j = 0; j <= i; ++j) {
        std::vector<double> data(static_cast<std::size_t>(nb) * nb);
        for (int c = 0; c < nb; ++c)
          for (int r = 0; r < nb; ++r) data[c * nb + r] = at(i * nb + r, j * nb + c);
        tile[i].emplace_back(*context, data);
      }
    }
    const auto place = [&] { return TaskOptions{.device = static_cast<int>(random() % 2)}; };
    for (int k = 0; k < tiles; ++k) {
      context->spawn(place(), kernels.potrf, read_write(tile[k][k]), value(nb));
      for (int i = k + 1; i < tiles; ++i)
        context->spawn(place(), kernels.trsm, read(tile[k][k]), read_write(tile[i][k]), value(nb));
      for (int i = k + 1; i < tiles; ++i) {
        context->spawn(place(), kernels.syrk, read(tile[i][k]), read_write(tile[i][i]), value(nb));
        for (int j = k + 1; j < i; ++j)
          context->spawn(place(), kernels.gemm, read(tile[i][k]), read(tile[j][k]), read_write(tile[i][j]),
                         value(nb));
      }
    }
    context->wait_all();
    // L from the tiles, then ||A - L L^T|| / ||A|| (Frobenius).
    std::vector<double> l(static_cast<std::size_t>(n) * n, 0.0);
    for (int i = 0; i < tiles; ++i) {
      for (int j = 0; j <= i; ++j) {
        const auto data = tile[i][j].to_vector();
        for (int c = 0; c < nb; ++c)
          for (int r = 0; r < nb; ++r) l[(j * nb + c) * n + (i * nb + r)] = data[c * nb + r];
      }
    }
    double difference = 0, norm = 0;
    for (int c = 0; c < n; ++c) {
      for (int r = 0; r < n; ++r) {
        double product = 0;
        for (int k = 0; k <= std::min(r, c); ++k) product += l[k * n + r] * l[k * n + c];
        difference += (at(r, c) - product) * (at(r, c) - product);
        norm += at(r, c) * at(r, c);
      }
    }
    EXPECT_LT(std::sqrt(difference / norm), 1e-12);
    EXPECT_GT(context->impl()->devices[0]->counters().launches, 0u) << "some tile tasks ran on OpenCL";
  }
  context->wait_all();
  expect_no_leaks(*context);
}

}  // namespace
}  // namespace nerve::testing
