// irls.hpp — the two steps of an IRLS iteration (Newton's method) for logistic regression, shared by
// the GLM example (glm.cpp) and its benchmark W10 (bench/workloads/w10_glm.cpp).
//
// Over all rows r, an iteration needs H = Σ w_r x_r x_rᵀ (w_r = μ_r (1 − μ_r), μ_r = σ(x_r · β)) and
// g = Σ (y_r − μ_r) x_r, then β += H⁻¹ g. The sums split into independent row blocks: block_partials()
// computes one block's (H_b, g_b); newton_step() sums the blocks' partials in block order (so the
// result does not depend on who computed which block) and solves the small system.
//
// Both are plain functions on host memory, safe to call from any thread at once (block_partials()
// without a Scratch uses a thread-local one). BLAS is called as linked: a caller that runs blocks on
// several threads keeps OpenBLAS single-threaded (openblas_set_num_threads(1)).
#pragma once

#include <cmath>
#include <cstddef>
#include <span>
#include <vector>

#include <cblas.h>
#include <lapacke.h>

namespace irls {

// partial_size<Features> doubles per block: H_b (Features × Features, column-major, lower
// triangle filled), then g_b (Features).
template <int Features>
inline constexpr std::size_t partial_size = std::size_t{Features} * Features + Features;

// Scratch is the per-call working memory of block_partials(): η and √w ⊙ X_b.
struct Scratch {
  std::vector<double> eta, scaled;
};

// block_partials() computes the (H_b, g_b) of the rows x (row-major, rows × Features) and labels y
// (0 or 1) into out[0 .. partial_size). BLAS does the heavy part: H_b = Sᵀ S with S = √w ⊙ X_b
// (dsyrk), g_b = X_bᵀ (y − μ) (dgemv).
template <int Features>
void block_partials(std::span<const double> x, std::span<const double> y, const double* beta, double* out,
                    Scratch& scratch) {
  const int rows = static_cast<int>(y.size());
  scratch.eta.resize(y.size());
  scratch.scaled.resize(x.size());
  double* eta = scratch.eta.data();
  double* scaled = scratch.scaled.data();
  cblas_dgemv(CblasRowMajor, CblasNoTrans, rows, Features, 1.0, x.data(), Features, beta, 1, 0.0, eta, 1);
  for (int r = 0; r < rows; ++r) {
    const double mu = 1.0 / (1.0 + std::exp(-eta[r]));
    const double root_w = std::sqrt(mu * (1.0 - mu));
    for (int c = 0; c < Features; ++c) scaled[r * Features + c] = root_w * x[r * Features + c];
    eta[r] = y[r] - mu;  // from here on the residual
  }
  // Row-major S (rows × Features) is column-major Sᵀ: SᵀS is a NoTrans syrk on it.
  cblas_dsyrk(CblasColMajor, CblasLower, CblasNoTrans, Features, rows, 1.0, scaled, Features, 0.0, out,
              Features);
  cblas_dgemv(CblasRowMajor, CblasTrans, rows, Features, 1.0, x.data(), Features, eta, 1, 0.0,
              out + Features * Features, 1);
}

template <int Features>
void block_partials(std::span<const double> x, std::span<const double> y, const double* beta, double* out) {
  thread_local Scratch scratch;
  block_partials<Features>(x, y, beta, out, scratch);
}

// newton_step() sums `blocks` consecutive partials, solves H δ = g by Cholesky (LAPACK dposv) and adds
// δ to beta[0 .. Features). Returns dposv's info: 0 on success, > 0 when H is not positive definite
// (beta is then unchanged).
template <int Features>
int newton_step(std::span<const double> partials, std::size_t blocks, double* beta) {
  constexpr std::size_t size = partial_size<Features>;
  std::vector<double> sum(size, 0.0);
  for (std::size_t b = 0; b < blocks; ++b)
    for (std::size_t i = 0; i < size; ++i) sum[i] += partials[b * size + i];
  double* h = sum.data();
  double* g = sum.data() + Features * Features;
  const lapack_int info = LAPACKE_dposv(LAPACK_COL_MAJOR, 'L', Features, 1, h, Features, g, Features);
  if (info != 0) return static_cast<int>(info);
  for (int c = 0; c < Features; ++c) beta[c] += g[c];
  return 0;
}

}  // namespace irls
