// w12_streaming.cpp — W12: stream data through an OpenCL device, host → device → kernel → host, in
// chunks; pipelined against serial, in the same run.
//
// Each chunk is produced by a CPU task (it writes the chunk into a host buffer), transformed by an
// OpenCL kernel (x = 2x + 1: the runtime copies the chunk in, runs the kernel, and leaves the result
// valid on the device only), and consumed by a CPU task that reads it (the runtime copies it back) and
// checks it. Chunks cycle through a ring of `ring` buffers, so device memory stays small however much
// is streamed.
//   serial     one chunk at a time: the next chunk starts when the previous one was consumed;
//              copies, kernel and host work never overlap.
//   pipelined  every chunk submitted at once; the ring's buffer dependencies alone order them, so
//              chunk i+1 is copied in while chunk i's kernel runs and chunk i−1 is copied out.
// Figures: GB/s of chunk data streamed (each byte counted once), and the serial/pipelined ratio. The
// note's % is of the device's own copy rate, measured in the same run on the same device before and
// after the variants (device_copy_rate(): blocking clEnqueueWriteBuffer / clEnqueueReadBuffer of one
// chunk on the cl_context nerve uses, the best of pageable and pinned host memory): of the slower
// direction, which bounds a stream that sends every byte in and out, however well its copies overlap.
// A device that is not OpenCL (gpu.devices chosen by the run) falls back to the host's memcpy
// bandwidth, and the note says so. Produced data is non-zero; the consumer reads every element of
// every chunk into a position-mixed checksum, compared with the chunk's expected one (computed
// before timing).
#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdint>
#include <span>
#include <vector>

#include <fmt/format.h>

#include "nerve/nerve.hpp"
#include "nerve/opencl.hpp"

#include "device_workload.hpp"
#include "measure.hpp"
#include "workload.hpp"

namespace nerve::bench {
namespace {

constexpr const char* transform_source = R"(
  __kernel void transform(__global float* x) {
    const size_t i = get_global_id(0);
    x[i] = 2.0f * x[i] + 1.0f;
  })";
const char* const case_name = "stream through the device";

struct Stream {
  std::size_t chunk_floats;
  std::size_t chunks;
  std::size_t ring;
};

// Never zero (a zero stays zero under a lost copy that leaves 0 behind); 2x + 1 is exact in float.
// A mask, not a modulo: the producer runs inside the timed region, and a mask vectorizes.
float produced(std::size_t chunk, std::size_t i) { return static_cast<float>(((chunk + i) & 1023u) + 1u); }

// checksum(): every element's bits, each mixed with its index so that a value in the wrong place
// counts too. The consumer's pass over every element, at about the speed of reading them (integer
// operations that vectorize): a check per element against its expected value took ~40 % of the
// serial variant's time here, CPU work in the timed region that the pipelined variant overlaps with
// copies, which flattered the ratio (1.81 against 1.53 with a sparse check).
std::uint64_t checksum(std::span<const float> x) {
  std::uint64_t sum = 0;
  for (std::size_t i = 0; i < x.size(); ++i)
    sum += std::bit_cast<std::uint32_t>(x[i]) ^ static_cast<std::uint32_t>(i);
  return sum;
}

class Streamer {
 public:
  Streamer(nerve::Context& context, const Stream& stream)
      : context_(context), stream_(stream), kernel_("transform") {
    nerve::opencl::attach(kernel_, transform_source, "transform");
    for (std::size_t i = 0; i < stream.ring; ++i) ring_.emplace_back(context, stream.chunk_floats);
    on_device_.device = 1;
    // Each chunk's expected checksum, computed once, before any timing.
    std::vector<float> expected(stream.chunk_floats);
    for (std::size_t chunk = 0; chunk < stream.chunks; ++chunk) {
      for (std::size_t i = 0; i < expected.size(); ++i) expected[i] = 2.0f * produced(chunk, i) + 1.0f;
      expected_.push_back(checksum(expected));
    }
  }

