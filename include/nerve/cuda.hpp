// cuda.hpp — CUDA implementations of nerve kernels: host launchers (seeds/000 §4.3).
//
//   __global__ void axpy_kernel(const float* x, float* y, float a, std::size_t n) { ... }
//   nerve::Kernel axpy("axpy");
//   axpy.cpu(...);                                      // optional: CPU workers may run it too
//   nerve::cuda::attach(axpy, [](const nerve::KernelArgs& args, int device, void* stream) {
//     const std::size_t n = args.size_bytes(1) / sizeof(float);
//     axpy_kernel<<<(n + 255) / 256, 256, 0, static_cast<cudaStream_t>(stream)>>>(
//         static_cast<const float*>(args.data(0)), static_cast<float*>(args.data(1)),
//         args.value<float>(0), n);
//   });
//   context.submit(axpy, nerve::read(x), nerve::read_write(y), nerve::value(2.0f));
//
// A launcher runs on the device's launcher thread with the CUDA device `device` (the runtime's
// ordinal, for cudaSetDevice, already current) and enqueues its work on `stream` (a cudaStream_t), and
// must not synchronise: the runtime learns of completion by itself (a completion flag written by the
// GPU after the launch, and an event). args.data(i) are device addresses of the accesses (slices
// included: the address of the slice's first byte); values are as for CPU kernels. cuBLAS, cuSOLVER
// and other libraries work the same way: set their stream to `stream` first.
//
// A launcher that throws, or whose launch leaves a CUDA error (cudaGetLastError), fails the task with
// Error(task_failed); a kernel that fails while running fails it too.
//
// With gpu.unified_memory, buffers live in managed memory; gpu.async_prefetch prefetches each access
// to the device on `stream` before the launcher is called, and gpu.cache_hints advises the driver
// (read-only accesses: read-mostly; written ones: preferred location this device) — docs/CONFIG.md.
//
// attach() is available in every build; without the CUDA toolkit (or without a device) no device
// runs the implementation, and a kernel with nothing else to run on is Error(invalid_argument) at
// submit, whose message says why the context has no CUDA device (the CUDA backend's reason, as
// nerve-info gives it), when nerve knows.
//
// Thread safety: attach() configures a Kernel before its first submit (Kernel's own rule); after it,
// attach() throws Error(invalid_argument) and the kernel is unchanged. A launcher may be called from
// several devices' launcher threads at once.
#pragma once

#include <functional>

#include "nerve/export.hpp"
#include "nerve/kernel.hpp"

namespace nerve::cuda {

using Launcher = std::function<void(const KernelArgs& args, int device, void* stream)>;

// attach(): gives `kernel` a CUDA implementation. Throws Error(invalid_argument) for an empty
// launcher. Returns `kernel`.
NERVE_API Kernel& attach(Kernel& kernel, Launcher launcher);

}  // namespace nerve::cuda
