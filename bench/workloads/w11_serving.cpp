#include "w11_serving.hpp"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <span>
#include <thread>

#include <sys/prctl.h>

#include <cblas.h>

#if NERVE_HAVE_TBB
#include <tbb/task_group.h>
#endif

#include "nerve/nerve.hpp"

#include "blas_support.hpp"
#include "runtimes.hpp"

namespace nerve::bench::serving {
namespace {

using Clock = std::chrono::steady_clock;

void dense(const std::vector<float>& w, const std::vector<float>& b, const float* in, int batch, float* out,
           bool relu) {
  if (batch == 1) {
    cblas_sgemv(CblasRowMajor, CblasNoTrans, width, width, 1.0f, w.data(), width, in, 1, 0.0f, out, 1);
  } else {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, batch, width, width, 1.0f, in, width, w.data(),
                width, 0.0f, out, width);
  }
  for (int r = 0; r < batch; ++r)
    for (int c = 0; c < width; ++c) {
      const float v = out[r * width + c] + b[c];
      out[r * width + c] = relu ? std::max(v, 0.0f) : v;
    }
}

class NerveDispatcher final : public Dispatcher {
 public:
  explicit NerveDispatcher(nerve::Context& context) : context_(context) {}
  void dispatch(std::function<void()> job) override {
    static const nerve::TaskOptions options = named("inference batch");
    context_.spawn(options, std::move(job));
  }
  void drain() override { context_.wait_all(); }

 private:
  nerve::Context& context_;
};

#if NERVE_HAVE_TBB
class TbbDispatcher final : public Dispatcher {
 public:
  TbbDispatcher() = default;
  // task_group's destructor may throw (when tasks are still running); ours runs after drain().
  ~TbbDispatcher() noexcept override = default;
  void dispatch(std::function<void()> job) override { group_.run(std::move(job)); }
  void drain() override { group_.wait(); }

 private:
  tbb::task_group group_;
};
#endif

class NaivePool final : public Dispatcher {
 public:
  explicit NaivePool(unsigned threads) {
    for (unsigned t = 0; t < std::max(1u, threads); ++t) workers_.emplace_back([this] { work(); });
  }
  ~NaivePool() override {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    ready_.notify_all();
    for (std::thread& worker : workers_) worker.join();
  }
  void dispatch(std::function<void()> job) override {
    {
      std::lock_guard lock(mutex_);
      jobs_.push_back(std::move(job));
      ++pending_;
    }
    ready_.notify_one();
  }
  void drain() override {
    std::unique_lock lock(mutex_);
    idle_.wait(lock, [this] { return pending_ == 0; });
  }

