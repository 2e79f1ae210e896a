// nerve-bench-cuda — the GPU measurements of scripts/gpu-check.sh, each next to the hardware or CUDA
// baseline it is judged against, in the same run (docs/BACKENDS.md, issue #5):
//
//   copy bandwidth    device-to-device (cudaMemcpyAsync, 1 GiB), host->device and device->host from
//                     pinned memory, and both directions at once
//   W5                vector add on one GPU over WORKLOADS.md's 2^26 floats: one raw kernel launch,
//                     and nerve tasks over slices of 2^20 (the definition's chunks), as memory traffic
//                     (12 bytes per element) against the device-to-device copy's; then, as extra
//                     cases, 2^28 floats in 4 and 16 tasks (the figures of docs/BACKENDS.md);
//                     and with cold inputs (w5cold): input buffers made anew from host vectors every
//                     run, page-locked in place and not, timed in parts (make, tasks, release)
//   W12               host -> device -> kernel -> host streaming of 4 GiB in chunks: raw serial (one
//                     stream) and a raw 4-stream pipeline from pinned memory, and nerve (each chunk
//                     updated in place on the host by a CPU task, transformed by a GPU task, read by a
//                     CPU task, at each chunk size of --w12-mib; and with the CPU task filling the whole
//                     chunk), against the copy bandwidths
//   completion        round-trip latency of an empty kernel observed by cudaStreamSynchronize,
//                     cudaEventSynchronize, and a host-mapped flag the GPU writes (cuStreamWriteValue32);
//                     and of a nerve task with NERVE_CUDA_COMPLETION = flag and = event
//   device pools      allocate/free pairs through nerve's DeviceArena and the stream-ordered pool
//
// Prints one line per measurement and, with --json PATH, writes them all. Every figure is the median
// of its timed runs, after an untimed warm-up, as in the rest of the suite — except what measures a
// first time on purpose: W5 cold (the median of 4 runs, the first included), cudaHostRegister of one
// input (one measurement) and the device pools (one timed run each). Inputs are non-zero
// patterns, and every result (raw and nerve) is checked element by element after its timed runs;
// a failed check prints "CHECK FAILED" on stderr, sets "verified": false in the JSON and makes the exit
// status 1. Without a CUDA device it prints "no CUDA device" and exits 0. --quick shrinks every size 16x (a
// smoke run); --only LIST runs some of w5,w5cold,w12,latency,pools (the copy bandwidths always: they are the
// baselines; another name is a usage error, exit 2); --w12-mib LIST sets W12's chunk sizes in MiB (default
// 16; the first is also the raw pipelines' and the fill's).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <cuda.h>
#include <cuda_runtime.h>
#include <nlohmann/json.hpp>

#include "nerve/cuda.hpp"
#include "nerve/nerve.hpp"

#include "backend/cuda/allocators.hpp"
#include "backend/cuda/backend.hpp"
#include "backend/cuda/device_pools.hpp"
#include "kernels.hpp"

