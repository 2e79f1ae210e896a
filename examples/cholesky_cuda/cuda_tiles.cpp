#include "cuda_tiles.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

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

// One stream's handles: cuBLAS bound to the stream with a workspace of its own (cublasSetStream
// would reset it to the shared default pool; concurrent kernels on other streams must not share
// it), cuSOLVER bound to the stream with its potrf workspace. Used only by the launcher thread of
// the stream's device (nerve calls one device's launchers from one thread).
struct StreamState {
  cublasHandle_t blas = nullptr;
  void* blas_workspace = nullptr;
  cusolverDnHandle_t solver = nullptr;
  double* workspace = nullptr;
  int workspace_size = 0;
  int tile = 0;
};

// One device: the handles prepare() made (they keep the libraries loaded), potrf's info slots, and
// the streams seen so far.
struct DeviceState {
  cublasHandle_t blas = nullptr;
  cusolverDnHandle_t solver = nullptr;
  int* info = nullptr;  // `capacity` slots, one per potrf call (round robin beyond that)
  int capacity = 0;
  unsigned long next_info = 0;
  std::map<void*, std::unique_ptr<StreamState>> streams;
};

constexpr std::size_t blas_workspace_bytes = std::size_t{32} << 20;  // cuBLAS' advice for Hopper
constexpr int default_info_slots = 4096;

std::mutex states_mutex;
std::map<int, std::unique_ptr<DeviceState>>& states() {
  static std::map<int, std::unique_ptr<DeviceState>> all;
  return all;
}

// Under states_mutex, with `device` current.
DeviceState& device_state(int device, int potrf_calls) {
  auto& slot = states()[device];
  if (!slot) {
    slot = std::make_unique<DeviceState>();
    check(cublasCreate(&slot->blas), "cublasCreate");
    check(cusolverDnCreate(&slot->solver), "cusolverDnCreate");
    slot->capacity = potrf_calls > 0 ? potrf_calls : default_info_slots;
    check(cudaMalloc(&slot->info, sizeof(int) * static_cast<std::size_t>(slot->capacity)), "cudaMalloc");
    check(cudaMemset(slot->info, 0, sizeof(int) * static_cast<std::size_t>(slot->capacity)), "cudaMemset");
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
  return *slot;
}

// The launcher's view: the device's state and the stream's handles (made on the stream's first
// launch — the warm-up's, when the program warms up).
struct Launch {
  DeviceState& device;
  StreamState& stream;
};

Launch state(int device, int b, void* stream) {
  std::lock_guard lock(states_mutex);
  DeviceState& d = device_state(device, 0);
  auto& slot = d.streams[stream];
  const auto s = static_cast<cudaStream_t>(stream);
  if (!slot) {
    slot = std::make_unique<StreamState>();
    check(cublasCreate(&slot->blas), "cublasCreate");
    check(cublasSetStream(slot->blas, s), "cublasSetStream");
    check(cudaMalloc(&slot->blas_workspace, blas_workspace_bytes), "cudaMalloc");
    check(cublasSetWorkspace(slot->blas, slot->blas_workspace, blas_workspace_bytes), "cublasSetWorkspace");
    check(cusolverDnCreate(&slot->solver), "cusolverDnCreate");
    check(cusolverDnSetStream(slot->solver, s), "cusolverDnSetStream");
  }
  if (slot->tile != b) {
    int size = 0;
    check(cusolverDnDpotrf_bufferSize(slot->solver, CUBLAS_FILL_MODE_LOWER, b, nullptr, b, &size),
          "cusolverDnDpotrf_bufferSize");
    // Only on a tile size change (never within a run): earlier work on this stream may still use the
    // old workspace, so it is freed stream-ordered.
    if (slot->workspace != nullptr) check(cudaFreeAsync(slot->workspace, s), "cudaFreeAsync");
    check(cudaMallocAsync(reinterpret_cast<void**>(&slot->workspace),
                          sizeof(double) * static_cast<std::size_t>(std::max(size, 1)), s),
          "cudaMallocAsync");
    slot->workspace_size = size;
    slot->tile = b;
  }
  return Launch{d, *slot};
}

constexpr double one = 1.0, minus_one = -1.0;

}  // namespace

void prepare(int device, int potrf_calls) {
  check(cudaSetDevice(device), "cudaSetDevice");
  std::lock_guard lock(states_mutex);
  device_state(device, potrf_calls);
}

void potrf(double* a, int b, int device, void* stream) {
  const Launch l = state(device, b, stream);
  int* info = l.device.info + (l.device.next_info++ % static_cast<unsigned long>(l.device.capacity));
  check(cusolverDnDpotrf(l.stream.solver, CUBLAS_FILL_MODE_LOWER, b, a, b, l.stream.workspace,
                         l.stream.workspace_size, info),
        "cusolverDnDpotrf");
}

void trsm(double* a, const double* l, int b, int device, void* stream) {
  const Launch s = state(device, b, stream);
  check(cublasDtrsm(s.stream.blas, CUBLAS_SIDE_RIGHT, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_T,
                    CUBLAS_DIAG_NON_UNIT, b, b, &one, l, b, a, b),
        "cublasDtrsm");
}

void syrk(double* a, const double* l, int b, int device, void* stream) {
  const Launch s = state(device, b, stream);
  check(cublasDsyrk(s.stream.blas, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, b, b, &minus_one, l, b, &one, a, b),
        "cublasDsyrk");
}

void gemm_nt(double* a, const double* x, const double* y, int b, int device, void* stream) {
  const Launch s = state(device, b, stream);
  check(cublasDgemm(s.stream.blas, CUBLAS_OP_N, CUBLAS_OP_T, b, b, b, &minus_one, x, b, y, b, &one, a, b),
        "cublasDgemm");
}

int failures() {
  std::lock_guard lock(states_mutex);
  int failed = 0;
  for (auto& [device, s] : states()) {
    std::vector<int> info(static_cast<std::size_t>(s->capacity));
    check(cudaSetDevice(device), "cudaSetDevice");
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    check(cudaMemcpy(info.data(), s->info, sizeof(int) * info.size(), cudaMemcpyDeviceToHost), "cudaMemcpy");
    for (int each : info) failed += each != 0 ? 1 : 0;
  }
  return failed;
}

void release() {
  std::lock_guard lock(states_mutex);
  for (auto& [device, s] : states()) {
    cudaSetDevice(device);
    cudaDeviceSynchronize();
    for (auto& [stream, t] : s->streams) {
      cublasDestroy(t->blas);
      cusolverDnDestroy(t->solver);
      cudaFree(t->blas_workspace);
      cudaFree(t->workspace);
    }
    cublasDestroy(s->blas);
    cusolverDnDestroy(s->solver);
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