 private:
  void work() {
    std::unique_lock lock(mutex_);
    for (;;) {
      ready_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;
      auto job = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      job();
      lock.lock();
      if (--pending_ == 0) idle_.notify_all();
    }
  }
  std::mutex mutex_;
  std::condition_variable ready_, idle_;
  std::deque<std::function<void()>> jobs_;
  std::size_t pending_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace

Mlp::Mlp(std::uint64_t seed) {
  const float scale = 2.0f / std::sqrt(static_cast<float>(width));
  for (int l = 0; l < 3; ++l) {
    weights[l].resize(width * width);
    biases[l].resize(width);
    for (std::size_t i = 0; i < weights[l].size(); ++i)
      weights[l][i] = scale * static_cast<float>(uniform(seed + l, i) - 0.5);
    for (int c = 0; c < width; ++c) biases[l][c] = 0.1f * static_cast<float>(uniform(seed + 10 + l, c) - 0.5);
    id ^= nerve_examples::content_hash(std::as_bytes(std::span(weights[l])), seed + l);
  }
}

void Mlp::forward(const float* in, int batch, float* out) const {
  thread_local std::vector<float> h1, h2;
  h1.resize(static_cast<std::size_t>(batch) * width);
  h2.resize(h1.size());
  dense(weights[0], biases[0], in, batch, h1.data(), true);
  dense(weights[1], biases[1], h1.data(), batch, h2.data(), true);
  dense(weights[2], biases[2], h2.data(), batch, out, false);
}

std::vector<double> Mlp::reference(const float* in, int batch) const {
  std::vector<double> x(in, in + static_cast<std::size_t>(batch) * width), h(x.size());
  for (int l = 0; l < 3; ++l) {
    const std::vector<double> w(weights[l].begin(), weights[l].end());
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, batch, width, width, 1.0, x.data(), width, w.data(),
                width, 0.0, h.data(), width);
    for (int r = 0; r < batch; ++r)
      for (int c = 0; c < width; ++c) {
        const double v = h[r * width + c] + biases[l][c];
        h[r * width + c] = l < 2 ? std::max(v, 0.0) : v;
      }
    std::swap(x, h);
  }
  return x;
}

Stream::Stream(std::size_t requests, std::size_t distinct, std::uint64_t seed)
    : inputs(distinct * width), input_of(requests) {
  for (std::size_t i = 0; i < inputs.size(); ++i) inputs[i] = static_cast<float>(uniform(seed, i) * 2 - 1);
  // As many inputs as requests: request r carries row r, so every request is distinct (drawing them
  // at random would repeat about a third of the rows). Fewer: each request draws one at random.
  for (std::size_t r = 0; r < requests; ++r) {
    input_of[r] = distinct == requests
                      ? static_cast<std::uint32_t>(r)
                      : static_cast<std::uint32_t>(uniform(seed + 1, r) * static_cast<double>(distinct)) %
                            static_cast<std::uint32_t>(distinct);
  }
}

std::unique_ptr<Dispatcher> nerve_dispatcher(nerve::Context& context) {
  return std::make_unique<NerveDispatcher>(context);
}
std::unique_ptr<Dispatcher> tbb_dispatcher() {
#if NERVE_HAVE_TBB
  return std::make_unique<TbbDispatcher>();
#else
  return nullptr;
#endif
}
std::unique_ptr<Dispatcher> naive_pool(unsigned threads) { return std::make_unique<NaivePool>(threads); }

ServingResult serve(const Mlp& model, const Stream& stream, const ServingConfig& config,
                    Dispatcher& dispatcher, std::vector<float>& outputs, Cache* cache) {
  // Sleeping until the next arrival must wake close to it: the default 50 µs timer slack is a third
  // of the gap between two arrivals at 8,000 requests/s.
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
  const std::size_t requests = stream.input_of.size();
  std::vector<Clock::time_point> done(requests);
  std::atomic<std::uint64_t> batches{0};
  const auto period = std::chrono::duration<double>(1.0 / config.rate);
  const Clock::time_point start = Clock::now() + std::chrono::milliseconds(1);
  auto arrival = [&](std::size_t i) {
    return start + std::chrono::duration_cast<Clock::duration>(period * static_cast<double>(i));
  };
  std::vector<std::uint32_t> pending;
  Clock::time_point oldest{};
  auto flush = [&] {
    if (pending.empty()) return;
    dispatcher.dispatch([&model, &stream, &outputs, &done, &batches, cache, batch = std::move(pending)] {
      const auto begin = Clock::now();
      const int count = static_cast<int>(batch.size());
      thread_local std::vector<float> in, out;
      in.resize(batch.size() * width);
      out.resize(in.size());
      for (int r = 0; r < count; ++r) std::copy_n(stream.input(batch[r]), width, &in[r * width]);
      model.forward(in.data(), count, out.data());
      const auto end = Clock::now();
      for (int r = 0; r < count; ++r) {
        std::copy_n(&out[r * width], width, &outputs[batch[r] * std::size_t{width}]);
        done[batch[r]] = end;
      }
      if (cache != nullptr) {
        for (int r = 0; r < count; ++r) {
          const float* row = stream.input(batch[r]);
          cache->insert(nerve_examples::CacheKey::of(model.id, std::as_bytes(std::span(row, width))),
                        std::vector<float>(out.data() + r * width, out.data() + (r + 1) * width),
                        (end - begin) / count);
        }
      }
      batches.fetch_add(1, std::memory_order_relaxed);
    });
    pending = {};
  };
  for (std::size_t i = 0; i < requests; ++i) {
    const Clock::time_point due = arrival(i);
    for (;;) {
      const Clock::time_point deadline = pending.empty() ? due : std::min(due, oldest + config.max_wait);
      if (Clock::now() < deadline) std::this_thread::sleep_until(deadline);
      if (!pending.empty() && Clock::now() >= oldest + config.max_wait) flush();
      if (Clock::now() >= due) break;
    }
    if (cache != nullptr) {
      const float* row = stream.input(i);
      if (auto hit =
              cache->find(nerve_examples::CacheKey::of(model.id, std::as_bytes(std::span(row, width))))) {
        std::copy(hit->begin(), hit->end(), &outputs[i * width]);
        done[i] = Clock::now();
        continue;
      }
    }
    if (pending.empty()) oldest = due;
    pending.push_back(static_cast<std::uint32_t>(i));
    if (static_cast<int>(pending.size()) >= config.max_batch) flush();
  }
  flush();
  dispatcher.drain();

  ServingResult result;
  result.latency_ms.resize(requests);
  Clock::time_point last = start;
  for (std::size_t i = 0; i < requests; ++i) {
    result.latency_ms[i] = std::chrono::duration<double, std::milli>(done[i] - arrival(i)).count();
    last = std::max(last, done[i]);
  }
  result.seconds = std::chrono::duration<double>(last - start).count();
  result.batches = batches.load();
  if (cache != nullptr) {
    const auto stats = cache->stats();
    result.cache_hits = stats.hits;
    result.saved_ms = std::chrono::duration<double, std::milli>(stats.saved).count();
  }
  return result;
}

}  // namespace nerve::bench::serving