namespace {

using Clock = std::chrono::steady_clock;

constexpr std::string_view measurements[] = {"w5", "w5cold", "w12", "latency", "pools"};

// split_commas(): the items of a comma-separated list ("" for an empty item).
std::vector<std::string> split_commas(std::string_view list) {
  std::vector<std::string> items;
  for (std::size_t start = 0;;) {
    const std::size_t comma = list.find(',', start);
    items.emplace_back(list.substr(start, comma == std::string_view::npos ? list.npos : comma - start));
    if (comma == std::string_view::npos) return items;
    start = comma + 1;
  }
}

struct Options {
  std::string json;
  std::size_t scale = 1;  // sizes are divided by it (--quick: 16)
  std::vector<std::string> only{std::begin(measurements), std::end(measurements)};
  std::vector<std::size_t> w12_mib{16};
  bool runs(std::string_view name) const { return std::find(only.begin(), only.end(), name) != only.end(); }
};

// parse_only(): the measurements named, or nothing when one is not a measurement's name.
std::vector<std::string> parse_only(std::string_view list) {
  std::vector<std::string> names = split_commas(list);
  for (const std::string& name : names) {
    if (std::find(std::begin(measurements), std::end(measurements), name) == std::end(measurements))
      return {};
  }
  return names;
}

// parse_sizes(): positive decimal numbers, or nothing when an item is not one.
std::vector<std::size_t> parse_sizes(std::string_view list) {
  std::vector<std::size_t> sizes;
  for (const std::string& item : split_commas(list)) {
    char* end = nullptr;
    const unsigned long value = std::strtoul(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || value == 0) return {};
    sizes.push_back(value);
  }
  return sizes;
}

nlohmann::json results = nlohmann::json::array();
int failed_checks = 0;  // the exit status is 1 when any check failed

// fail(): a wrong result. The run goes on (the other figures are still worth having); main() exits 1.
void fail(const std::string& what) {
  std::fprintf(stderr, "nerve-bench-cuda: CHECK FAILED: %s\n", what.c_str());
  std::fflush(stderr);
  ++failed_checks;
}

// first_wrong(): the index of the first element of `got` that is not exactly `expected(i)` (NaN
// included), or `got.size()` when all are right. The workloads' values are small integers and halves,
// exact in float whatever the order or fusion of the GPU's arithmetic, so equality is the check.
template <class Expected>
std::size_t first_wrong(std::span<const float> got, const Expected& expected) {
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!(got[i] == expected(i))) return i;
  }
  return got.size();
}

// verify(): fail() with `what` when an element of `got` is not `expected(i)`.
template <class Expected>
void verify(const std::string& what, std::span<const float> got, const Expected& expected) {
  const std::size_t i = first_wrong(got, expected);
  if (i == got.size()) return;
  fail(what + ": element " + std::to_string(i) + " of " + std::to_string(got.size()) + " is " +
       std::to_string(got[i]) + ", expected " + std::to_string(expected(i)));
}

// The inputs: non-zero patterns whose sums (W5) and 2x + 1 (W12) are exact in float.
float pattern_a(std::size_t i) { return static_cast<float>(i % 1024 + 1); }
float pattern_b(std::size_t i) { return static_cast<float>(i * 7 % 509) + 0.5f; }
float pattern_x(std::size_t i) { return static_cast<float>(i % 4096) + 1.0f; }

void report(const std::string& name, double value, const std::string& unit, const std::string& note = {}) {
  std::printf("  %-44s %12.3f %-8s %s\n", name.c_str(), value, unit.c_str(), note.c_str());
  std::fflush(stdout);
  results.push_back({{"name", name}, {"value", value}, {"unit", unit}, {"note", note}});
}

void check(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return;
  std::fprintf(stderr, "nerve-bench-cuda: %s: %s\n", what, cudaGetErrorString(status));
  std::exit(1);
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double median(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  const std::size_t middle = samples.size() / 2;
  return samples.size() % 2 == 1 ? samples[middle] : (samples[middle - 1] + samples[middle]) / 2;
}

// median_of(): the median time of `runs` timed calls, after one untimed warm-up — the suite's rule
// (WORKLOADS.md); the fastest run alone would report the machine's luckiest moment.
double median_of(int runs, const std::function<void()>& run) {
  run();
  std::vector<double> samples;
  for (int r = 0; r < runs; ++r) {
    const auto start = Clock::now();
    run();
    samples.push_back(seconds_since(start));
  }
  return median(samples);
}

struct Bandwidths {
  double d2d = 0, h2d = 0, d2h = 0, both = 0;  // GB/s of traffic (d2d: read + write)
};

Bandwidths copy_bandwidths(std::size_t bytes) {
  Bandwidths out;
  cudaStream_t s1 = nullptr, s2 = nullptr;
  check(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking), "cudaStreamCreate");
  check(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking), "cudaStreamCreate");
  void *d1 = nullptr, *d2 = nullptr, *h1 = nullptr, *h2 = nullptr;
  check(cudaMalloc(&d1, bytes), "cudaMalloc");
  check(cudaMalloc(&d2, bytes), "cudaMalloc");
  check(cudaHostAlloc(&h1, bytes, cudaHostAllocDefault), "cudaHostAlloc");
  check(cudaHostAlloc(&h2, bytes, cudaHostAllocDefault), "cudaHostAlloc");
  std::memset(h1, 1, bytes);
  const auto timed = [&](const std::function<void()>& enqueue) {
    return median_of(5, [&] {
      enqueue();
      check(cudaStreamSynchronize(s1), "sync");
      check(cudaStreamSynchronize(s2), "sync");
    });
  };
  const double gb = static_cast<double>(bytes) / 1e9;
  out.d2d =
      2 * gb / timed([&] { check(cudaMemcpyAsync(d2, d1, bytes, cudaMemcpyDeviceToDevice, s1), "d2d"); });
  out.h2d = gb / timed([&] { check(cudaMemcpyAsync(d1, h1, bytes, cudaMemcpyHostToDevice, s1), "h2d"); });
  out.d2h = gb / timed([&] { check(cudaMemcpyAsync(h2, d2, bytes, cudaMemcpyDeviceToHost, s1), "d2h"); });
  out.both = 2 * gb / timed([&] {
               check(cudaMemcpyAsync(d1, h1, bytes, cudaMemcpyHostToDevice, s1), "h2d");
               check(cudaMemcpyAsync(h2, d2, bytes, cudaMemcpyDeviceToHost, s2), "d2h");
             });
  cudaFree(d1);
  cudaFree(d2);
  cudaFreeHost(h1);
  cudaFreeHost(h2);
  cudaStreamDestroy(s1);
  cudaStreamDestroy(s2);
  return out;
}

