// w9_fork_join.cpp — W9: the cost of one fork-join over all T workers, repeated R times: an
// (almost) empty parallel loop of T iterations, one per worker, with the calling thread taking part.
// It measures waking or reaching the other workers, handing them work and the join barrier — the
// overhead every parallel loop pays once, however large its body.
// Each iteration bumps a per-index counter (its own cache line; the join orders the plain
// increments), so the count of executions is checked exactly without adding contention. It also
// counts the iterations that ran on another thread than the caller: a work-stealing runtime may
// finish a T-iteration loop on the calling thread alone before any worker arrives, which is fast
// but is not a fork-join over all workers — the note reports that share next to the time.
// Variants: nerve::parallel_for(context, 0, T, 1, ...); OpenMP's bare `parallel` region (the goal's
// reference) and `parallel for` over T iterations; tbb::parallel_for over T with simple_partitioner.
// A second case gives each iteration a few microseconds of busy work, so that running the loop on
// the calling thread alone costs T times the body and using the workers pays off: it shows whether
// (and how fast) each runtime really brings its workers in. The goal applies to the empty case.
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#if NERVE_HAVE_TBB
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>
#endif
#if NERVE_HAVE_OPENMP
#include <omp.h>
#endif

#include "nerve/nerve.hpp"

#include "measure.hpp"
#include "runtimes.hpp"
#include "workload.hpp"

namespace nerve::bench {
namespace {

constexpr std::uint64_t full_repetitions = 100'000;
constexpr std::uint64_t quick_repetitions = 10'000;
// The busy case is ~10x longer per fork-join, so it repeats 10x fewer times.
constexpr std::uint64_t busy_divisor = 10;
constexpr auto busy_body = std::chrono::microseconds(5);
const char* const empty_case = "fork-join";
const char* const busy_case = "fork-join, 5 us body";

struct alignas(64) Slot {
  std::uint64_t count = 0;
  std::uint64_t elsewhere = 0;  // executions on another thread than the one that forks
};

// True on the thread that runs the workload (the forking thread).
thread_local bool on_calling_thread = false;

class Counters {
 public:
  explicit Counters(unsigned threads) : slots_(threads) {}
  void reset() {
    for (Slot& slot : slots_) slot = Slot{};
  }
  // bump() records one execution of iteration `i`.
  void bump(std::size_t i) noexcept {
    Slot& slot = slots_[i];
    ++slot.count;
    if (!on_calling_thread) ++slot.elsewhere;
  }
  double elsewhere_share() const {
    std::uint64_t count = 0, elsewhere = 0;
    for (const Slot& slot : slots_) {
      count += slot.count;
      elsewhere += slot.elsewhere;
    }
    return count == 0 ? 0 : static_cast<double>(elsewhere) / static_cast<double>(count);
  }
  // check() is "" when every index ran exactly `expected` times.
  std::string check(std::uint64_t expected) const {
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      if (slots_[i].count != expected) {
        return "index " + std::to_string(i) + " ran " + std::to_string(slots_[i].count) +
               " times, expected " + std::to_string(expected);
      }
    }
    return {};
  }

 private:
  std::vector<Slot> slots_;
};

// busy_for() spins for `duration`: work that only a second thread can overlap.
void busy_for(std::chrono::nanoseconds duration) {
  const auto end = std::chrono::steady_clock::now() + duration;
  while (std::chrono::steady_clock::now() < end) {
  }
}

// One case of the workload: its size, its loop body and what its variants observed.
struct ForkJoinCase {
  ForkJoinCase(std::string case_name, std::uint64_t count, std::chrono::nanoseconds body_time,
               unsigned threads)
      : name(std::move(case_name)), repetitions(count), body(body_time), counters(threads) {}
  std::string name;
  std::uint64_t repetitions;
  std::chrono::nanoseconds body;
  Counters counters;
  std::array<double, 4> shares{};  // per variant: share of iterations run elsewhere, last sample

  void iteration(std::size_t i) {
    counters.bump(i);
    if (body.count() != 0) busy_for(body);
  }

