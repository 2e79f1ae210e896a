// batched_inference.cpp — serving a small neural network with nerve: requests arrive one row at a
// time, a dynamic batcher groups them into tasks, and a result cache answers repeated requests
// without any work. The benchmark version is W11 (bench/workloads/w11_inference.cpp).
//
// Why batch: one request is a matrix-vector product per layer (memory-bound, and a task per
// request pays the scheduling cost every time); a batch of B requests is a matrix-matrix product
// that reads each weight once for B rows. Why not always wait for a full batch: latency. The batcher
// dispatches the pending batch as one task when it holds max_batch requests or when its oldest
// request has waited max_wait, whichever comes first.
//
// Why cache: many services see the same inputs again. The cache (../common/result_cache.hpp) keys an
// output by the model (a hash of its weights) and a hash of the input's bytes; a hit skips the batch
// altogether. It only fits pure functions of their inputs, which inference with fixed weights is.
//
// Usage: batched_inference [max_batch (16)] [max_wait_us (1000)] [cache: 1 or 0 (1)]
// Prints throughput, p50/p99 latency, the mean batch and the cache's hit rate and saved time; checks
// every response against a serial computation (exit 1 if one differs).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <optional>
#include <random>
#include <span>
#include <thread>
#include <vector>

#include <cblas.h>

#include "nerve/nerve.hpp"

#include "arguments.hpp"
#include "result_cache.hpp"
#include "result_checks.hpp"

namespace {

using Clock = std::chrono::steady_clock;
constexpr int width = 256;              // every layer is width × width
constexpr std::size_t requests = 4000;  // arriving at `rate` per second
constexpr double rate = 8000;
constexpr std::size_t distinct_inputs = 1500;  // fewer than requests: some repeat

// Model: three dense layers with ReLU between them; weights row-major (out × in).
struct Model {
  std::vector<float> weights[3], biases[3];
  std::uint64_t id = 0;  // the cache's kernel id

  Model() {
    std::mt19937 random(7);
    std::normal_distribution<float> normal(0.0f, 1.0f / std::sqrt(float(width)));
    for (int l = 0; l < 3; ++l) {
      weights[l].resize(width * width);
      biases[l].resize(width);
      for (float& w : weights[l]) w = normal(random);
      for (float& b : biases[l]) b = 0.1f * normal(random);
      id ^= nerve_examples::content_hash(std::as_bytes(std::span(weights[l])), l);
    }
  }

  // forward() computes `batch` output rows from `batch` input rows: out = W₃ relu(W₂ relu(W₁ x)).
  void forward(const float* in, int batch, float* out) const {
    std::vector<float> a(in, in + std::size_t(batch) * width), b(a.size());
    for (int l = 0; l < 3; ++l) {
      for (int r = 0; r < batch; ++r)
        std::copy(biases[l].begin(), biases[l].end(), &b[std::size_t(r) * width]);
      // b (batch × width) += a (batch × width) · Wᵀ
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, batch, width, width, 1.0f, a.data(), width,
                  weights[l].data(), width, 1.0f, b.data(), width);
      if (l < 2)
        for (float& v : b) v = std::max(v, 0.0f);
      std::swap(a, b);
    }
    std::copy(a.begin(), a.end(), out);
  }
};

// A request's input row, its arrival time, and where its answer goes.
struct Request {
  const float* input;
  Clock::time_point arrival, done;
};

}  // namespace

