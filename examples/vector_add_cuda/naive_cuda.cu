// naive_cuda.cu — the seed's run_naive_cuda (seeds/000 §4.2), completed: the copies it leaves out,
// the clean-up, error checks. The static split of the seed: n / gpus elements per GPU, one stream each,
// cudaSetDevice before every call, pageable host memory, synchronise every stream at the end.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <cuda_runtime.h>

#include "kernels.hpp"
#include "vector_add_cuda.hpp"

namespace example {
namespace {

void check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  std::fprintf(stderr, "naive_cuda: %s: %s\n", what, cudaGetErrorString(status));
  std::exit(1);
}

}  // namespace

void run_naive_cuda(std::size_t n, int gpus, const float* a, const float* b, float* c) {
  std::vector<float*> d_a(gpus), d_b(gpus), d_c(gpus);
  std::vector<cudaStream_t> streams(gpus);
  const std::size_t chunk = (n + gpus - 1) / gpus;
  for (int dev = 0; dev < gpus; ++dev) {
    const std::size_t offset = dev * chunk,
                      count = offset < n ? (n - offset < chunk ? n - offset : chunk) : 0;
    check(cudaSetDevice(dev), "cudaSetDevice");
    check(cudaMalloc(&d_a[dev], count * sizeof(float) + 1), "cudaMalloc");
    check(cudaMalloc(&d_b[dev], count * sizeof(float) + 1), "cudaMalloc");
    check(cudaMalloc(&d_c[dev], count * sizeof(float) + 1), "cudaMalloc");
    check(cudaStreamCreate(&streams[dev]), "cudaStreamCreate");
    check(cudaMemcpyAsync(d_a[dev], a + offset, count * sizeof(float), cudaMemcpyHostToDevice, streams[dev]),
          "cudaMemcpyAsync");
    check(cudaMemcpyAsync(d_b[dev], b + offset, count * sizeof(float), cudaMemcpyHostToDevice, streams[dev]),
          "cudaMemcpyAsync");
    launch_vector_add(d_a[dev], d_b[dev], d_c[dev], count, streams[dev]);
    check(cudaGetLastError(), "vector_add launch");
    check(cudaMemcpyAsync(c + offset, d_c[dev], count * sizeof(float), cudaMemcpyDeviceToHost, streams[dev]),
          "cudaMemcpyAsync");
  }
  for (int dev = 0; dev < gpus; ++dev) {
    check(cudaSetDevice(dev), "cudaSetDevice");
    check(cudaStreamSynchronize(streams[dev]), "cudaStreamSynchronize");
    cudaFree(d_a[dev]);
    cudaFree(d_b[dev]);
    cudaFree(d_c[dev]);
    cudaStreamDestroy(streams[dev]);
  }
}

}  // namespace example
