// nerve_style.cu — the seed's run_nerve_style (seeds/000 §4.3) with nerve's C++ API: one Kernel with a
// CUDA host launcher (the seed's vec_add_kernel_launcher) and, optionally, a CPU body; one task per
// chunk over slices of the buffers; nerve picks the device for each chunk, copies its slices there and
// back, and wait_all() waits for every device. No cudaSetDevice, no cudaMalloc, no per-GPU bookkeeping.
#include "nerve/cuda.hpp"

#include "kernels.hpp"
#include "vector_add_cuda.hpp"

namespace example {

void run_nerve_style(nerve::Context& context, nerve::Buffer<float>& a, nerve::Buffer<float>& b,
                     nerve::Buffer<float>& c, std::size_t chunk, bool with_cpu) {
  const nerve::Kernel add = [with_cpu] {
    nerve::Kernel kernel("vector_add");
    nerve::cuda::attach(kernel, [](const nerve::KernelArgs& args, int, void* stream) {
      launch_vector_add(static_cast<const float*>(args.data(0)), static_cast<const float*>(args.data(1)),
                        static_cast<float*>(args.data(2)), args.size_bytes(2) / sizeof(float), stream);
    });
    if (with_cpu) {
      kernel.cpu([](const nerve::KernelArgs& args) {
        const auto x = args.span<const float>(0), y = args.span<const float>(1);
        const auto z = args.span<float>(2);
        for (std::size_t i = 0; i < z.size(); ++i) z[i] = x[i] + y[i];
      });
    }
    return kernel;
  }();
  const std::size_t n = c.size();
  for (std::size_t start = 0; start < n; start += chunk) {
    const std::size_t count = start + chunk > n ? n - start : chunk;
    context.spawn(nerve::TaskOptions{.compute_intensive = true}, add, nerve::read(a.slice(start, count)),
                  nerve::read(b.slice(start, count)), nerve::write(c.slice(start, count)));
  }
  context.wait_all();
}

}  // namespace example
