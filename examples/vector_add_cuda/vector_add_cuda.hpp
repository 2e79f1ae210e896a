// vector_add_cuda.hpp — the two variants main.cpp compares.
#pragma once

#include <cstddef>

#include "nerve/nerve.hpp"

namespace example {

// run_naive_cuda(): c = a + b on `gpus` GPUs, the seed's way (host arrays in, host array out).
void run_naive_cuda(std::size_t n, int gpus, const float* a, const float* b, float* c);

// run_nerve_style(): c = a + b as nerve tasks of `chunk` elements over buffer slices; nerve places them
// on the context's devices (every CUDA device, and the CPU workers with `with_cpu`) and moves the data.
void run_nerve_style(nerve::Context& context, nerve::Buffer<float>& a, nerve::Buffer<float>& b,
                     nerve::Buffer<float>& c, std::size_t chunk, bool with_cpu);

}  // namespace example
