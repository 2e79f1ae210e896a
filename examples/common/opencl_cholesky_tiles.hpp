// opencl_cholesky_tiles.hpp — the four tile operations of a tiled Cholesky factorisation in OpenCL C,
// on nb x nb column-major tiles (element (row r, column c) at c * nb + r), for Kernels that also have
// CPU bodies. Shared by the heterogeneous Cholesky test (tests/backend) and W6's CPU + OpenCL case
// (bench/workloads).
//
// Entry points and their global sizes: potrf (1: one work item factors the tile in place, a = L, and
// zeroes the upper triangle), trsm (nb: b = b L^-T, a row per item), syrk (nb * nb: c -= a a^T),
// gemm (nb * nb: c -= a b^T). Each takes `int nb` last.
#pragma once

namespace nerve::examples {

inline constexpr const char* opencl_cholesky_tiles = R"(
  #pragma OPENCL EXTENSION cl_khr_fp64 : enable
  __kernel void potrf(__global double* a, int nb) {
    for (int j = 0; j < nb; ++j) {
      double d = a[j * nb + j];
      for (int k = 0; k < j; ++k) d -= a[k * nb + j] * a[k * nb + j];
      d = sqrt(d);
      a[j * nb + j] = d;
      for (int i = j + 1; i < nb; ++i) {
        double s = a[j * nb + i];
        for (int k = 0; k < j; ++k) s -= a[k * nb + i] * a[k * nb + j];
        a[j * nb + i] = s / d;
      }
      for (int i = 0; i < j; ++i) a[j * nb + i] = 0.0;
    }
  }
  __kernel void trsm(__global const double* l, __global double* b, int nb) {
    const int r = get_global_id(0);
    for (int j = 0; j < nb; ++j) {
      double s = b[j * nb + r];
      for (int k = 0; k < j; ++k) s -= b[k * nb + r] * l[k * nb + j];
      b[j * nb + r] = s / l[j * nb + j];
    }
  }
  __kernel void syrk(__global const double* a, __global double* c, int nb) {
    const int i = get_global_id(0) % nb, j = get_global_id(0) / nb;
    double s = 0.0;
    for (int k = 0; k < nb; ++k) s += a[k * nb + i] * a[k * nb + j];
    c[j * nb + i] -= s;
  }
  __kernel void gemm(__global const double* a, __global const double* b, __global double* c, int nb) {
    const int i = get_global_id(0) % nb, j = get_global_id(0) / nb;
    double s = 0.0;
    for (int k = 0; k < nb; ++k) s += a[k * nb + i] * b[k * nb + j];
    c[j * nb + i] -= s;
  }
)";

}  // namespace nerve::examples