int main(int argc, char** argv) {
  const char* const usage = "usage: batched_inference [max_batch >= 1] [max_wait_us >= 0] [cache 0|1]\n";
  if (argc > 1 && nerve_examples::is_help(argv[1])) {
    std::printf("%s", usage);
    return 0;
  }
  const auto argument = [&](int index, unsigned long long fallback) {
    return argc > index ? nerve_examples::parse_count(argv[index]) : std::optional(fallback);
  };
  const auto batch = argument(1, 16), wait_us = argument(2, 1000), cache_flag = argument(3, 1);
  if (argc > 4 || !batch || *batch < 1 || *batch > 4096 || !wait_us || *wait_us > 10'000'000 || !cache_flag ||
      *cache_flag > 1) {
    std::fprintf(stderr, "%s", usage);
    return 2;
  }
  const int max_batch = static_cast<int>(*batch);
  const auto max_wait = std::chrono::microseconds(static_cast<long long>(*wait_us));
  const bool use_cache = *cache_flag == 1;
  openblas_set_num_threads(1);  // one BLAS thread per task: nerve's workers are the parallelism

  const Model model;
  std::mt19937 random(11);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> inputs(distinct_inputs * width);
  for (float& v : inputs) v = uniform(random);
  std::vector<Request> stream(requests);
  for (Request& request : stream) request.input = &inputs[random() % distinct_inputs * width];
  std::vector<float> outputs(requests * width);

  nerve_examples::ResultCache<std::vector<float>> cache(distinct_inputs);
  nerve::Context context;

  // dispatch() turns the pending requests into one task. The task owns its list of request indices;
  // each request's output row and completion time are written by exactly one task.
  std::vector<std::size_t> pending;
  std::size_t batches = 0;
  std::deque<nerve::Task> dispatched;  // batches not yet seen done, oldest first
  auto dispatch = [&] {
    if (pending.empty()) return;
    ++batches;
    dispatched.push_back(context.submit([&, batch = std::move(pending)] {
      const auto start = Clock::now();
      const int rows = static_cast<int>(batch.size());
      std::vector<float> in(batch.size() * width), out(in.size());
      for (int r = 0; r < rows; ++r) std::copy_n(stream[batch[r]].input, width, &in[std::size_t(r) * width]);
      model.forward(in.data(), rows, out.data());
      const auto end = Clock::now();
      for (int r = 0; r < rows; ++r) {
        const float* row = &out[std::size_t(r) * width];
        std::copy_n(row, width, &outputs[batch[r] * width]);
        stream[batch[r]].done = end;
        if (use_cache)  // what a later hit saves: this row's share of the batch
          cache.insert(
              nerve_examples::CacheKey::of(model.id, std::as_bytes(std::span(stream[batch[r]].input, width))),
              std::vector<float>(row, row + width), (end - start) / rows);
      }
    }));
    pending.clear();
  };

  // idle_until() is the batcher's wait for the next arrival or deadline. With worker threads it
  // sleeps. With a single worker slot (parallel.thread_pool_size 1) there are none: slot 0 runs tasks
  // only while an application thread waits inside nerve (context.hpp), so a sleeping batcher would
  // leave every batch to the final wait_all() — latencies of the whole run and no cache hits. There
  // it waits for the dispatched batches instead (wait_for() runs them in slot 0 until `until`), and
  // sleeps only once they are all done.
  const bool batcher_runs_batches = context.worker_count() == 1;
  auto idle_until = [&](Clock::time_point until) {
    while (!dispatched.empty()) {
      if (dispatched.front().done()) {
        dispatched.pop_front();
        continue;
      }
      const auto now = Clock::now();
      if (!batcher_runs_batches || now >= until) break;
      dispatched.front().wait_for(until - now);
    }
    std::this_thread::sleep_until(until);
  };

  // The batcher: request i arrives at start + i / rate. Between arrivals it dispatches a batch whose
  // oldest request has waited max_wait.
  const auto start = Clock::now();
  const auto period = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(1.0 / rate));
  for (std::size_t i = 0; i < requests; ++i) {
    Request& request = stream[i];
    request.arrival = start + static_cast<long>(i) * period;
    while (!pending.empty() && stream[pending.front()].arrival + max_wait <= request.arrival) {
      idle_until(stream[pending.front()].arrival + max_wait);
      dispatch();
    }
    idle_until(request.arrival);
    if (use_cache) {
      const auto key = nerve_examples::CacheKey::of(model.id, std::as_bytes(std::span(request.input, width)));
      if (auto hit = cache.find(key)) {  // answered at once: no task
        std::copy(hit->begin(), hit->end(), &outputs[i * width]);
        request.done = Clock::now();
        continue;
      }
    }
    pending.push_back(i);
    if (static_cast<int>(pending.size()) == max_batch) dispatch();
  }
  dispatch();
  context.wait_all();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();

  // Latency percentiles, and every response checked against the model run on that request alone.
  std::vector<double> latency_ms(requests);
  std::size_t wrong = 0;
  std::vector<float> expected(width);
  for (std::size_t i = 0; i < requests; ++i) {
    latency_ms[i] = std::chrono::duration<double, std::milli>(stream[i].done - stream[i].arrival).count();
    model.forward(stream[i].input, 1, expected.data());
    for (int c = 0; c < width; ++c)
      if (!nerve_examples::close_enough(outputs[i * width + c], expected[c], 1e-4f)) {  // NaN: differs
        ++wrong;
        break;
      }
  }
  std::sort(latency_ms.begin(), latency_ms.end());
  const auto stats = cache.stats();
  std::printf("%zu requests at %.0f/s, MLP 3 x %d, max batch %d, max wait %lld us, %u workers\n", requests,
              rate, width, max_batch, static_cast<long long>(max_wait.count()), context.worker_count());
  std::printf("  throughput %.0f requests/s; latency p50 %.2f ms, p99 %.2f ms; %zu tasks (mean batch %.1f)\n",
              requests / seconds, latency_ms[requests / 2], latency_ms[requests * 99 / 100], batches,
              batches == 0 ? 0.0 : double(requests - stats.hits) / double(batches));
  if (use_cache)
    std::printf("  result cache: hit rate %.1f %%, compute saved %.1f ms\n", 100 * stats.hit_rate(),
                std::chrono::duration<double, std::milli>(stats.saved).count());
  std::printf("  %zu responses differ from the serial computation\n", wrong);
  return wrong == 0 ? 0 : 1;
}
