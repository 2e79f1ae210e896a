#include "blas_support.hpp"

#include <cmath>

#include <cblas.h>

namespace nerve::bench {
namespace {

double norm2(std::span<const double> v) { return cblas_dnrm2(static_cast<int>(v.size()), v.data(), 1); }

// Frobenius norm of a symmetric matrix from its lower triangle.
double symmetric_frobenius(std::size_t n, std::span<const double> a) {
  double sum = 0;
  for (std::size_t c = 0; c < n; ++c) {
    sum += a[c * n + c] * a[c * n + c];
    for (std::size_t r = c + 1; r < n; ++r) sum += 2 * a[c * n + r] * a[c * n + r];
  }
  return std::sqrt(sum);
}

std::vector<double> random_vector(std::size_t n) {
  std::vector<double> x(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = uniform(77, i) - 0.5;
  return x;
}

}  // namespace

void set_blas_threads(int threads) { openblas_set_num_threads(threads); }
int blas_threads() { return openblas_get_num_threads(); }
std::string blas_description() { return openblas_get_config(); }

void to_tiles(const TileLayout& layout, std::span<const double> column_major, std::span<double> tiles) {
  const std::size_t n = layout.n, nb = layout.nb;
  for (std::size_t tj = 0; tj < layout.nt; ++tj)
    for (std::size_t ti = 0; ti < layout.nt; ++ti) {
      double* tile = tiles.data() + layout.offset(ti, tj);
      for (std::size_t c = 0; c < nb; ++c)
        for (std::size_t r = 0; r < nb; ++r) tile[c * nb + r] = column_major[(tj * nb + c) * n + ti * nb + r];
    }
}

void from_tiles(const TileLayout& layout, std::span<const double> tiles, std::span<double> column_major) {
  const std::size_t n = layout.n, nb = layout.nb;
  for (std::size_t tj = 0; tj < layout.nt; ++tj)
    for (std::size_t ti = 0; ti < layout.nt; ++ti) {
      const double* tile = tiles.data() + layout.offset(ti, tj);
      for (std::size_t c = 0; c < nb; ++c)
        for (std::size_t r = 0; r < nb; ++r) column_major[(tj * nb + c) * n + ti * nb + r] = tile[c * nb + r];
    }
}

std::vector<double> spd_matrix(std::size_t n, std::uint64_t seed) {
  std::vector<double> a(n * n);
  for (std::size_t c = 0; c < n; ++c) {
    for (std::size_t r = c; r < n; ++r) {
      const double v = uniform(seed, c * n + r);
      a[c * n + r] = v;
      a[r * n + c] = v;
    }
    a[c * n + c] += static_cast<double>(n);
  }
  return a;
}

double cholesky_probe_error(std::size_t n, std::span<const double> a, std::span<const double> factor) {
  const int size = static_cast<int>(n);
  const std::vector<double> x = random_vector(n);
  std::vector<double> ax(n), llx(x);
  cblas_dsymv(CblasColMajor, CblasLower, size, 1.0, a.data(), size, x.data(), 1, 0.0, ax.data(), 1);
  cblas_dtrmv(CblasColMajor, CblasLower, CblasTrans, CblasNonUnit, size, factor.data(), size, llx.data(), 1);
  cblas_dtrmv(CblasColMajor, CblasLower, CblasNoTrans, CblasNonUnit, size, factor.data(), size, llx.data(),
              1);
  cblas_daxpy(size, -1.0, ax.data(), 1, llx.data(), 1);
  const double error = norm2(llx) / (symmetric_frobenius(n, a) * norm2(x));
  return std::isfinite(error) ? error : INFINITY;
}

double cholesky_residual(std::size_t n, std::span<const double> a, std::span<const double> factor) {
  const int size = static_cast<int>(n);
  std::vector<double> l(n * n, 0.0), r(a.begin(), a.end());
  for (std::size_t c = 0; c < n; ++c)
    for (std::size_t row = c; row < n; ++row) l[c * n + row] = factor[c * n + row];
  // r = A - L Lᵀ (lower triangle)
  cblas_dsyrk(CblasColMajor, CblasLower, CblasNoTrans, size, size, -1.0, l.data(), size, 1.0, r.data(), size);
  const double residual = symmetric_frobenius(n, r) / symmetric_frobenius(n, a);
  return std::isfinite(residual) ? residual : INFINITY;
}

double gemm_probe_error(std::size_t n, std::span<const double> a, std::span<const double> b,
                        std::span<const double> c) {
  const int size = static_cast<int>(n);
  const std::vector<double> x = random_vector(n);
  std::vector<double> bx(n), abx(n), cx(n);
  cblas_dgemv(CblasColMajor, CblasNoTrans, size, size, 1.0, b.data(), size, x.data(), 1, 0.0, bx.data(), 1);
  cblas_dgemv(CblasColMajor, CblasNoTrans, size, size, 1.0, a.data(), size, bx.data(), 1, 0.0, abx.data(), 1);
  cblas_dgemv(CblasColMajor, CblasNoTrans, size, size, 1.0, c.data(), size, x.data(), 1, 0.0, cx.data(), 1);
  cblas_daxpy(size, -1.0, abx.data(), 1, cx.data(), 1);
  const double scale = norm2(a) * norm2(b) * norm2(x);
  const double error = norm2(cx) / scale;
  return std::isfinite(error) ? error : INFINITY;
}

}  // namespace nerve::bench