nerve::Settings cuda_settings() {
  nerve::Settings settings;
  settings.set("gpu.devices", "cuda");
  return settings;
}

nerve::Kernel vector_add_kernel() {
  nerve::Kernel add("vector_add");
  nerve::cuda::attach(add, [](const nerve::KernelArgs& args, int, void* stream) {
    bench_cuda::launch_vector_add(static_cast<const float*>(args.data(0)),
                                  static_cast<const float*>(args.data(1)), static_cast<float*>(args.data(2)),
                                  args.size_bytes(2) / sizeof(float), stream);
  });
  return add;
}

// W5 over n floats: one raw launch, then nerve with one task per chunk, for each of `chunks` (floats).
// `label` names the case in the report ("2^26 floats").
void w5(std::size_t n, const std::vector<std::size_t>& chunks, const std::string& label,
        const Bandwidths& copies) {
  const double gb = 12.0 * static_cast<double>(n) / 1e9;
  std::vector<float> host_a(n), host_b(n);
  for (std::size_t i = 0; i < n; ++i) {
    host_a[i] = pattern_a(i);
    host_b[i] = pattern_b(i);
  }
  const auto sum = [](std::size_t i) { return pattern_a(i) + pattern_b(i); };
  const auto share = [&](double t) {
    return std::to_string(static_cast<int>(100 * gb / t / copies.d2d)) + "%";
  };
  {  // raw: one launch over device arrays, the inputs uploaded once (untimed), c poisoned before
    float *a = nullptr, *b = nullptr, *c = nullptr;
    check(cudaMalloc(&a, n * sizeof(float)), "cudaMalloc");
    check(cudaMalloc(&b, n * sizeof(float)), "cudaMalloc");
    check(cudaMalloc(&c, n * sizeof(float)), "cudaMalloc");
    check(cudaMemcpy(a, host_a.data(), n * sizeof(float), cudaMemcpyHostToDevice), "upload a");
    check(cudaMemcpy(b, host_b.data(), n * sizeof(float), cudaMemcpyHostToDevice), "upload b");
    check(cudaMemset(c, 0xff, n * sizeof(float)), "poison c");  // all bits set: NaN
    const double t = median_of(5, [&] {
      bench_cuda::launch_vector_add(a, b, c, n, nullptr);
      check(cudaDeviceSynchronize(), "sync");
    });
    std::vector<float> result(n);
    check(cudaMemcpy(result.data(), c, n * sizeof(float), cudaMemcpyDeviceToHost), "download c");
    verify("W5 raw kernel, " + label, result, sum);
    report("W5 raw kernel, one GPU, " + label, gb / t, "GB/s", "vs d2d copy " + share(t));
    cudaFree(a);
    cudaFree(b);
    cudaFree(c);
  }
  nerve::Context context(cuda_settings());
  const nerve::Kernel add = vector_add_kernel();
  nerve::Buffer<float> a(context, std::span<const float>(host_a)), b(context, std::span<const float>(host_b));
  nerve::Buffer<float> c(context, n);
  for (const std::size_t chunk : chunks) {
    const auto run = [&] {
      for (std::size_t start = 0; start < n; start += chunk) {
        const std::size_t count = std::min(chunk, n - start);
        context.spawn(nerve::TaskOptions{.device = 1}, add, nerve::read(a.slice(start, count)),
                      nerve::read(b.slice(start, count)), nerve::write(c.slice(start, count)));
      }
      context.wait_all();
    };
    {  // poisoned before the warm-up, so a chunk no run writes stays NaN
      auto mapped = c.map_write();
      std::fill(mapped.begin(), mapped.end(), NAN);
    }
    const double t = median_of(5, run);  // the warm-up moves a and b to the GPU once
    const std::size_t tasks = (n + chunk - 1) / chunk;
    {
      auto mapped = c.map_read();
      verify("W5 nerve, " + label + ", " + std::to_string(tasks) + " tasks", mapped.span(), sum);
    }
    report("W5 nerve, one GPU, " + label + ", " + std::to_string(tasks) + " tasks", gb / t, "GB/s",
           "vs d2d copy " + share(t) + " (goal >= 90%)");
  }
}

