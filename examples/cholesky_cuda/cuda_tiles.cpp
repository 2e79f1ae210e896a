#include "cuda_tiles.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>

#include <cublas_v2.h>
#include <cusolverDn.h>

#include <cuda_runtime.h>

namespace example::gpu {
namespace {

void check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  std::fprintf(stderr, "cholesky_cuda: %s: %s\n", what, cudaGetErrorString(status));
  std::abort();
}
void check(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  std::fprintf(stderr, "cholesky_cuda: %s: cuBLAS status %d\n", what, static_cast<int>(status));
  std::abort();
}
void check(cusolverStatus_t status, const char* what) {
  if (status == CUSOLVER_STATUS_SUCCESS) return;
  std::fprintf(stderr, "cholesky_cuda: %s: cuSOLVER status %d\n", what, static_cast<int>(status));
  std::abort();
}

// One device's handles. Only that device's launcher thread uses them (the map itself is locked).
struct DeviceState {
  cublasHandle_t blas = nullptr;
  cusolverDnHandle_t solver = nullptr;
  double* workspace = nullptr;
  int workspace_size = 0;
  int* info = nullptr;  // potrf's info, accumulated over tiles: any non-zero is a failure
  int tile = 0;
};

std::mutex states_mutex;
std::map<int, std::unique_ptr<DeviceState>>& states() {
  static std::map<int, std::unique_ptr<DeviceState>> all;
  return all;
}

DeviceState& state(int device, int b) {
  std::lock_guard lock(states_mutex);
  auto& slot = states()[device];
  if (!slot) {
    slot = std::make_unique<DeviceState>();
    check(cublasCreate(&slot->blas), "cublasCreate");
    check(cusolverDnCreate(&slot->solver), "cusolverDnCreate");
    check(cudaMalloc(&slot->info, sizeof(int)), "cudaMalloc");
    check(cudaMemset(slot->info, 0, sizeof(int)), "cudaMemset");
  }
  if (slot->tile != b) {
    int size = 0;
    check(cusolverDnDpotrf_bufferSize(slot->solver, CUBLAS_FILL_MODE_LOWER, b, nullptr, b, &size),
          "cusolverDnDpotrf_bufferSize");
    if (slot->workspace != nullptr) cudaFree(slot->workspace);
    check(cudaMalloc(&slot->workspace, sizeof(double) * static_cast<std::size_t>(size)), "cudaMalloc");
    slot->workspace_size = size;
    slot->tile = b;
  }
  return *slot;
}

constexpr double one = 1.0, minus_one = -1.0;

}  // namespace

void potrf(double* a, int b, int device, void* stream) {
  DeviceState& s = state(device, b);
  check(cusolverDnSetStream(s.solver, static_cast<cudaStream_t>(stream)), "cusolverDnSetStream");
  check(cusolverDnDpotrf(s.solver, CUBLAS_FILL_MODE_LOWER, b, a, b, s.workspace, s.workspace_size, s.info),
        "cusolverDnDpotrf");
}

void trsm(double* a, const double* l, int b, int device, void* stream) {
  DeviceState& s = state(device, b);
  check(cublasSetStream(s.blas, static_cast<cudaStream_t>(stream)), "cublasSetStream");
  check(cublasDtrsm(s.blas, CUBLAS_SIDE_RIGHT, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_T, CUBLAS_DIAG_NON_UNIT, b,
                    b, &one, l, b, a, b),
        "cublasDtrsm");
}

void syrk(double* a, const double* l, int b, int device, void* stream) {
  DeviceState& s = state(device, b);
  check(cublasSetStream(s.blas, static_cast<cudaStream_t>(stream)), "cublasSetStream");
  check(cublasDsyrk(s.blas, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, b, b, &minus_one, l, b, &one, a, b),
        "cublasDsyrk");
}

void gemm_nt(double* a, const double* x, const double* y, int b, int device, void* stream) {
  DeviceState& s = state(device, b);
  check(cublasSetStream(s.blas, static_cast<cudaStream_t>(stream)), "cublasSetStream");
  check(cublasDgemm(s.blas, CUBLAS_OP_N, CUBLAS_OP_T, b, b, b, &minus_one, x, b, y, b, &one, a, b),
        "cublasDgemm");
}

int failures() {
  std::lock_guard lock(states_mutex);
  int failed = 0;
  for (auto& [device, s] : states()) {
    int info = 0;
    check(cudaSetDevice(device), "cudaSetDevice");
    check(cudaMemcpy(&info, s->info, sizeof(int), cudaMemcpyDeviceToHost), "cudaMemcpy");
    failed += info != 0 ? 1 : 0;
  }
  return failed;
}

void release() {
  std::lock_guard lock(states_mutex);
  for (auto& [device, s] : states()) {
    cudaSetDevice(device);
    cublasDestroy(s->blas);
    cusolverDnDestroy(s->solver);
    cudaFree(s->workspace);
    cudaFree(s->info);
  }
  states().clear();
}

double potrf_alone(const double* host, std::size_t n, double* with_transfers) {
  using Clock = std::chrono::steady_clock;
  check(cudaSetDevice(0), "cudaSetDevice");
  cusolverDnHandle_t solver = nullptr;
  check(cusolverDnCreate(&solver), "cusolverDnCreate");
  double* a = nullptr;
  int* info = nullptr;
  check(cudaMalloc(&a, sizeof(double) * n * n), "cudaMalloc");
  check(cudaMalloc(&info, sizeof(int)), "cudaMalloc");
  int size = 0;
  const int order = static_cast<int>(n);
  check(cusolverDnDpotrf_bufferSize(solver, CUBLAS_FILL_MODE_LOWER, order, a, order, &size), "bufferSize");
  double* workspace = nullptr;
  check(cudaMalloc(&workspace, sizeof(double) * static_cast<std::size_t>(size)), "cudaMalloc");
  double best = 1e300, best_total = 1e300;
  for (int run = 0; run < 3; ++run) {  // the first run warms cuSOLVER up
    const auto start = Clock::now();
    check(cudaMemcpy(a, host, sizeof(double) * n * n, cudaMemcpyHostToDevice), "cudaMemcpy");
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    const auto uploaded = Clock::now();
    check(cusolverDnDpotrf(solver, CUBLAS_FILL_MODE_LOWER, order, a, order, workspace, size, info), "potrf");
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    const auto done = Clock::now();
    if (run == 0) continue;
    best = std::min(best, std::chrono::duration<double>(done - uploaded).count());
    best_total = std::min(best_total, std::chrono::duration<double>(done - start).count());
  }
  cudaFree(workspace);
  cudaFree(info);
  cudaFree(a);
  cusolverDnDestroy(solver);
  *with_transfers = best_total;
  return best;
}

int device_count(const char** why) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    *why = cudaGetErrorString(status);
    return 0;
  }
  if (count == 0) *why = "the CUDA runtime reports no device";
  return count;
}

}  // namespace example::gpu
