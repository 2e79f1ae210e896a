// cuda_tiles.hpp — the Cholesky tile kernels on a GPU: cuSOLVER potrf, cuBLAS trsm / syrk / gemm.
//
// Each function enqueues on `stream` of the current device (a nerve CUDA launcher's arguments) and
// returns at once: no allocation, no handle creation, no synchronisation on the launch path once the
// stream has been seen. Every (device, stream) pair gets its own cuBLAS handle (bound to that stream,
// with its own workspace: a handle shared across streams would share its workspace between kernels
// running concurrently) and its own cuSOLVER handle and potrf workspace; they are made on the
// stream's first launch, so a warm-up round that touches every stream keeps them out of timed work.
// potrf writes its info into a slot of its own (a device array sized by prepare()), so a failure
// on any tile is kept, not overwritten by the next potrf.
//
// prepare() initialises the libraries on a device (cuBLAS / cuSOLVER's first handle loads their
// modules: tenths of a second) and allocates the info slots, on the calling thread — call it before
// timing. release() frees everything; call it after the nerve context is gone.
#pragma once

#include <cstddef>

namespace example::gpu {

// prepare(): the libraries and `potrf_calls` info slots on `device` (synchronises; before timing).
void prepare(int device, int potrf_calls);

void potrf(double* a, int b, int device, void* stream);
void trsm(double* a, const double* l, int b, int device, void* stream);
void syrk(double* a, const double* l, int b, int device, void* stream);
void gemm_nt(double* a, const double* x, const double* y, int b, int device, void* stream);
// failures(): potrf calls that found a tile not positive definite (read from the devices, after the
// work is done; synchronises).
int failures();
void release();

// potrf_alone(): cuSOLVER potrf of the whole n×n column-major matrix `host` on device 0 — the baseline.
// Returns the seconds of the factorisation itself and, in `with_transfers`, including the upload.
double potrf_alone(const double* host, std::size_t n, double* with_transfers);

// device_count(): CUDA devices; 0 with `why` set when none.
int device_count(const char** why);

}  // namespace example::gpu
