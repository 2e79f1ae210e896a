// opencl.hpp — OpenCL implementations of nerve kernels.
//
//   constexpr const char* source = R"(
//     __kernel void axpy(__global const float* x, __global float* y, float a) {
//       const size_t i = get_global_id(0);
//       y[i] += a * x[i];
//     })";
//   nerve::Kernel axpy("axpy");
//   axpy.cpu(...);                                    // optional: CPU workers may run it too
//   nerve::opencl::attach(axpy, source, "axpy");
//   context.submit(axpy, nerve::read(x), nerve::read_write(y), nerve::value(2.0f));
//
// Arguments, in order: each access becomes a `__global T*` pointing at the access's first byte (a
// slice of a buffer is passed as a sub-buffer, clCreateSubBuffer); then each nerve::value(v) becomes
// a by-value argument of sizeof(v) bytes (match the OpenCL C type: float, int, uint, ulong, ...;
// C++ bool and size_t have no portable OpenCL C counterpart). A kernel whose parameter count differs
// from accesses + values fails with a message saying so; so does an access given for a by-value
// parameter, a value given for a pointer, and either given for a __local pointer, an image or a
// sampler (nerve passes neither) — the task fails with Error(invalid_argument) naming the parameter
// and its type. (The kinds come from the driver's argument information, which programs are built
// to keep with -cl-kernel-arg-info; a driver that keeps none leaves only the count checked.)
//
// Slices: OpenCL can only point a sub-buffer at an offset that is a multiple of the device's
// CL_DEVICE_MEM_BASE_ADDR_ALIGN (128 bytes on PoCL, 256–4096 on GPUs). A slice that starts elsewhere
// fails the task with Error(invalid_argument) naming the kernel, the access, the offset and the
// alignment, when the task is forced there (TaskOptions::device); placed by nerve, such a call runs
// elsewhere (the CPU, when the kernel has a CPU body) and fails only where no other device runs it.
// Slice at multiples of 4 KiB to be safe everywhere. A slice at offset 0 is the buffer.
//
// Work size: one-dimensional. By default the global size is the number of elements of access 0
// (its bytes / the buffer's element size); Options::global_size computes it from the call instead
// (KernelArgs: sizes and values are real; data() pointers are device addresses, not for the host).
// A global size of 0 runs nothing and succeeds. Options::local_size (0: the driver chooses) must
// divide the global size.
//
// Building: the program is built once per device and cached in memory and on disk, keyed by the
// source, the build options, the platform and device names and the driver version, in
// $NERVE_CACHE_DIR/opencl (default ~/.cache/nerve/opencl; $XDG_CACHE_HOME/nerve/opencl when set) —
// except on disk a program that reads files (an #include directive in its source, however spelled,
// or an -I, -include... option): nerve cannot tell when those change, so each process builds it
// (docs/BACKENDS.md). A program that does not build fails the kernel's calls sent to that device
// (TaskOptions::device) with Error(task_failed) whose message holds the compiler's log, and all its
// calls when no other device runs the kernel; tasks that read what such a call would have written
// are cancelled. Calls nerve placed there, even before the failure was known, run elsewhere instead
// (the CPU, when the kernel has a CPU body), and a warning naming the kernel says so, once per
// device.
//
// attach() is available in every build; without OpenCL (or with gpu.devices = none) no device runs
// the implementation, and a kernel with nothing else to run on is an error at submit.
//
// Thread safety: attach() configures a Kernel before its first submit (Kernel's own rule); after it,
// attach() throws Error(invalid_argument) and the kernel is unchanged.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "nerve/export.hpp"
#include "nerve/kernel.hpp"

namespace nerve::opencl {

struct Options {
  std::string build_options;  // passed to clBuildProgram, e.g. "-cl-fast-relaxed-math -DTILE=64"
  // The global work size; empty: the element count of access 0.
  std::function<std::size_t(const KernelArgs&)> global_size;
  std::size_t local_size = 0;  // work-group size; 0: chosen by the driver
};
using OpenclOptions = Options;

// attach(): gives `kernel` an OpenCL implementation: `entry`, a __kernel function of `source`.
// Throws Error(invalid_argument) for an empty source or entry, or a kernel already submitted.
// Returns `kernel`.
NERVE_API Kernel& attach(Kernel& kernel, std::string source, std::string entry, Options options = {});

}  // namespace nerve::opencl
