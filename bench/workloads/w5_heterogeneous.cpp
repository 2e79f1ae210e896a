// w5_heterogeneous.cpp — W5's device case: C = A + B over N floats in chunks, the chunks spread over
// the CPU workers and the OpenCL device of one context, against the same kernel tasks on the CPU
// workers alone and a STREAM-style add loop (OpenMP when built in, else one thread), in the same run.
// run_w5_vector_add() (w5_vector_add.cpp, the host case against OpenMP and STREAM) appends these
// measurements when a device is there.
//
// One Kernel with both implementations (a CPU body and OpenCL C); each chunk's task names its device:
// every `stride`-th chunk goes to the OpenCL device, the rest to the CPU workers, so both kinds of
// device run tasks of the same graph and the memory layer moves the device's chunks (A and B in, C
// out when the host reads it). A, B and C start on the host every sample. Figures: GB/s at 12 bytes
// per element (WORKLOADS.md), and the percentage of the STREAM add. Sizes, inputs (non-zero), the
// STREAM measurement (best of 10 runs in a warm team per sample, the % of the median sample) and the baseline
// arrays' page treatment are the host case's (device_workload.hpp); every element of every
// variant's result is checked after every sample, C poisoned before each.
#include <algorithm>
#include <cstdint>
#include <span>

#include "nerve/nerve.hpp"
#include "nerve/opencl.hpp"

#include "device_workload.hpp"
#include "measure.hpp"
#include "naive_threads.hpp"
#include "runtimes.hpp"
#include "workload.hpp"

namespace nerve::bench {
namespace {

constexpr const char* add_source = R"(
  __kernel void add(__global const float* a, __global const float* b, __global float* c) {
    const size_t i = get_global_id(0);
    c[i] = a[i] + b[i];
  })";
const char* const case_name = "vector add, CPU workers + OpenCL device";

class VectorAdd {
 public:
  VectorAdd(nerve::Context& context, std::size_t n, std::size_t chunk)
      : context_(context),
        n_(n),
        chunk_(chunk),
        kernel_("add"),
        a_(context, n),
        b_(context, n),
        c_(context, n) {
    kernel_.cpu([](const nerve::KernelArgs& args) {
      const auto a = args.span<const float>(0);
      const auto b = args.span<const float>(1);
      const auto c = args.span<float>(2);
      for (std::size_t i = 0; i < c.size(); ++i) c[i] = a[i] + b[i];
    });
    nerve::opencl::attach(kernel_, add_source, "add");
  }

  // prepare(): inputs valid on the host only (device replicas are stale), C poisoned: written by
  // CPU tasks, one per chunk, so that the pages are first touched in parallel as the baselines' are.
  void prepare() {
    for (std::size_t first = 0; first < n_; first += chunk_)
      spawn_w5_inputs(context_, a_.slice(first, chunk_), b_.slice(first, chunk_), c_.slice(first, chunk_),
                      first);
    context_.wait_all();
  }

  // run(): every `stride`-th chunk on device 1, the others on the CPU workers (stride 0: CPU only).
  // inject_fault: the result read back is corrupted in one element (tests of the check only).
  Trial run(std::size_t stride, bool inject_fault) {
    Stopwatch watch;
    for (std::size_t first = 0, index = 0; first < n_; first += chunk_, ++index) {
      nerve::TaskOptions placement;
      placement.device = stride != 0 && index % stride == 0 ? 1 : 0;
      context_.spawn(placement, kernel_, nerve::read(a_.slice(first, chunk_)),
                     nerve::read(b_.slice(first, chunk_)), nerve::write(c_.slice(first, chunk_)));
    }
    context_.wait_all();
    const auto c = c_.map_read_write();  // the device's chunks come back: part of the work
    const double ns = watch.elapsed_ns();
    if (inject_fault) c[n_ / 2] += 1.0f;
    return {w5_gbps(n_, ns), w5_first_wrong(c.data(), c.size())};
  }

 private:
  nerve::Context& context_;
  std::size_t n_, chunk_;
  nerve::Kernel kernel_;
  nerve::Buffer<float> a_, b_, c_;
};

}  // namespace

WorkloadResult run_w5_heterogeneous(const WorkloadOptions& options) {
  // The host case's sizes (w5_vector_add.cpp), so that the two cases' figures compare.
  const std::size_t n = std::size_t{1} << (options.quick ? 22 : 26);
  const std::size_t chunk = std::size_t{1} << (options.quick ? 18 : 20);
  WorkloadResult result{
      "W5", "vector add", "N = " + format_count(n) + " floats in chunks of " + format_count(chunk), {}, {}};
  std::string why;
  auto context = open_device_context(options, why);
  if (!context) return result;  // no device: no measurements
  result.size += ", 1 chunk in 2 on '" + context->devices()[1].name + "'";
  const bool heterogeneous = context->devices().size() > 1;
  VectorAdd add(*context, n, chunk);
  add.prepare();  // nerve's host copies exist from here: their pages decide the baselines'
  const W5Arrays stream(n, options.threads, huge_pages_like_nerve(*context));
  const std::string size_rule = stream_size_rule(*context, n * sizeof(float));
  std::vector<Variant> variants;
  if (heterogeneous) {
    variants.push_back({case_name,
                        "nerve",
                        "nerve CPU + OpenCL",
                        "GB/s",
                        false,
                        n / chunk,
                        [&] { add.prepare(); },
                        [&] { return add.run(2, options.inject_fault); },
                        {}});
  }
  variants.push_back({case_name,
                      "nerve",
                      "nerve CPU workers, kernel tasks",
                      "GB/s",
                      false,
                      n / chunk,
                      [&] { add.prepare(); },
                      [&] { return add.run(0, options.inject_fault); },
                      {}});
  variants.push_back({case_name,
                      "STREAM",
                      "STREAM add (device case)",
                      "GB/s",
                      false,
                      0,
                      [&] { stream.poison_c(); },
                      [&] { return stream.stream_add(); },
                      {}});
  result.measurements = measure_interleaved(variants, options);
  note_share_of_stream(result.measurements, "STREAM add (device case)", "STREAM add", size_rule);
  return result;
}

}  // namespace nerve::bench
