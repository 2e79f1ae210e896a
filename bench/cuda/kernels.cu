// kernels.cu — the GPU benchmark's kernels (nerve-bench-cuda): vector add (W5), a streaming
// transform (W12) and an empty kernel (completion latency).
#include <cuda_runtime.h>

#include "kernels.hpp"

namespace bench_cuda {
namespace {

__global__ void vector_add(const float* a, const float* b, float* c, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x)
    c[i] = a[i] + b[i];
}

__global__ void transform(const float* x, float* y, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x)
    y[i] = 2.0f * x[i] + 1.0f;
}

__global__ void empty() {}

unsigned grid_for(std::size_t n) {
  const std::size_t blocks = (n + 255) / 256;
  return static_cast<unsigned>(blocks < 65535 * 16 ? blocks : 65535 * 16);
}

}  // namespace

void launch_vector_add(const float* a, const float* b, float* c, std::size_t n, void* stream) {
  if (n != 0) vector_add<<<grid_for(n), 256, 0, static_cast<cudaStream_t>(stream)>>>(a, b, c, n);
}

void launch_transform(const float* x, float* y, std::size_t n, void* stream) {
  if (n != 0) transform<<<grid_for(n), 256, 0, static_cast<cudaStream_t>(stream)>>>(x, y, n);
}

void launch_empty(void* stream) { empty<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(); }

}  // namespace bench_cuda
