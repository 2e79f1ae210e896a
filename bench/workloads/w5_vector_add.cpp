// w5_vector_add.cpp — W5: C = A + B over N = 2^26 floats (quick: 2^22) in chunks of 2^20 (quick:
// 2^18), 12 bytes moved per element. Memory-bound: the figure is bandwidth, and the reference is
// the STREAM "Add" kernel (McCalpin's stream.c: one static OpenMP loop over the arrays) timed in the
// same run on the same arrays, so every variant is also a % of what this machine's memory gives.
// Variants:
//   nerve      one task per chunk over slices of three nerve::Buffers (read, read, write): the
//              dependencies are inferred per slice, so the chunks are independent
//   OpenMP     `parallel for schedule(dynamic, chunk)`: the same decomposition as nerve's tasks
//   oneTBB     tbb::parallel_for over blocked_range(0, N, chunk) with simple_partitioner
//   naive      T std::threads created per run, a static split (the seed's naive version)
//   STREAM add `parallel for schedule(static)` (std::threads when OpenMP is missing)
// Inputs are patterned so that every sum is exact in float; every element of C is checked after
// every sample (C is poisoned before each). Pages are first-touched by the workers, before timing.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#if NERVE_HAVE_TBB
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>
#endif

#include "nerve/nerve.hpp"

#include "measure.hpp"
#include "naive_threads.hpp"
#include "runtimes.hpp"
#include "workload.hpp"

namespace nerve::bench {
namespace {

const char* const case_name = "vector add";
constexpr float poison = -1.0f;

float input_a(std::size_t i) { return static_cast<float>(i % 4096) + 1.0f; }
float input_b(std::size_t i) { return static_cast<float>(2 * (i % 1024)) + 0.5f; }

// first_wrong() checks c exactly; "" when every element is a[i] + b[i].
std::string first_wrong(std::span<const float> c) {
  for (std::size_t i = 0; i < c.size(); ++i) {
    if (c[i] != input_a(i) + input_b(i)) {
      return "C[" + std::to_string(i) + "] = " + std::to_string(c[i]) + ", expected " +
             std::to_string(input_a(i) + input_b(i));
    }
  }
  return {};
}

double gigabytes_per_second(std::size_t n, double ns) { return 12.0 * static_cast<double>(n) / ns; }

// Plain arrays for the baselines, first-touched in parallel like nerve's buffers.
struct Arrays {
  std::size_t n;
  std::unique_ptr<float[]> a, b, c;
  Arrays(std::size_t count, unsigned threads)
      : n(count), a(new float[count]), b(new float[count]), c(new float[count]) {
    static_split(n, threads, [this](std::size_t begin, std::size_t end) {
      for (std::size_t i = begin; i < end; ++i) {
        a[i] = input_a(i);
        b[i] = input_b(i);
        c[i] = poison;
      }
    });
  }
  void poison_c(unsigned threads) {
    static_split(n, threads,
                 [this](std::size_t begin, std::size_t end) { std::fill(&c[begin], &c[end], poison); });
  }
  void add(std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) c[i] = a[i] + b[i];
  }
  Trial finish(const Stopwatch& watch) const {
    const double ns = watch.elapsed_ns();
    return {gigabytes_per_second(n, ns), first_wrong({c.get(), n})};
  }
};

struct NerveVectors {
  nerve::Buffer<float> a, b, c;
  NerveVectors(nerve::Context& context, std::size_t n) : a(context, n), b(context, n), c(context, n) {}
};

template <class Body>
void per_chunk(nerve::Context& context, const NerveVectors& v, std::size_t chunk, Body body) {
  for (std::size_t begin = 0; begin < v.a.size(); begin += chunk) {
    const std::size_t count = std::min(chunk, v.a.size() - begin);
    body(context, v.a.slice(begin, count), v.b.slice(begin, count), v.c.slice(begin, count), begin);
  }
  context.wait_all();
}

Trial run_nerve(nerve::Context& context, const NerveVectors& v, std::size_t chunk, bool inject_fault) {
  Stopwatch watch;
  per_chunk(context, v, chunk,
            [](nerve::Context& ctx, const auto& a, const auto& b, const auto& c, std::size_t) {
              ctx.spawn(
                  [](std::span<const float> sa, std::span<const float> sb, std::span<float> sc) {
                    for (std::size_t i = 0; i < sc.size(); ++i) sc[i] = sa[i] + sb[i];
                  },
                  nerve::read(a), nerve::read(b), nerve::write(c));
            });
  const double ns = watch.elapsed_ns();
  auto c = v.c.map_read_write();
  if (inject_fault) c[c.size() / 2] += 1.0f;
  return {gigabytes_per_second(v.a.size(), ns), first_wrong(c.span())};
}

}  // namespace

