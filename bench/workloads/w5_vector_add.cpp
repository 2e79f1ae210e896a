// w5_vector_add.cpp — W5: C = A + B over N = 2^26 floats (quick: 2^22) in chunks of 2^20 (quick:
// 2^18), 12 bytes moved per element. Memory-bound: the figure is bandwidth, and the reference is
// the STREAM "Add" kernel (McCalpin's stream.c) timed in the same run on the same arrays, so every
// variant is also a % of what this machine's memory gives.
// Variants:
//   nerve      one task per chunk over slices of three nerve::Buffers (read, read, write): the
//              dependencies are inferred per slice, so the chunks are independent
//   OpenMP     `parallel for schedule(dynamic, chunk)`: the same decomposition as nerve's tasks
//   oneTBB     tbb::parallel_for over blocked_range(0, N, chunk) with simple_partitioner
//   naive      T std::threads created per run, a static split (the seed's naive version)
//   STREAM add stream.c's measurement: `parallel for schedule(static)`, each sample the best of 10
//              runs timed inside one parallel region after a barrier (no team wake-up in the clock);
//              the % of every other variant is of the median of those samples (each already
//              stream.c's figure)
// Fair memory: the baselines' arrays get the pages nerve's buffers got (transparent huge pages when
// the pool advised them, memory.huge_pages) and staggered starts like the pool's colouring, so the
// ratios compare the runtimes, not the page sizes. Quick arrays (16 MiB) are below STREAM's size
// rule (4 x the last-level cache); the STREAM note says so. Inputs are patterned, non-zero and every
// sum exact in float; every element of C is checked after every sample (C is poisoned before each).
// Pages are first-touched in parallel, before timing.
#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#if NERVE_HAVE_TBB
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>
#endif

#include "nerve/nerve.hpp"

#include "device_workload.hpp"
#include "measure.hpp"
#include "naive_threads.hpp"
#include "runtimes.hpp"
#include "workload.hpp"

namespace nerve::bench {
namespace {

const char* const case_name = "vector add";

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
  return {w5_gbps(v.a.size(), ns), w5_first_wrong(c.data(), c.size())};
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
  per_chunk(context, vectors, chunk, spawn_w5_inputs);
  // After nerve's buffers exist: whether its pool gave them huge pages decides the baselines' pages.
  const bool huge_pages = huge_pages_like_nerve(context);
  const W5Arrays arrays(n, threads, huge_pages);
  result.size += huge_pages ? "; every runtime's arrays on transparent huge pages"
                            : "; every runtime's arrays on base pages";
  const std::string size_rule = stream_size_rule(context, n * sizeof(float));
  if (!size_rule.empty()) result.size += " (below STREAM's size rule)";

  auto poison_nerve = [&] {
    per_chunk(context, vectors, chunk,
              [](nerve::Context& ctx, const auto&, const auto&, const auto& c, std::size_t) {
                ctx.spawn([](std::span<float> sc) { std::fill(sc.begin(), sc.end(), w5_poison); },
                          nerve::write(c));
              });
  };
  auto poison_arrays = [&] { arrays.poison_c(); };
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
                        return arrays.trial(watch.elapsed_ns());
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
                        return arrays.trial(watch.elapsed_ns());
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
                        return arrays.trial(watch.elapsed_ns());
                      },
                      {}});
  // The reference, as McCalpin's stream.c measures it: each sample is the best of stream_times runs
  // of the static loop, each timed with the team already up (stream_add_best_ns()).
  variants.push_back({case_name,
                      "STREAM",
                      "STREAM add",
                      unit,
                      false,
                      0,
                      poison_arrays,
                      [&] { return arrays.stream_add(); },
                      {}});
  result.measurements = measure_interleaved(variants, options);
  // WORKLOADS.md's second figure, against STREAM's median of stream.c figures (note_share_of_stream()).
  note_share_of_stream(result.measurements, "STREAM add", "STREAM add", size_rule);
  // With an OpenCL device: the chunks spread over the CPU workers and the device, as a case of its own,
  // with its own STREAM variant (--runtimes STREAM selects that one too: it needs nerve's buffers,
  // whose pages its arrays take, but none of nerve's variants measured).
  const auto selected = [&options](const char* runtime) {
    return options.runtimes.empty() ||
           std::find(options.runtimes.begin(), options.runtimes.end(), runtime) != options.runtimes.end();
  };
  if (selected("nerve") || selected("STREAM")) {
    WorkloadResult device = run_w5_heterogeneous(options);
    for (Measurement& measurement : device.measurements)
      result.measurements.push_back(std::move(measurement));
    if (!device.measurements.empty()) result.size += "; device case: " + device.size;
  }
  return result;
}

}  // namespace nerve::bench