  // time() times the fork-joins of one sample; `variant` indexes `shares`.
  template <class ForkJoin>
  Trial time(std::size_t variant, ForkJoin&& fork_join) {
    counters.reset();
    on_calling_thread = true;
    Stopwatch watch;
    for (std::uint64_t r = 0; r < repetitions; ++r) fork_join();
    const double ns = watch.elapsed_ns();
    shares[variant] = counters.elsewhere_share();
    return {ns / 1e3 / static_cast<double>(repetitions), counters.check(repetitions)};
  }

  std::function<std::string(const Measurement&)> describe(std::size_t variant) const {
    return [this, variant](const Measurement&) {
      char text[96];
      std::snprintf(text, sizeof text, "%.0f%% of iterations ran on another thread", shares[variant] * 100);
      return std::string(text);
    };
  }
};

void add_variants(std::vector<Variant>& variants, ForkJoinCase& c, nerve::Context& context,
                  unsigned threads) {
  const char* unit = "us/fork-join";
  const std::string suffix = c.body.count() != 0 ? ", busy" : "";
  variants.push_back({c.name,
                      "nerve",
                      "nerve parallel_for" + suffix,
                      unit,
                      true,
                      c.repetitions,
                      {},
                      [&c, &context, threads] {
                        return c.time(0, [&] {
                          nerve::parallel_for(context, 0, threads, 1, [&](std::size_t i) { c.iteration(i); });
                        });
                      },
                      c.describe(0)});
#if NERVE_HAVE_OPENMP
  variants.push_back({c.name,
                      "OpenMP",
                      "OpenMP parallel region" + suffix,
                      unit,
                      true,
                      c.repetitions,
                      {},
                      [&c, threads] {
                        return c.time(1, [&] {
#pragma omp parallel num_threads(threads)
                          c.iteration(static_cast<std::size_t>(omp_get_thread_num()));
                        });
                      },
                      c.describe(1)});
  variants.push_back({c.name,
                      "OpenMP",
                      "OpenMP parallel for" + suffix,
                      unit,
                      true,
                      c.repetitions,
                      {},
                      [&c, threads] {
                        return c.time(2, [&] {
#pragma omp parallel for num_threads(threads) schedule(static)
                          for (unsigned i = 0; i < threads; ++i) c.iteration(i);
                        });
                      },
                      c.describe(2)});
#endif
#if NERVE_HAVE_TBB
  variants.push_back({c.name,
                      "oneTBB",
                      "oneTBB parallel_for" + suffix,
                      unit,
                      true,
                      c.repetitions,
                      {},
                      [&c, threads] {
                        return c.time(3, [&] {
                          tbb::parallel_for(
                              0u, threads, [&](unsigned i) { c.iteration(i); }, tbb::simple_partitioner());
                        });
                      },
                      c.describe(3)});
#endif
}

}  // namespace

WorkloadResult run_w9_fork_join(const WorkloadOptions& options) {
  const std::uint64_t repetitions = options.quick ? quick_repetitions : full_repetitions;
  const unsigned threads = options.threads;
  WorkloadResult result{"W9",
                        "fork-join",
                        format_count(repetitions) + " empty parallel loops of " + std::to_string(threads) +
                            " iterations; " + format_count(repetitions / busy_divisor) + " with a 5 us body",
                        {},
                        {}};
  nerve::Context context(nerve_settings(options));
  TbbLimit tbb_limit(threads);
  set_openmp_threads(threads);
  // unique_ptr: the variants keep references to the cases.
  const auto empty =
      std::make_unique<ForkJoinCase>(empty_case, repetitions, std::chrono::nanoseconds(0), threads);
  const auto busy = std::make_unique<ForkJoinCase>(busy_case, repetitions / busy_divisor, busy_body, threads);

  std::vector<Variant> variants;
  add_variants(variants, *empty, context, threads);
  add_variants(variants, *busy, context, threads);
  result.measurements = measure_interleaved(variants, options);
  result.goals.push_back({empty_case, {"OpenMP parallel region"}, 1.0, "<= 1.0x OpenMP parallel region"});
  return result;
}

}  // namespace nerve::bench
