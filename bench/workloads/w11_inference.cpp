// w11_inference.cpp — W11: batched inference. 10,000 requests (quick: 1,000), each one input row of
// a 3-layer MLP 512 wide (w11_serving.hpp), arrive at a fixed rate of 12,000 requests/s; the serving
// side either batches them dynamically into tasks (at most 32 rows, a batch waits at most 1 ms for
// more) or runs one task per request. The stream repeats inputs — 10,000 requests over 5,000
// distinct rows, drawn at random, as a service sees popular queries again — so a third nerve
// variant puts the result cache (examples/common/result_cache.hpp) in front of the batcher.
// Variants (T threads compute; the requests are generated, batched and looked up on one more thread
// that sleeps between arrivals — nerve's pool and oneTBB's limit are T + 1 so that T compute):
//   nerve batching / nerve per request / nerve batching + cache   tasks via Context::spawn
//   oneTBB batching / per request                                  tbb::task_group::run
//   naive pool batching / per request                              T std::threads, one locked queue
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

struct Setup {
  Mlp model{1100};
  Stream stream;
  std::vector<double> reference;  // distinct × width
  std::vector<float> outputs;

  explicit Setup(std::size_t requests) : stream(requests, requests / 2, 1200), outputs(requests * width) {
    const std::size_t distinct = stream.inputs.size() / width;
    reference = model.reference(stream.inputs.data(), static_cast<int>(distinct));
  }
  std::string check() const {
    for (std::size_t r = 0; r < stream.input_of.size(); ++r) {
      const double* expected = &reference[stream.input_of[r] * std::size_t{width}];
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

Trial play(Setup& setup, const Serving& serving, Dispatcher& dispatcher, int batch, Cache* cache,
           bool corrupt) {
  std::fill(setup.outputs.begin(), setup.outputs.end(), NAN);
  if (cache != nullptr) cache->clear();
  const ServingConfig config{serving.rate, batch,
                             batch == 1 ? std::chrono::microseconds(0) : serving.max_wait};
  const ServingResult served = serve(setup.model, setup.stream, config, dispatcher, setup.outputs, cache);
  if (corrupt) setup.outputs[setup.outputs.size() / 2] += 1.0f;
  const double requests = static_cast<double>(setup.stream.input_of.size());
  Trial trial{requests / served.seconds, setup.check(), {}};
  trial.extra = {{"p50 latency ms", percentile(served.latency_ms, 0.50)},
                 {"p99 latency ms", percentile(served.latency_ms, 0.99)},
                 {"mean batch",
                  (requests - static_cast<double>(served.cache_hits)) / std::max<double>(1, served.batches)}};
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
  WorkloadResult result{"W11",
                        "batched inference",
                        format_count(requests) + " " + case_name +
                            ", MLP 3 x 512, batches <= " + std::to_string(serving.max_batch) +
                            " rows / <= " + std::to_string(serving.max_wait.count()) + " us, " +
                            format_count(requests / 2) + " distinct inputs",
                        {},
                        {}};
  WorkloadOptions serving_options = options;
  serving_options.threads = options.threads + 1;  // + the generating thread, which does not compute
  nerve::Context context(nerve_settings(serving_options));
  TbbLimit tbb_limit(options.threads + 1);
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
                        [&setup, &serving, dispatcher, batch, with_cache, corrupt] {
                          return play(setup, serving, *dispatcher, batch, with_cache, corrupt);
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
