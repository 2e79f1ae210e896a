// w1_independent.cpp — W1: N independent tasks, each a relaxed atomic increment, submitted from one
// application thread, then a single wait for all of them. It measures the whole life of a tiny task
// (create, queue, steal or pop, run, retire) and, since one thread submits, how fast the other
// workers can drain what it produces. The count is checked exactly.
#include <atomic>
#include <cstdint>

#if NERVE_HAVE_TBB
#include <tbb/task_group.h>
#endif

#include "nerve/nerve.hpp"

#include "measure.hpp"
#include "runtimes.hpp"
#include "workload.hpp"

namespace nerve::bench {
namespace {

constexpr std::uint64_t full_tasks = 1'000'000;
constexpr std::uint64_t quick_tasks = 100'000;
constexpr std::uint64_t initial_count = 12'345;  // non-zero input, as WORKLOADS.md asks
const char* const case_name = "independent tasks";

// A cache line of its own, so that nothing else the runtimes touch shares it with the counter.
struct alignas(64) Counter {
  std::atomic<std::uint64_t> value{initial_count};
};

Trial finish(const Stopwatch& watch, const Counter& counter, std::uint64_t tasks) {
  const double ns = watch.elapsed_ns();
  return {ns / static_cast<double>(tasks),
          expect_equal("final count", counter.value.load(), initial_count + tasks)};
}

Trial run_nerve(nerve::Context& context, Counter& counter, std::uint64_t tasks, bool inject_fault) {
  Stopwatch watch;
  for (std::uint64_t i = 0; i < tasks; ++i) {
    context.spawn([&counter] { counter.value.fetch_add(1, std::memory_order_relaxed); });
  }
  context.wait_all();
  if (inject_fault) counter.value.fetch_add(1);  // tests of the check only
  return finish(watch, counter, tasks);
}

#if NERVE_HAVE_TBB
Trial run_tbb(Counter& counter, std::uint64_t tasks) {
  Stopwatch watch;
  tbb::task_group group;
  for (std::uint64_t i = 0; i < tasks; ++i) {
    group.run([&counter] { counter.value.fetch_add(1, std::memory_order_relaxed); });
  }
  group.wait();
  return finish(watch, counter, tasks);
}
#endif

#if NERVE_HAVE_OPENMP
Trial run_openmp(Counter& counter, std::uint64_t tasks, unsigned threads) {
  Stopwatch watch;
#pragma omp parallel num_threads(threads)
#pragma omp single
  {
    for (std::uint64_t i = 0; i < tasks; ++i) {
#pragma omp task shared(counter)
      counter.value.fetch_add(1, std::memory_order_relaxed);
    }
#pragma omp taskwait
  }
  return finish(watch, counter, tasks);
}
#endif

}  // namespace

WorkloadResult run_w1_independent(const WorkloadOptions& options) {
  const std::uint64_t tasks = options.quick ? quick_tasks : full_tasks;
  WorkloadResult result{"W1", "independent tasks", "N = " + format_count(tasks) + " tasks", {}, {}};
  nerve::Context context(nerve_settings(options));
  TbbLimit tbb_limit(options.threads);
  set_openmp_threads(options.threads);
  Counter counter;
  auto reset = [&counter] { counter.value.store(initial_count); };
  const unsigned threads = options.threads;

  std::vector<Variant> variants;
  variants.push_back({case_name,
                      "nerve",
                      "nerve spawn",
                      "ns/task",
                      true,
                      tasks,
                      reset,
                      [&] { return run_nerve(context, counter, tasks, options.inject_fault); },
                      {}});
#if NERVE_HAVE_TBB
  variants.push_back({case_name,
                      "oneTBB",
                      "oneTBB task_group",
                      "ns/task",
                      true,
                      tasks,
                      reset,
                      [&] { return run_tbb(counter, tasks); },
                      {}});
#endif
#if NERVE_HAVE_OPENMP
  variants.push_back({case_name,
                      "OpenMP",
                      "OpenMP task",
                      "ns/task",
                      true,
                      tasks,
                      reset,
                      [&] { return run_openmp(counter, tasks, threads); },
                      {}});
#endif
  (void)threads;
  result.measurements = measure_interleaved(variants, options);
  result.goals.push_back(
      {case_name, {"oneTBB task_group", "OpenMP task"}, 0.5, "<= 0.5x min(oneTBB, OpenMP)"});
  return result;
}

}  // namespace nerve::bench