// W5 with cold inputs: the input buffers are made anew from host vectors every run (a program that
// does not keep its data in nerve buffers), with the host copies page-locked on first transfer
// (gpu.pin_host_buffers, the default) and not; each run split into making the buffers, the tasks
// (upload, add) and the buffers' release. Baselines: page-locking and unlocking one input in place.
void w5_cold(std::size_t n, std::size_t chunk) {
  const double gb = 12.0 * static_cast<double>(n) / 1e9;
  std::vector<float> a(n, 1.0f), b(n, 2.0f);
  {
    const auto start = Clock::now();
    check(cudaHostRegister(a.data(), n * sizeof(float), cudaHostRegisterPortable), "cudaHostRegister");
    const double registering = seconds_since(start);
    const auto unregister_start = Clock::now();
    check(cudaHostUnregister(a.data()), "cudaHostUnregister");
    report("W5 cold: cudaHostRegister of one input", registering * 1e3, "ms",
           "unregister " + std::to_string(seconds_since(unregister_start) * 1e3) + " ms");
  }
  {  // making an input buffer: the constructor's copy, and the same copy split over the workers
    nerve::Context context(cuda_settings());
    std::vector<double> serial, parallel;
    for (int r = 0; r < 4; ++r) {
      auto start = Clock::now();
      { nerve::Buffer<float> x(context, std::span<const float>(a)); }
      serial.push_back(seconds_since(start) * 1e3);
      start = Clock::now();
      {
        nerve::Buffer<float> x(context, n);
        auto mapped = x.map_write();
        nerve::parallel_for(context, 0, n, std::size_t{1} << 20, [&](std::size_t begin, std::size_t end) {
          std::copy(a.begin() + static_cast<std::ptrdiff_t>(begin),
                    a.begin() + static_cast<std::ptrdiff_t>(end),
                    mapped.begin() + static_cast<std::ptrdiff_t>(begin));
        });
      }
      parallel.push_back(seconds_since(start) * 1e3);
    }
    report("W5 cold: make + free one input buffer", median(serial), "ms",
           "copy split over the workers: " + std::to_string(median(parallel)) + " ms");
  }
  const nerve::Kernel add = vector_add_kernel();
  for (const bool pin : {true, false}) {
    nerve::Settings settings = cuda_settings();
    settings.set("gpu.pin_host_buffers", pin ? "true" : "false");
    nerve::Context context(settings);
    nerve::Buffer<float> c(context, n);
    std::vector<double> make, tasks, release, total;
    for (int r = 0; r < 4; ++r) {
      {  // so that a chunk the last run did not write fails the check even if an earlier run wrote it
        auto mapped = c.map_write();
        std::fill(mapped.begin(), mapped.end(), NAN);
      }
      const auto t0 = Clock::now();
      auto fa = std::make_optional<nerve::Buffer<float>>(context, std::span<const float>(a));
      auto fb = std::make_optional<nerve::Buffer<float>>(context, std::span<const float>(b));
      const auto t1 = Clock::now();
      for (std::size_t start = 0; start < n; start += chunk) {
        const std::size_t count = std::min(chunk, n - start);
        context.spawn(nerve::TaskOptions{.device = 1}, add, nerve::read(fa->slice(start, count)),
                      nerve::read(fb->slice(start, count)), nerve::write(c.slice(start, count)));
      }
      context.wait_all();
      const auto t2 = Clock::now();
      fa.reset();
      fb.reset();
      const auto t3 = Clock::now();
      (void)c.map_read();  // the result back on the host
      const auto t4 = Clock::now();
      if (r == 0) continue;  // warm-up
      make.push_back(std::chrono::duration<double>(t1 - t0).count() * 1e3);
      tasks.push_back(std::chrono::duration<double>(t2 - t1).count() * 1e3);
      release.push_back(std::chrono::duration<double>(t3 - t2).count() * 1e3);
      total.push_back(std::chrono::duration<double>(t4 - t0).count() * 1e3);
    }
    const std::string mode = pin ? "page-locked in place" : "not page-locked";
    report("W5 cold, " + mode, median(total), "ms",
           std::to_string(static_cast<int>(gb / median(total) * 1e3)) + " GB/s; make " +
               std::to_string(median(make)) + " ms, tasks " + std::to_string(median(tasks)) +
               " ms, release " + std::to_string(median(release)) + " ms");
    {
      auto mapped = c.map_read();
      verify("W5 cold, " + mode, mapped.span(), [](std::size_t) { return 3.0f; });
    }
  }
}

