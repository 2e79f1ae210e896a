// w11_inference.cpp — W11: batched inference. 10,000 requests (quick: 1,000), each one input row of
// a 3-layer MLP 512 wide (w11_serving.hpp), arrive at a fixed rate of 12,000 requests/s; the serving
// side either batches them dynamically into tasks (at most 32 rows, a batch waits at most 1 ms for
// more) or runs one task per request. The plain variants serve WORKLOADS.md's stream: 10,000
// independent requests, each its own input row. The cache variant serves a second stream that repeats
// inputs — 10,000 requests over 5,000 distinct rows, drawn at random, as a service sees popular
// queries again — with the result cache (examples/common/result_cache.hpp) in front of the batcher.
// Variants (T threads compute; the requests are generated, batched and looked up on one more thread
// that sleeps between arrivals and computes nothing until the stream ends):
//   nerve batching / nerve per request / nerve batching + cache   tasks via Context::spawn; the
//                                                                  generator is the context's slot 0,
//                                                                  so parallel.thread_pool_size = T + 1
//   oneTBB batching / per request                                  tbb::task_group::run; the generator
//                                                                  is the master thread, so the limit
//                                                                  is T + 1
//   naive pool batching / per request                              T std::threads, one locked queue,
//                                                                  plus the generator
// So every runtime runs on T + 1 threads, T of them computing; the size line and each measurement's
// "threads" figure say so (in the JSON too).
// Figure: requests/s (first arrival to last answer); p50 / p99 latency from each request's
// scheduled arrival to its answer; for the cache, hit rate and the compute time the hits saved.
// Check: every answer of every sample against a double-precision reference (max error ≤ 1e-3 of
// the row's largest output). At 12,000 requests/s a runtime that keeps up serves ~12,000/s; one that
// does not (one task per request runs matrix-vector products, several times slower per row than
// a batch's matrix-matrix products) falls behind, and its latency grows with the backlog.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "nerve/nerve.hpp"

#include "blas_support.hpp"
#include "measure.hpp"
#include "runtimes.hpp"
#include "w11_serving.hpp"
#include "workload.hpp"

namespace nerve::bench {
namespace {

using namespace serving;

// The serving setup; defaults WORKLOADS.md's, each settable with openclaw-benchmark --param W11.<name>.
struct Serving {
  double rate = 12000;  // requests per second
  int max_batch = 32;
  std::chrono::microseconds max_wait{1000};
};

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  const auto k = static_cast<std::size_t>(std::min<double>(values.size() - 1, std::floor(p * values.size())));
  std::nth_element(values.begin(), values.begin() + static_cast<long>(k), values.end());
  return values[k];
}

// One request stream with its double-precision reference answers.
struct Served {
  Stream stream;
  std::vector<double> reference;  // distinct × width
  Served(const Mlp& model, std::size_t requests, std::size_t distinct)
      : stream(requests, distinct, 1200),
        reference(model.reference(stream.inputs.data(), static_cast<int>(distinct))) {}
};

struct Setup {
  Mlp model{1100};
  Served independent;  // WORKLOADS.md's: every request its own input row
  Served repeating;    // the cache variant's: half as many distinct rows, drawn at random
  std::vector<float> outputs;

  explicit Setup(std::size_t requests)
      : independent(model, requests, requests),
        repeating(model, requests, requests / 2),
        outputs(requests * width) {}
  std::string check(const Served& served) const {
    const Stream& stream = served.stream;
    for (std::size_t r = 0; r < stream.input_of.size(); ++r) {
      const double* expected = &served.reference[stream.input_of[r] * std::size_t{width}];
      double scale = 1e-6, error = 0;
      for (int c = 0; c < width; ++c) {
        scale = std::max(scale, std::abs(expected[c]));
        const double e = std::abs(outputs[r * width + c] - expected[c]);
        error = std::isnan(e) ? INFINITY : std::max(error, e);
      }
      if (error > 1e-3 * scale) {
        char text[128];
        std::snprintf(text, sizeof text, "request %zu: answer off by %.3g (largest output %.3g)", r, error,
                      scale);
        return text;
      }
    }
    return {};
  }
};

// play() serves one sample: the repeating stream through the cache when there is one, else the
// independent stream. `threads` is what the runtime runs on (the "threads" figure).
Trial play(Setup& setup, const Serving& serving, Dispatcher& dispatcher, int batch, Cache* cache,
           bool corrupt, unsigned threads) {
  std::fill(setup.outputs.begin(), setup.outputs.end(), NAN);
  if (cache != nullptr) cache->clear();
  const Served& stream = cache != nullptr ? setup.repeating : setup.independent;
  const ServingConfig config{serving.rate, batch,
                             batch == 1 ? std::chrono::microseconds(0) : serving.max_wait};
  const ServingResult served = serve(setup.model, stream.stream, config, dispatcher, setup.outputs, cache);
  if (corrupt) setup.outputs[setup.outputs.size() / 2] += 1.0f;
  const double requests = static_cast<double>(stream.stream.input_of.size());
  Trial trial{requests / served.seconds, setup.check(stream), {}};
  trial.extra = {{"p50 latency ms", percentile(served.latency_ms, 0.50)},
                 {"p99 latency ms", percentile(served.latency_ms, 0.99)},
                 {"mean batch",
                  (requests - static_cast<double>(served.cache_hits)) / std::max<double>(1, served.batches)},
                 {"threads", static_cast<double>(threads)}};
  if (cache != nullptr) {
    trial.extra.emplace_back("cache hit rate %", 100.0 * static_cast<double>(served.cache_hits) / requests);
    trial.extra.emplace_back("compute saved ms", served.saved_ms);
  }
  return trial;
}

}  // namespace

