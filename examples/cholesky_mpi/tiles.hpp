// tiles.hpp — the tile kernels and the test matrix of the distributed Cholesky and GEMM examples.
//
// Tiles are b×b, column-major, double precision. The matrix is symmetric positive definite by
// construction: a(i, j) = a(j, i) in [0, 1) from a hash of (min, max), plus n on the diagonal, so every
// rank can generate exactly the tiles it owns, and a single process can generate the whole matrix.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>

#include <cblas.h>

extern "C" void dpotrf_(const char* uplo, const int* n, double* a, const int* lda, int* info);

namespace example {

// Sizes every product of which stays in range: a tile's side is BLAS's int and its 8·tile² bytes stay
// under 2 GiB (one MPI payload, one library call); n² doubles (a whole-matrix check) cannot wrap a
// size_t, nor can the (n / tile)² tile handles.
constexpr std::size_t max_n = std::size_t{1} << 20;
constexpr std::size_t max_tile = 16383;

inline double entry(std::size_t row, std::size_t col, std::size_t n) {
  const std::uint64_t lo = row < col ? row : col;
  const std::uint64_t hi = row < col ? col : row;
  std::uint64_t x = lo * 0x9E3779B97F4A7C15ull ^ (hi + 0x632BE59BD9B4E019ull);
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return static_cast<double>(x >> 11) * 0x1.0p-53 + (row == col ? static_cast<double>(n) : 0.0);
}

// fill_tile() writes tile (ti, tj) of the n×n test matrix.
inline void fill_tile(std::span<double> tile, std::size_t ti, std::size_t tj, std::size_t b, std::size_t n) {
  for (std::size_t c = 0; c < b; ++c) {
    for (std::size_t r = 0; r < b; ++r) tile[c * b + r] = entry(ti * b + r, tj * b + c, n);
  }
}

inline void potrf(std::span<double> a, int b) {
  int info = 0;
  dpotrf_("L", &b, a.data(), &b, &info);
  if (info != 0) throw std::runtime_error("dpotrf failed: info " + std::to_string(info));
}
// trsm: a_ik := a_ik * L_kk^-T
inline void trsm(std::span<double> a, std::span<const double> l, int b) {
  cblas_dtrsm(CblasColMajor, CblasRight, CblasLower, CblasTrans, CblasNonUnit, b, b, 1.0, l.data(), b,
              a.data(), b);
}
// syrk: a_ii := a_ii - a_ik a_ik^T (lower part)
inline void syrk(std::span<double> a, std::span<const double> l, int b) {
  cblas_dsyrk(CblasColMajor, CblasLower, CblasNoTrans, b, b, -1.0, l.data(), b, 1.0, a.data(), b);
}
// gemm_nt: a_ij := a_ij - a_ik a_jk^T
inline void gemm_nt(std::span<double> a, std::span<const double> x, std::span<const double> y, int b) {
  cblas_dgemm(CblasColMajor, CblasNoTrans, CblasTrans, b, b, b, -1.0, x.data(), b, y.data(), b, 1.0, a.data(),
              b);
}
// gemm_nn: c := c + x y
inline void gemm_nn(std::span<double> c, std::span<const double> x, std::span<const double> y, int b) {
  cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, b, b, b, 1.0, x.data(), b, y.data(), b, 1.0,
              c.data(), b);
}

}  // namespace example
