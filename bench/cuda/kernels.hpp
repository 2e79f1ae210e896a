// kernels.hpp — host launchers of the GPU benchmark's kernels (kernels.cu); each enqueues on `stream`
// (a cudaStream_t) of the current device and returns.
#pragma once

#include <cstddef>

namespace bench_cuda {

void launch_vector_add(const float* a, const float* b, float* c, std::size_t n, void* stream);
void launch_transform(const float* x, float* y, std::size_t n, void* stream);  // y = 2x + 1
void launch_empty(void* stream);

}  // namespace bench_cuda