WorkloadResult run_w5_vector_add(const WorkloadOptions& options) {
  const std::size_t n = std::size_t{1} << (options.quick ? 22 : 26);
  const std::size_t chunk = std::size_t{1} << (options.quick ? 18 : 20);
  WorkloadResult result{"W5",
                        "vector add",
                        "N = 2^" + std::to_string(options.quick ? 22 : 26) + " floats, chunks of 2^" +
                            std::to_string(options.quick ? 18 : 20),
                        {},
                        {}};
  nerve::Context context(nerve_settings(options));
  TbbLimit tbb_limit(options.threads);
  set_openmp_threads(options.threads);
  const unsigned threads = options.threads;

  NerveVectors vectors(context, n);
  per_chunk(context, vectors, chunk,
            [](nerve::Context& ctx, const auto& a, const auto& b, const auto& c, std::size_t begin) {
              ctx.spawn(
                  [begin](std::span<float> sa, std::span<float> sb, std::span<float> sc) {
                    for (std::size_t i = 0; i < sa.size(); ++i) {
                      sa[i] = input_a(begin + i);
                      sb[i] = input_b(begin + i);
                      sc[i] = poison;
                    }
                  },
                  nerve::write(a), nerve::write(b), nerve::write(c));
            });
  Arrays arrays(n, threads);

  auto poison_nerve = [&] {
    per_chunk(context, vectors, chunk,
              [](nerve::Context& ctx, const auto&, const auto&, const auto& c, std::size_t) {
                ctx.spawn([](std::span<float> sc) { std::fill(sc.begin(), sc.end(), poison); },
                          nerve::write(c));
              });
  };
  auto poison_arrays = [&] { arrays.poison_c(threads); };
  const std::string unit = "GB/s";

  std::vector<Variant> variants;
  variants.push_back({case_name,
                      "nerve",
                      "nerve tasks over slices",
                      unit,
                      false,
                      n / chunk,
                      poison_nerve,
                      [&] { return run_nerve(context, vectors, chunk, options.inject_fault); },
                      {}});
#if NERVE_HAVE_OPENMP
  variants.push_back({case_name,
                      "OpenMP",
                      "OpenMP parallel for (dynamic, chunk)",
                      unit,
                      false,
                      n / chunk,
                      poison_arrays,
                      [&] {
                        Stopwatch watch;
                        const long chunks = static_cast<long>(n / chunk);
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
                        for (long k = 0; k < chunks; ++k) {
                          arrays.add(static_cast<std::size_t>(k) * chunk,
                                     static_cast<std::size_t>(k + 1) * chunk);
                        }
                        return arrays.finish(watch);
                      },
                      {}});
#endif
#if NERVE_HAVE_TBB
  variants.push_back({case_name,
                      "oneTBB",
                      "oneTBB parallel_for",
                      unit,
                      false,
                      n / chunk,
                      poison_arrays,
                      [&] {
                        Stopwatch watch;
                        tbb::parallel_for(
                            tbb::blocked_range<std::size_t>(0, n, chunk),
                            [&](const tbb::blocked_range<std::size_t>& r) { arrays.add(r.begin(), r.end()); },
                            tbb::simple_partitioner());
                        return arrays.finish(watch);
                      },
                      {}});
#endif
  variants.push_back({case_name,
                      "naive",
                      "naive threads (static split)",
                      unit,
                      false,
                      threads,
                      poison_arrays,
                      [&] {
                        Stopwatch watch;
                        static_split(n, threads,
                                     [&](std::size_t begin, std::size_t end) { arrays.add(begin, end); });
                        return arrays.finish(watch);
                      },
                      {}});
  variants.push_back({case_name,
                      "STREAM",
                      "STREAM add",
                      unit,
                      false,
                      0,
                      poison_arrays,
                      [&] {
                        Stopwatch watch;
#if NERVE_HAVE_OPENMP
                        const long count = static_cast<long>(n);
                        float* __restrict c = arrays.c.get();
                        const float* __restrict a = arrays.a.get();
                        const float* __restrict b = arrays.b.get();
#pragma omp parallel for num_threads(threads) schedule(static)
                        for (long j = 0; j < count; ++j) c[j] = a[j] + b[j];
#else
                        static_split(n, threads,
                                     [&](std::size_t begin, std::size_t end) { arrays.add(begin, end); });
#endif
                        return arrays.finish(watch);
                      },
                      {}});
  result.measurements = measure_interleaved(variants, options);
  note_share_of(result.measurements, "STREAM add", "STREAM add");  // WORKLOADS.md's second figure
  // With an OpenCL device: the chunks spread over the CPU workers and the device, as a case of its own.
  if (options.runtimes.empty() ||
      std::find(options.runtimes.begin(), options.runtimes.end(), "nerve") != options.runtimes.end()) {
    WorkloadResult device = run_w5_heterogeneous(options);
    for (Measurement& measurement : device.measurements)
      result.measurements.push_back(std::move(measurement));
    if (!device.measurements.empty()) result.size += "; device case: " + device.size;
  }
  return result;
}

}  // namespace nerve::bench
