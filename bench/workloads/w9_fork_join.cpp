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
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
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
// A sample stops early once it has run this long. Normally a sample takes ~0.1 s (quick: ~10 ms);
// but on an oversubscribed machine a team that must have every thread on a core at once (OpenMP)
// can wait a whole scheduler time slice per fork-join (we saw 12 ms), and 10^5 of those would take
// twenty minutes. The figure stays per fork-join, over the ones that ran.
constexpr auto full_sample_budget = std::chrono::seconds(2);
constexpr auto quick_sample_budget = std::chrono::milliseconds(100);
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
  // totals() is {executions, executions on another thread} since reset().
  std::pair<std::uint64_t, std::uint64_t> totals() const {
    std::uint64_t count = 0, elsewhere = 0;
    for (const Slot& slot : slots_) {
      count += slot.count;
      elsewhere += slot.elsewhere;
    }
    return {count, elsewhere};
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
               std::chrono::nanoseconds sample_budget, unsigned threads)
      : name(std::move(case_name)),
        repetitions(count),
        body(body_time),
        budget(sample_budget),
        counters(threads) {}
  std::string name;
  std::uint64_t repetitions;
  std::chrono::nanoseconds body;
  std::chrono::nanoseconds budget;  // time after which a sample stops early
  Counters counters;
  bool inject_fault = false;  // nerve's variant miscounts (tests of the check only)
  // Per variant, over all its samples: iterations run, and run on another thread than the caller;
  // and the fewest fork-joins a sample ran (less than `repetitions` when the budget cut it short).
  std::array<double, 4> iterations{}, elsewhere{};
  std::array<std::uint64_t, 4> fewest{};

  void iteration(std::size_t i) {
    counters.bump(i);
    if (body.count() != 0) busy_for(body);
  }

  // time() times the fork-joins of one sample; `variant` indexes the share counters.
  template <class ForkJoin>
  Trial time(std::size_t variant, const ForkJoin& fork_join) {
    counters.reset();
    on_calling_thread = true;
    const auto deadline = std::chrono::steady_clock::now() + budget;
    Stopwatch watch;
    std::uint64_t done = 0;
    while (done < repetitions) {
      fork_join();
      // One clock read per 64 fork-joins: ~0.3 ns each, below the resolution of the figures.
      if (++done % 64 == 0 && std::chrono::steady_clock::now() > deadline) break;
    }
    const double ns = watch.elapsed_ns();
    const auto [count, away] = counters.totals();
    iterations[variant] += static_cast<double>(count);
    elsewhere[variant] += static_cast<double>(away);
    fewest[variant] = fewest[variant] == 0 ? done : std::min(fewest[variant], done);
    if (inject_fault && variant == 0) counters.bump(0);
    return {ns / 1e3 / static_cast<double>(done), counters.check(done)};
  }

  std::function<std::string(const Measurement&)> describe(std::size_t variant) const {
    return [this, variant](const Measurement&) {
      const double share = iterations[variant] == 0 ? 0 : elsewhere[variant] / iterations[variant];
      char text[160];
      int length =
          std::snprintf(text, sizeof text, "%.0f%% of iterations ran on another thread", share * 100);
      if (fewest[variant] < repetitions) {
        std::snprintf(text + length, sizeof text - static_cast<std::size_t>(length),
                      "; time budget hit: as few as %llu fork-joins in a sample",
                      static_cast<unsigned long long>(fewest[variant]));
      }
      return std::string(text);
    };
  }
};

// add() appends one variant of case `c`; `index` is its slot in the case's share counters.
template <class ForkJoin>
void add(std::vector<Variant>& variants, ForkJoinCase& c, std::size_t index, const char* runtime,
         const std::string& variant, ForkJoin fork_join) {
  const std::string suffix = c.body.count() != 0 ? ", busy" : "";
  variants.push_back({c.name,
                      runtime,
                      variant + suffix,
                      "us/fork-join",
                      true,
                      c.repetitions,
                      {},
                      [&c, index, fork_join] { return c.time(index, fork_join); },
                      c.describe(index)});
}

void add_variants(std::vector<Variant>& variants, ForkJoinCase& c, nerve::Context& context,
                  unsigned threads) {
  add(variants, c, 0, "nerve", "nerve parallel_for", [&c, &context, threads] {
    nerve::parallel_for(context, 0, threads, 1, [&c](std::size_t i) { c.iteration(i); });
  });
#if NERVE_HAVE_OPENMP
  add(variants, c, 1, "OpenMP", "OpenMP parallel region", [&c, threads] {
#pragma omp parallel num_threads(threads)
    c.iteration(static_cast<std::size_t>(omp_get_thread_num()));
  });
  add(variants, c, 2, "OpenMP", "OpenMP parallel for", [&c, threads] {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (unsigned i = 0; i < threads; ++i) c.iteration(i);
  });
#endif
#if NERVE_HAVE_TBB
  add(variants, c, 3, "oneTBB", "oneTBB parallel_for", [&c, threads] {
    tbb::parallel_for(
        0u, threads, [&c](unsigned i) { c.iteration(i); }, tbb::simple_partitioner());
  });
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
  const std::chrono::nanoseconds budget = options.quick ? quick_sample_budget : full_sample_budget;
  const auto empty =
      std::make_unique<ForkJoinCase>(empty_case, repetitions, std::chrono::nanoseconds(0), budget, threads);
  const auto busy =
      std::make_unique<ForkJoinCase>(busy_case, repetitions / busy_divisor, busy_body, budget, threads);

  empty->inject_fault = options.inject_fault;
  std::vector<Variant> variants;
  add_variants(variants, *empty, context, threads);
  add_variants(variants, *busy, context, threads);
  result.measurements = measure_interleaved(variants, options);
  result.goals.push_back({empty_case, {"OpenMP parallel region"}, 1.0, "<= 1.0x OpenMP parallel region"});
  return result;
}

}  // namespace nerve::bench