// W12 (WORKLOADS.md): stream `n` floats through host -> device -> kernel -> host in chunks of each
// size in `chunks`; the bound is the measured copy bandwidth (in and out overlap when the link is
// full duplex). Baselines in the same run: the same chunks serial on one stream (no overlap), and a
// raw 4-stream pipeline from pinned memory.
void w12(std::size_t n, const std::vector<std::size_t>& chunks, const Bandwidths& copies) {
  const double in_gb = 4.0 * static_cast<double>(n) / 1e9;
  const double ideal = std::max(in_gb / copies.h2d, in_gb / copies.d2h);
  const auto percent = [&](double t) { return ideal / t * 100; };
  const auto rate = [&](double t) { return std::to_string(static_cast<int>(2 * in_gb / t)) + " GB/s"; };
  const std::size_t raw_chunk = chunks.front();
  {  // raw: pinned host memory, copy in / kernel / copy out per chunk
    float *hx = nullptr, *hy = nullptr, *dx = nullptr, *dy = nullptr;
    check(cudaHostAlloc(reinterpret_cast<void**>(&hx), n * sizeof(float), cudaHostAllocDefault),
          "cudaHostAlloc");
    check(cudaHostAlloc(reinterpret_cast<void**>(&hy), n * sizeof(float), cudaHostAllocDefault),
          "cudaHostAlloc");
    check(cudaMalloc(&dx, n * sizeof(float)), "cudaMalloc");
    check(cudaMalloc(&dy, n * sizeof(float)), "cudaMalloc");
    for (std::size_t i = 0; i < n; ++i) hx[i] = pattern_x(i);
    std::vector<cudaStream_t> streams(4);
    for (auto& s : streams) check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    const auto pipeline = [&](std::size_t stream_count) {
      std::fill(hy, hy + n, NAN);  // poisoned before the warm-up: a chunk no run brings back stays NaN
      return median_of(3, [&] {
        std::size_t k = 0;
        for (std::size_t start = 0; start < n; start += raw_chunk, ++k) {
          cudaStream_t s = streams[k % stream_count];
          const std::size_t count = std::min(raw_chunk, n - start), bytes = count * sizeof(float);
          check(cudaMemcpyAsync(dx + start, hx + start, bytes, cudaMemcpyHostToDevice, s), "h2d");
          bench_cuda::launch_transform(dx + start, dy + start, count, s);
          check(cudaMemcpyAsync(hy + start, dy + start, bytes, cudaMemcpyDeviceToHost, s), "d2h");
        }
        check(cudaDeviceSynchronize(), "sync");
      });
    };
    const std::string mib = std::to_string(raw_chunk * sizeof(float) >> 20) + " MiB chunks";
    const auto transformed = [](std::size_t i) { return 2.0f * pattern_x(i) + 1.0f; };
    const double serial = pipeline(1);
    verify("W12 raw serial", std::span<const float>(hy, n), transformed);
    report("W12 raw serial (one stream, " + mib + ")", percent(serial), "%",
           "of the copy-bandwidth bound, " + rate(serial));
    const double raw = pipeline(4);
    verify("W12 raw 4-stream pipeline", std::span<const float>(hy, n), transformed);
    report("W12 raw 4-stream pipeline (" + mib + ")", percent(raw), "%",
           "of the copy-bandwidth bound, " + rate(raw));
    for (auto& s : streams) cudaStreamDestroy(s);
    cudaFreeHost(hx);
    cudaFreeHost(hy);
    cudaFree(dx);
    cudaFree(dy);
  }
  nerve::Context context(cuda_settings());
  nerve::Kernel transform("transform");
  nerve::cuda::attach(transform, [](const nerve::KernelArgs& args, int, void* stream) {
    bench_cuda::launch_transform(static_cast<const float*>(args.data(0)), static_cast<float*>(args.data(1)),
                                 args.size_bytes(1) / sizeof(float), stream);
  });
  nerve::Buffer<float> x(context, n), y(context, n);
  // The consumer tasks check the first and last element of their chunk (what they read before:
  // O(1) a chunk, so the timed pipeline is unchanged) and count what is wrong; the whole of y is
  // checked after the timed runs.
  std::atomic<std::uint64_t> wrong_ends{0};
  const auto transformed = [](std::size_t i) { return 2.0f * pattern_x(i) + 1.0f; };
  // How each chunk comes to be new on the host: a CPU task fills it whole (on a 16-core H200 host
  // 6.4 ms per 16 MiB chunk, which bounded the run), or updates it in place (one element, rewritten
  // with its own value: the chunk is new on the host all the same and travels again), which is the
  // raw pipeline's situation — data already in host memory.
  const auto run = [&](bool fill, std::size_t chunk) {
    for (std::size_t start = 0; start < n; start += chunk) {
      const std::size_t count = std::min(chunk, n - start);
      auto xs = x.slice(start, count), ys = y.slice(start, count);
      if (fill) {
        context.spawn(
            nerve::TaskOptions{.device = 0},
            [start](std::span<float> v) {
              for (std::size_t i = 0; i < v.size(); ++i) v[i] = pattern_x(start + i);
            },
            nerve::write(xs));
      } else {
        context.spawn(
            nerve::TaskOptions{.device = 0}, [start](std::span<float> v) { v[0] = pattern_x(start); },
            nerve::read_write(xs));
      }
      context.spawn(nerve::TaskOptions{.device = 1}, transform, nerve::read(xs), nerve::write(ys));
      context.spawn(
          nerve::TaskOptions{.device = 0},
          [&wrong_ends, &transformed, start](std::span<const float> v) {
            if (v.front() != transformed(start) || v.back() != transformed(start + v.size() - 1))
              wrong_ends.fetch_add(1, std::memory_order_relaxed);
          },
          nerve::read(ys));
    }
    context.wait_all();
  };
  const auto poison_y = [&] {
    auto mapped = y.map_write();
    std::fill(mapped.begin(), mapped.end(), NAN);
  };
  // check_y(): after a case's timed runs, every element of y, and the consumers' counts.
  const auto check_y = [&](const std::string& what) {
    if (const std::uint64_t wrong = wrong_ends.exchange(0); wrong != 0)
      fail(what + ": " + std::to_string(wrong) + " chunks read back with a wrong first or last element");
    auto mapped = y.map_read();
    verify(what, mapped.span(), transformed);
  };
  poison_y();
  run(true, chunks.front());  // the first run fills x and page-locks x and y
  check_y("W12 nerve, first fill");
  for (const std::size_t chunk : chunks) {
    const std::string mib = std::to_string(chunk * sizeof(float) >> 20) + " MiB chunks";
    poison_y();  // before the warm-up, so a chunk no run writes stays NaN
    const double t = median_of(3, [&] { run(false, chunk); });
    check_y("W12 nerve, host data (" + mib + ")");
    report("W12 nerve, host data (" + mib + ")", percent(t), "%",
           "of the copy-bandwidth bound (goal >= 85%), " + rate(t));
  }
  poison_y();
  const double filled = median_of(3, [&] { run(true, chunks.front()); });
  check_y("W12 nerve, CPU fills each chunk");
  report("W12 nerve, CPU fills each chunk", percent(filled), "%",
         "of the copy-bandwidth bound, the CPU fill included, " + rate(filled));
}