WorkloadResult run_w11_inference(const WorkloadOptions& options) {
  const std::size_t requests = options.quick ? 1'000 : 10'000;
  Serving serving;
  serving.rate = options.parameter("W11", "rate", serving.rate, 1, 1e7);
  serving.max_batch =
      static_cast<int>(options.integer_parameter("W11", "max_batch", serving.max_batch, 1, 4096));
  serving.max_wait = std::chrono::microseconds(
      options.integer_parameter("W11", "max_wait_us", serving.max_wait.count(), 0, 10'000'000));
  const std::string case_name =
      "requests at " + format_count(static_cast<std::uint64_t>(serving.rate)) + "/s";
  WorkloadResult result{
      "W11",
      "batched inference",
      format_count(requests) + " " + case_name + " (independent; the cache variant's over " +
          format_count(requests / 2) + " distinct inputs), MLP 3 x 512, batches <= " +
          std::to_string(serving.max_batch) + " rows / <= " + std::to_string(serving.max_wait.count()) +
          " us; " + std::to_string(options.threads) + " compute threads + the generating thread " +
          "per runtime (nerve parallel.thread_pool_size " + std::to_string(options.threads + 1) +
          ", oneTBB limit " + std::to_string(options.threads + 1) + ", naive pool " +
          std::to_string(options.threads) + " + generator)",
      {},
      {}};
  // The generating thread runs the batcher and sleeps between arrivals; it is nerve's slot 0 and
  // oneTBB's master thread (each counts it, runtimes.hpp), while the naive pool's T threads are all
  // workers besides it. Sizing nerve and oneTBB at T + 1 gives every runtime the same T threads that
  // compute; at T the generator would take one of nerve's and oneTBB's slots but none of the pool's.
  const unsigned total_threads = options.threads + 1;
  WorkloadOptions serving_options = options;
  serving_options.threads = total_threads;
  nerve::Context context(nerve_settings(serving_options));
  TbbLimit tbb_limit(total_threads);
  BlasThreads single(1);
  Setup setup(requests);
  Cache cache(requests);
  auto nerve = nerve_dispatcher(context);
  auto tbb = tbb_dispatcher();
  auto naive = naive_pool(options.threads);
  const std::string unit = "requests/s";
  const bool fault = options.inject_fault;

  std::vector<Variant> variants;
  auto add = [&](const char* runtime, const char* name, Dispatcher* dispatcher, int batch, Cache* with_cache,
                 bool corrupt) {
    variants.push_back({case_name,
                        runtime,
                        name,
                        unit,
                        false,
                        0,
                        {},
                        [&setup, &serving, dispatcher, batch, with_cache, corrupt, total_threads] {
                          return play(setup, serving, *dispatcher, batch, with_cache, corrupt, total_threads);
                        },
                        {}});
  };
  add("nerve", "nerve dynamic batching", nerve.get(), serving.max_batch, nullptr, fault);
  add("nerve", "nerve one task per request", nerve.get(), 1, nullptr, fault);
  add("nerve", "nerve batching + result cache", nerve.get(), serving.max_batch, &cache, fault);
  if (tbb) {
    add("oneTBB", "oneTBB dynamic batching", tbb.get(), serving.max_batch, nullptr, false);
    add("oneTBB", "oneTBB one task per request", tbb.get(), 1, nullptr, false);
  }
  add("naive", "naive pool dynamic batching", naive.get(), serving.max_batch, nullptr, false);
  add("naive", "naive pool one task per request", naive.get(), 1, nullptr, false);
  result.measurements = measure_interleaved(variants, options);
  return result;
}

}  // namespace nerve::bench
