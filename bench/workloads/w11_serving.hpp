// w11_serving.hpp — the pieces of W11 (batched inference): a small MLP, a request stream arriving
// at a fixed rate, a dynamic batcher, and the runtimes it dispatches batches to.
//
// The batcher runs on the thread that generates the requests (one producer, no locks): a request
// joins the pending batch when it arrives; the batch is dispatched as one task when it reaches
// max_batch requests or when its oldest request has waited max_wait, whichever comes first.
// max_batch = 1 is "one task per request". Latency is measured from the request's scheduled
// arrival time (so a generator that falls behind counts against the runtime) to the end of the task
// that computed it. With a result cache, the batcher first looks the request up by (model, input
// content): a hit is answered at once and never becomes a task; a computed row is inserted with its
// share of the batch's compute time (what a later hit saves).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "result_cache.hpp"

namespace nerve {
class Context;
}

namespace nerve::bench::serving {

constexpr int width = 512;  // every layer is width × width

// Mlp: three dense layers width → width, ReLU after the first two; float weights (row-major,
// out × in) and biases.
struct Mlp {
  std::vector<float> weights[3], biases[3];
  std::uint64_t id = 0;  // the cache's kernel id: a hash of the weights
  explicit Mlp(std::uint64_t seed);
  // forward() computes `batch` output rows from `batch` input rows (single-threaded BLAS: sgemm,
  // or sgemv for one row).
  void forward(const float* in, int batch, float* out) const;
  // reference() is the same in double precision, for the checks.
  std::vector<double> reference(const float* in, int batch) const;
};

// The request stream: request i carries distinct input input_of[i] (width floats in `inputs`). With
// distinct == requests, request i carries input i (no repeats); with fewer, a random one of them.
struct Stream {
  std::vector<float> inputs;
  std::vector<std::uint32_t> input_of;
  Stream(std::size_t requests, std::size_t distinct, std::uint64_t seed);
  const float* input(std::size_t request) const { return &inputs[input_of[request] * width]; }
};

struct ServingConfig {
  double rate = 0;  // requests per second
  int max_batch = 1;
  std::chrono::microseconds max_wait{0};
};

struct ServingResult {
  std::vector<double> latency_ms;  // per request
  double seconds = 0;              // first arrival to last completion
  std::uint64_t batches = 0;
  std::uint64_t cache_hits = 0;
  double saved_ms = 0;  // compute time the cache hits saved
};

// Dispatcher: where batches run. dispatch() may be called from the generating thread only; drain()
// waits for everything dispatched.
class Dispatcher {
 public:
  virtual ~Dispatcher() = default;
  virtual void dispatch(std::function<void()> job) = 0;
  virtual void drain() = 0;
};
std::unique_ptr<Dispatcher> nerve_dispatcher(nerve::Context& context);
std::unique_ptr<Dispatcher> tbb_dispatcher();  // nullptr without oneTBB
// A hand-written pool: `threads` std::threads taking jobs from one mutex-protected queue.
std::unique_ptr<Dispatcher> naive_pool(unsigned threads);

using Cache = nerve_examples::ResultCache<std::vector<float>>;

// serve() plays the stream through the batcher into `dispatcher`; outputs (requests × width) receive
// every response. `cache` may be null.
ServingResult serve(const Mlp& model, const Stream& stream, const ServingConfig& config,
                    Dispatcher& dispatcher, std::vector<float>& outputs, Cache* cache);

}  // namespace nerve::bench::serving
