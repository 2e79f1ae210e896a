// kernels.cu — the seed's vectorAdd kernel (seeds/000 §4.2) and its launcher.
#include <cuda_runtime.h>

#include "kernels.hpp"

namespace example {
namespace {

__global__ void vector_add(const float* a, const float* b, float* c, std::size_t n) {
  // Grid-stride: one launch covers any n with a bounded grid.
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x)
    c[i] = a[i] + b[i];
}

}  // namespace

void launch_vector_add(const float* a, const float* b, float* c, std::size_t n, void* stream) {
  if (n == 0) return;
  constexpr unsigned block = 256;
  const std::size_t blocks = (n + block - 1) / block;
  const unsigned grid = static_cast<unsigned>(blocks < 65535 * 8 ? blocks : 65535 * 8);
  vector_add<<<grid, block, 0, static_cast<cudaStream_t>(stream)>>>(a, b, c, n);
}

int cuda_device_count(const char** why) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    *why = cudaGetErrorString(status);
    return 0;
  }
  if (count == 0) *why = "the CUDA runtime reports no device";
  return count;
}

}  // namespace example
