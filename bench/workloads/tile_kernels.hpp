// tile_kernels.hpp — the BLAS/LAPACK calls on nb × nb column-major tiles that the tiled Cholesky
// (W6) and GEMM (W7) run as tasks, identical for nerve and the OpenMP baseline. Each is one
// single-threaded BLAS call (the caller keeps OpenBLAS at one thread, see blas_support.hpp).
#pragma once

#include <stdexcept>
#include <string>

#include <cblas.h>
#include <lapacke.h>

namespace nerve::bench::tile {

// potrf(): A_kk = L_kk, the Cholesky factor of a diagonal tile (lower). Throws when the tile is not
// positive definite (a wrong input or an earlier wrong update).
inline void potrf(int nb, double* akk) {
  const lapack_int info = LAPACKE_dpotrf_work(LAPACK_COL_MAJOR, 'L', nb, akk, nb);
  if (info != 0) throw std::runtime_error("POTRF of a diagonal tile failed, info = " + std::to_string(info));
}
// trsm(): A_ik = A_ik L_kkᵀ⁻¹ (a tile below the diagonal).
inline void trsm(int nb, const double* lkk, double* aik) {
  cblas_dtrsm(CblasColMajor, CblasRight, CblasLower, CblasTrans, CblasNonUnit, nb, nb, 1.0, lkk, nb, aik, nb);
}
// syrk(): A_ii -= A_ik A_ikᵀ (a diagonal tile's update, lower triangle).
inline void syrk(int nb, const double* aik, double* aii) {
  cblas_dsyrk(CblasColMajor, CblasLower, CblasNoTrans, nb, nb, -1.0, aik, nb, 1.0, aii, nb);
}
// gemm_nt(): A_ij -= A_ik A_jkᵀ (an off-diagonal tile's update in Cholesky).
inline void gemm_nt(int nb, const double* aik, const double* ajk, double* aij) {
  cblas_dgemm(CblasColMajor, CblasNoTrans, CblasTrans, nb, nb, nb, -1.0, aik, nb, ajk, nb, 1.0, aij, nb);
}
// gemm_nn(): C_ij = A_ik B_kj + beta C_ij (GEMM; beta 0 for the first k).
inline void gemm_nn(int nb, const double* aik, const double* bkj, double beta, double* cij) {
  cblas_dgemm(CblasColMajor, CblasNoTrans, CblasNoTrans, nb, nb, nb, 1.0, aik, nb, bkj, nb, beta, cij, nb);
}

}  // namespace nerve::bench::tile
