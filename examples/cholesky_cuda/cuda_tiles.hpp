// cuda_tiles.hpp — the Cholesky tile kernels on a GPU: cuSOLVER potrf, cuBLAS trsm / syrk / gemm.
//
// Each function enqueues on `stream` of the current device (a nerve CUDA launcher's arguments) and
// returns at once. Handles and the potrf workspace are made once per device, on first use, by the
// device's launcher thread (nerve calls one device's launchers from one thread). release() frees them;
// call it after the nerve context is gone.
#pragma once

#include <cstddef>

namespace example::gpu {

void potrf(double* a, int b, int device, void* stream);
void trsm(double* a, const double* l, int b, int device, void* stream);
void syrk(double* a, const double* l, int b, int device, void* stream);
void gemm_nt(double* a, const double* x, const double* y, int b, int device, void* stream);
// failures(): potrf tiles that were not positive definite (read from the devices; synchronises).
int failures();
void release();

// potrf_alone(): cuSOLVER potrf of the whole n×n column-major matrix `host` on device 0 — the baseline.
// Returns the seconds of the factorisation itself and, in `with_transfers`, including the upload.
double potrf_alone(const double* host, std::size_t n, double* with_transfers);

// device_count(): CUDA devices; 0 with `why` set when none.
int device_count(const char** why);

}  // namespace example::gpu
