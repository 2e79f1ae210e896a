// kernels.hpp — the vector add kernel's host launcher (kernels.cu), callable from plain C++.
#pragma once

#include <cstddef>

namespace example {

// launch_vector_add(): c[i] = a[i] + b[i] for i < n, enqueued on `stream` (a cudaStream_t) of the
// current device; returns at once.
void launch_vector_add(const float* a, const float* b, float* c, std::size_t n, void* stream);

// cuda_device_count(): the devices the CUDA runtime sees; 0 with `why` set when none.
int cuda_device_count(const char** why);

}  // namespace example
