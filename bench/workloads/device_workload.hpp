// device_workload.hpp — what the device workloads (W5 heterogeneous, W12 streaming) share: a nerve
// context with the OpenCL devices, and the answer when there are none; the device's own copy rate
// (W12's reference); and what W5's two cases (host, w5_vector_add.cpp; CPU + OpenCL,
// w5_heterogeneous.cpp) share: their inputs, the baselines' arrays and the STREAM add reference.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "nerve/nerve.hpp"

#include "measure.hpp"
#include "workload.hpp"

namespace nerve::bench {

// open_device_context(): a context with the options' settings and gpu.devices = opencl (unless the
// settings choose devices themselves); nullptr when no OpenCL device is there (`why` says so).
std::unique_ptr<nerve::Context> open_device_context(const WorkloadOptions& options, std::string& why);

// CopyRate is what moving `bytes` between host memory and a device gives at best.
struct CopyRate {
  double to_device_gbps = 0;    // host → device
  double from_device_gbps = 0;  // device → host
  // How it was measured, for notes: "clEnqueueWriteBuffer/ReadBuffer of 4 MiB on 'dev', best of 5".
  std::string how;
  // false: the device is not one this build can copy to directly (not OpenCL), and both rates are
  // the host's memcpy bandwidth instead — `how` says so.
  bool device = false;
  // ceiling(): the slower direction. A stream that sends every byte in and out again cannot go
  // faster, even when its copies in and out overlap on separate copy engines.
  double ceiling() const { return to_device_gbps < from_device_gbps ? to_device_gbps : from_device_gbps; }
};

// device_copy_rate(): the copy rate of `context`'s device `device` for copies of `bytes`: blocking
// clEnqueueWriteBuffer / clEnqueueReadBuffer on the OpenCL context nerve uses for that device, from
// and to pageable host memory (what nerve's buffers are) and from and to pinned memory (what its
// staging uses), best of each. For a device that is not OpenCL, the host's memcpy bandwidth.
CopyRate device_copy_rate(nerve::Context& context, int device, std::size_t bytes);

// W5's inputs: patterned, never zero, and every a + b exact in float (a <= 4096, b <= 2046.5).
inline float w5_input_a(std::size_t i) { return static_cast<float>(i % 4096) + 1.0f; }
inline float w5_input_b(std::size_t i) { return static_cast<float>(2 * (i % 1024)) + 0.5f; }
// w5_first_wrong() is "" when every c[i] is w5_input_a(i) + w5_input_b(i), else the first wrong one.
std::string w5_first_wrong(const float* c, std::size_t n);
// C before each sample: no a + b gives it, so an element no run writes fails the check.
inline constexpr float w5_poison = -1.0f;
// w5_gbps(): W5's figure, 12 bytes moved per element (a and b read, c written).
inline double w5_gbps(std::size_t n, double ns) { return 12.0 * static_cast<double>(n) / ns; }

// spawn_w5_inputs(): one CPU task that writes W5's inputs for elements [first, first + a.size()) into
// the slices `a` and `b` and poisons the slice `c`. nerve's buffers are filled chunk by chunk by such
// tasks over the workers, so that their pages are first touched in parallel as the baselines' are.
void spawn_w5_inputs(nerve::Context& context, const nerve::Buffer<float>& a, const nerve::Buffer<float>& b,
                     const nerve::Buffer<float>& c, std::size_t first);

// HostArrays: `count` float arrays of n elements for the baselines (OpenMP, oneTBB, naive, STREAM),
// given the page treatment nerve's buffers get, so that a % of STREAM measures the runtime and not
// the page size: with `huge_pages` the region is advised MADV_HUGEPAGE before its first touch, as the
// host pool does for blocks of 4 MiB and more (memory.huge_pages); the arrays' starts are staggered
// by a different number of pages each, as the pool's colouring staggers buffers, so that a[i], b[i]
// and c[i] do not fall in the same cache sets. The caller first-touches them (in parallel).
class HostArrays {
 public:
  HostArrays(std::size_t count, std::size_t n, bool huge_pages);
  ~HostArrays();
  HostArrays(const HostArrays&) = delete;
  HostArrays& operator=(const HostArrays&) = delete;
  float* operator[](std::size_t k) const { return arrays_[k]; }
  // huge_pages(): the kernel accepted the advice.
  bool huge_pages() const noexcept { return huge_; }

 private:
  void* region_ = nullptr;
  std::size_t region_bytes_ = 0;
  bool huge_ = false;
  std::vector<float*> arrays_;
};

// W5Arrays: the baselines' and STREAM's A, B and C of n floats: HostArrays' page treatment, first
// touched in parallel by `threads` threads (a static split) with W5's inputs, C poisoned.
class W5Arrays {
 public:
  W5Arrays(std::size_t n, unsigned threads, bool huge_pages);
  float* a() const { return memory_[0]; }
  float* b() const { return memory_[1]; }
  float* c() const { return memory_[2]; }
  void poison_c() const;
  // add(): c = a + b over [begin, end), the work every baseline splits its own way.
  void add(std::size_t begin, std::size_t end) const;
  // trial(): the figure of a run of `ns` over all n elements, checked.
  Trial trial(double ns) const { return {w5_gbps(n_, ns), w5_first_wrong(c(), n_)}; }
  // stream_add(): one STREAM sample: the best of stream_times runs (stream_add_best_ns()).
  Trial stream_add() const;

 private:
  std::size_t n_;
  unsigned threads_;
  HostArrays memory_;
};

// huge_pages_like_nerve(): whether nerve's host pools gave any block huge pages (the W5 buffers are
// made before this is asked), i.e. what HostArrays should do to match them.
bool huge_pages_like_nerve(const nerve::Context& context);

// stream_add_best_ns(): McCalpin's STREAM "Add" kernel c[j] = a[j] + b[j] over n floats, run `times`
// times in one parallel region (OpenMP schedule(static), as stream.c; T std::threads without
// OpenMP). Each run's clock starts after a barrier of the whole team and stops after the loop's
// closing barrier, so no run pays for waking threads; returns the best (shortest) run in ns, the
// figure stream.c reports.
double stream_add_best_ns(const float* a, const float* b, float* c, std::size_t n, unsigned threads,
                          int times);

// stream_times: stream.c's NTIMES, the runs a STREAM sample is the best of.
inline constexpr int stream_times = 10;

// stream_size_rule(): "" when arrays of `bytes` each meet STREAM's rule (every array at least 4 ×
// the largest cache, so that none of it is served from a cache), else a note saying they do not.
std::string stream_size_rule(const nerve::Context& context, std::size_t bytes);

// note_share_of_stream(): every verified measurement but the STREAM one (variant `reference`) gets
// "N% of <label>" in its note, N against the STREAM median: each STREAM sample is already the best
// of stream_times runs (stream.c's figure), and the median of those samples is compared with the
// other variants' medians — the best sample alone, an extreme of extremes, swung with the machine's
// neighbours (58 against a 36 GB/s median in one quiet run). The STREAM note gives both. `size_rule` (from
// stream_size_rule()) is added to the STREAM measurement's note. Nothing when STREAM did not run.
void note_share_of_stream(std::vector<Measurement>& measurements, const std::string& reference,
                          const std::string& label, const std::string& size_rule);

}  // namespace nerve::bench