  // inject_fault: one element of the first chunk is read back wrong (tests of the check only).
  Trial run(bool pipelined, bool inject_fault) {
    wrong_.store(0, std::memory_order_relaxed);
    Stopwatch watch;
    for (std::size_t chunk = 0; chunk < stream_.chunks; ++chunk) {
      const nerve::Buffer<float>& slot = ring_[chunk % ring_.size()];
      context_.spawn(
          [chunk](std::span<float> x) {
            for (std::size_t i = 0; i < x.size(); ++i) x[i] = produced(chunk, i);
          },
          nerve::write(slot));
      context_.spawn(on_device_, kernel_, nerve::read_write(slot));
      nerve::Task consumed = context_.submit(
          [this, chunk, inject_fault](std::span<const float> x) {
            std::uint64_t sum = checksum(x);
            if (inject_fault && chunk == 0 && !x.empty()) {  // element 0 read back wrong
              sum -= std::bit_cast<std::uint32_t>(x[0]);
              sum += std::bit_cast<std::uint32_t>(x[0] + 1.0f);
            }
            if (sum != expected_[chunk]) wrong_.fetch_add(1, std::memory_order_relaxed);
          },
          nerve::read(slot));
      if (!pipelined) consumed.wait();
    }
    context_.wait_all();
    const double seconds = watch.elapsed_ns() / 1e9;
    const double bytes = static_cast<double>(stream_.chunks * stream_.chunk_floats * sizeof(float));
    return {bytes / seconds / 1e9,
            expect_equal("chunks with a wrong checksum", wrong_.load(), std::uint64_t{0})};
  }

 private:
  nerve::Context& context_;
  Stream stream_;
  nerve::Kernel kernel_;
  nerve::TaskOptions on_device_;
  std::vector<nerve::Buffer<float>> ring_;
  std::vector<std::uint64_t> expected_;  // per chunk
  std::atomic<std::uint64_t> wrong_{0};
};

}  // namespace

WorkloadResult run_w12_streaming(const WorkloadOptions& options) {
  // Full: 4 GiB in 16 MiB chunks (WORKLOADS.md); quick: 256 MiB in 4 MiB chunks.
  const Stream stream =
      options.quick ? Stream{std::size_t{1} << 20, 64, 4} : Stream{std::size_t{1} << 22, 256, 4};
  const std::size_t chunk_bytes = stream.chunk_floats * sizeof(float);
  WorkloadResult result{"W12",
                        "transfer overlap",
                        format_count(stream.chunks * chunk_bytes >> 20) + " MiB in " +
                            format_count(chunk_bytes >> 20) + " MiB chunks, ring of " +
                            std::to_string(stream.ring),
                        {},
                        {}};
  std::string why;
  auto context = open_device_context(options, why);
  if (!context) {
    result.size += " (not run: " + why + ")";
    return result;
  }
  result.size += ", on '" + context->devices()[1].name + "'";
  Streamer streamer(*context, stream);
  // Best of a measurement before and after the variants: a ceiling, not a sample of the run's noise.
  CopyRate copy = device_copy_rate(*context, 1, chunk_bytes);
  const auto describe = [&copy](const Measurement& m) {
    if (!copy.device)
      return fmt::format("{:.0f}% of {:.1f} GB/s, {}", 100 * m.value / copy.ceiling(), copy.ceiling(),
                         copy.how);
    return fmt::format(
        "{:.0f}% of the device's copy rate ({:.1f} GB/s host->device, {:.1f} GB/s device->host: {})",
        100 * m.value / copy.ceiling(), copy.to_device_gbps, copy.from_device_gbps, copy.how);
  };
  std::vector<Variant> variants;
  variants.push_back({case_name,
                      "nerve",
                      "nerve pipelined",
                      "GB/s",
                      false,
                      stream.chunks * 3,
                      {},
                      [&] { return streamer.run(true, options.inject_fault); },
                      {}});
  variants.push_back({case_name,
                      "nerve",
                      "nerve serial",
                      "GB/s",
                      false,
                      stream.chunks * 3,
                      {},
                      [&] { return streamer.run(false, options.inject_fault); },
                      {}});
  result.measurements = measure_interleaved(variants, options);
  const CopyRate after = device_copy_rate(*context, 1, chunk_bytes);
  copy.to_device_gbps = std::max(copy.to_device_gbps, after.to_device_gbps);
  copy.from_device_gbps = std::max(copy.from_device_gbps, after.from_device_gbps);
  for (Measurement& m : result.measurements) {
    if (m.verified) m.note = describe(m);
  }
  result.goals.push_back({case_name, {"nerve serial"}, 1.6, ">= 1.6x serial transfer-compute-transfer"});
  return result;
}

}  // namespace nerve::bench