void latency(int iterations) {
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  cudaEvent_t e = nullptr;
  check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  const auto measure = [&](const std::function<void(int)>& once) {
    std::vector<double> samples;
    for (int i = 0; i < iterations; ++i) {
      const auto start = Clock::now();
      once(i + 1);
      samples.push_back(seconds_since(start) * 1e6);
    }
    return median(samples);
  };
  report("completion: cudaStreamSynchronize", measure([&](int) {
           bench_cuda::launch_empty(s);
           check(cudaStreamSynchronize(s), "sync");
         }),
         "us", "empty kernel round trip, median");
  report("completion: cudaEventSynchronize", measure([&](int) {
           bench_cuda::launch_empty(s);
           check(cudaEventRecord(e, s), "record");
           check(cudaEventSynchronize(e), "sync");
         }),
         "us", "empty kernel round trip, median");
  using WriteValue32 = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);
  void* function = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion("cuStreamWriteValue32", &function, 12000, cudaEnableDefault, &found) ==
          cudaSuccess &&
      found == cudaDriverEntryPointSuccess) {
    auto write = reinterpret_cast<WriteValue32>(function);
    std::uint32_t* flag = nullptr;
    check(cudaHostAlloc(reinterpret_cast<void**>(&flag), 64, cudaHostAllocMapped | cudaHostAllocPortable),
          "cudaHostAlloc");
    *flag = 0;
    bool ok = true;
    const double us = measure([&](int i) {
      bench_cuda::launch_empty(s);
      if (write(s, reinterpret_cast<CUdeviceptr>(flag), static_cast<cuuint32_t>(i), 0) != CUDA_SUCCESS)
        ok = false;
      while (ok && std::atomic_ref<std::uint32_t>(*flag).load(std::memory_order_acquire) !=
                       static_cast<std::uint32_t>(i)) {
      }
    });
    report("completion: host-mapped flag (GPU writes)", ok ? us : -1, "us",
           ok ? "empty kernel round trip, median" : "cuStreamWriteValue32 refused");
    cudaFreeHost(flag);
  } else {
    report("completion: host-mapped flag (GPU writes)", -1, "us", "cuStreamWriteValue32 not found");
  }
  cudaEventDestroy(e);
  cudaStreamDestroy(s);
  for (const char* mode : {"flag", "event"}) {
    ::setenv("NERVE_CUDA_COMPLETION", mode, 1);  // read when the context opens its devices
    nerve::Context context(cuda_settings());
    nerve::Kernel nothing("empty");
    nerve::cuda::attach(
        nothing, [](const nerve::KernelArgs&, int, void* stream) { bench_cuda::launch_empty(stream); });
    nerve::Buffer<float> token(context, 1);
    report(std::string("completion: nerve task, ") + mode, measure([&](int) {
             context.submit(nerve::TaskOptions{.device = 1}, nothing, nerve::read_write(token)).wait();
           }),
           "us", "submit to wait() returning, median");
  }
  ::unsetenv("NERVE_CUDA_COMPLETION");
}

