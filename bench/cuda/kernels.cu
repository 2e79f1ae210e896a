// kernels.cu — the GPU benchmark's kernels (nerve-bench-cuda): vector add (W5, 16-byte accesses where
// the arrays allow), a streaming transform (W12) and an empty kernel (completion latency).
#include <cstdint>

#include <cuda_runtime.h>

#include "kernels.hpp"

namespace bench_cuda {
namespace {

__global__ void vector_add(const float* a, const float* b, float* c, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x)
    c[i] = a[i] + b[i];
}

// 16-byte loads and stores: a quarter of the memory instructions of the scalar loop, which on an
// H200 left the add at 81 % of the copy bandwidth.
__global__ void vector_add4(const float4* a, const float4* b, float4* c, std::size_t n4) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n4;
       i += std::size_t{gridDim.x} * blockDim.x) {
    const float4 x = a[i], y = b[i];
    c[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
  }
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

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
  if (n == 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  if (aligned16(a) && aligned16(b) && aligned16(c)) {
    const std::size_t n4 = n / 4, done = n4 * 4;
    if (n4 != 0)
      vector_add4<<<grid_for(n4), 256, 0, s>>>(reinterpret_cast<const float4*>(a),
                                               reinterpret_cast<const float4*>(b),
                                               reinterpret_cast<float4*>(c), n4);
    if (done != n) vector_add<<<1, 32, 0, s>>>(a + done, b + done, c + done, n - done);
    return;
  }
  vector_add<<<grid_for(n), 256, 0, s>>>(a, b, c, n);
}

void launch_transform(const float* x, float* y, std::size_t n, void* stream) {
  if (n != 0) transform<<<grid_for(n), 256, 0, static_cast<cudaStream_t>(stream)>>>(x, y, n);
}

void launch_empty(void* stream) { empty<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(); }

}  // namespace bench_cuda