void pools(int pairs) {
  using namespace nerve::detail::cuda;
  auto driver = make_cudart_driver();
  const std::size_t sizes[] = {4096, 65536, 1 << 20, 16 << 20, 64 << 20};
  const auto run = [&](nerve::memory::NodePool& pool) {
    std::vector<std::pair<void*, std::size_t>> live;
    const auto start = Clock::now();
    for (int i = 0; i < pairs; ++i) {
      const std::size_t bytes = sizes[i % 5];
      live.emplace_back(pool.allocate(bytes), bytes);
      if (live.size() > 32) {
        pool.deallocate(live.front().first, live.front().second);
        live.erase(live.begin());
      }
    }
    for (auto& [pointer, bytes] : live) pool.deallocate(pointer, bytes);
    return seconds_since(start) * 1e9 / pairs;
  };
  nerve::memory::DeviceArena arena(
      std::make_unique<CudaBlockAllocator>(*driver, BlockKind::device, 0, 1, "GPU 0"),
      nerve::memory::DeviceArenaOptions{});
  run(arena);  // warm: the chunks exist
  report("device pool: arena (nerve's sub-allocator)", run(arena), "ns", "per allocate+free");
  StreamOrderedPool stream_ordered(
      *driver, 0, std::make_unique<CudaBlockAllocator>(*driver, BlockKind::device, 0, 1, "GPU 0"), 0);
  run(stream_ordered);
  report("device pool: stream-ordered (cudaMallocAsync)", run(stream_ordered), "ns", "per allocate+free");
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  const auto usage = [] {
    std::fprintf(stderr,
                 "usage: nerve-bench-cuda [--json PATH] [--quick] [--only w5,w5cold,w12,latency,pools] "
                 "[--w12-mib MIB[,MIB...]]\n");
    return 2;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--json" && i + 1 < argc) {
      options.json = argv[++i];
    } else if (arg == "--quick") {
      options.scale = 16;
    } else if (arg == "--only" && i + 1 < argc) {
      options.only = parse_only(argv[++i]);
      if (options.only.empty()) return usage();
    } else if (arg == "--w12-mib" && i + 1 < argc) {
      options.w12_mib = parse_sizes(argv[++i]);
      if (options.w12_mib.empty()) return usage();
    } else {
      return usage();
    }
  }
  int count = 0;
  if (const cudaError_t status = cudaGetDeviceCount(&count); status != cudaSuccess || count == 0) {
    std::printf("nerve-bench-cuda: no CUDA device (%s)\n",
                status != cudaSuccess ? cudaGetErrorString(status) : "the CUDA runtime reports none");
    return 0;
  }
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::printf("nerve-bench-cuda: %d device(s); GPU 0: %s, %.1f GiB\n", count, prop.name,
              static_cast<double>(prop.totalGlobalMem) / (1 << 30));
  const std::size_t s = options.scale;
  const Bandwidths copies = copy_bandwidths((std::size_t{1} << 30) / s);
  report("copy device->device (read+write)", copies.d2d, "GB/s");
  report("copy host->device (pinned)", copies.h2d, "GB/s");
  report("copy device->host (pinned)", copies.d2h, "GB/s");
  report("copy both directions at once", copies.both, "GB/s");
  if (options.runs("w5")) {
    // WORKLOADS.md's W5: 2^26 floats in chunks of 2^20 (quick: both / 16).
    w5((std::size_t{1} << 26) / s, {(std::size_t{1} << 20) / s}, s == 1 ? "2^26 floats" : "2^22 floats",
       copies);
    // Extra: 2^28 floats in 4 and 16 tasks, the case docs/BACKENDS.md's figures were measured on.
    const std::size_t large = (std::size_t{1} << 28) / s;
    w5(large, {large / 4, large / 16}, s == 1 ? "2^28 floats" : "2^24 floats", copies);
  }
  if (options.runs("w5cold")) w5_cold((std::size_t{1} << 28) / s, (std::size_t{1} << 24) / s);
  if (options.runs("w12")) {
    std::vector<std::size_t> chunks;  // in floats
    for (const std::size_t mib : options.w12_mib) chunks.push_back(std::max<std::size_t>(1, (mib << 18) / s));
    w12((std::size_t{1} << 30) / s, chunks, copies);
  }
  if (options.runs("latency")) latency(s == 1 ? 2000 : 200);
  if (options.runs("pools")) pools(s == 1 ? 20000 : 2000);
  if (!options.json.empty()) {
    std::ofstream(options.json)
        << nlohmann::json{{"device", prop.name}, {"verified", failed_checks == 0}, {"results", results}}.dump(
               2)
        << "\n";
  }
  if (failed_checks != 0) {
    std::fprintf(stderr, "nerve-bench-cuda: %d check(s) failed\n", failed_checks);
    return 1;
  }
  return 0;
}
