// w1_independent.cpp — W1: N independent tasks, each a relaxed atomic increment of its thread's counter,
// submitted from one application thread, then a single wait for all of them. It measures the whole life of a
// tiny task (create, queue, steal or pop, run, retire) and, since one thread submits, how fast the other
// workers can drain what it produces. The count is checked exactly.
#include <array>
#include <atomic>
#include <cstddef>
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

// One counter per thread, each on a cache line of its own. A single shared counter measured its own
// line moving between the cores (the locked add was a third of nerve's samples, each task that ran on
// the other core than the previous one waiting ~100 ns for the line) and so charged a runtime for
// running the tasks in parallel; WORKLOADS.md allows an empty body, and this keeps the count checked.
constexpr std::size_t counter_slots = 64;
struct alignas(64) CounterSlot {
  std::atomic<std::uint64_t> value{0};
};
struct Counter {
  std::array<CounterSlot, counter_slots> slots{};
  void reset() noexcept {
    for (auto& slot : slots) slot.value.store(0, std::memory_order_relaxed);
    slots[0].value.store(initial_count, std::memory_order_relaxed);
  }
  void increment() noexcept {
    static std::atomic<std::size_t> next_slot{0};
    thread_local const std::size_t mine = next_slot.fetch_add(1, std::memory_order_relaxed) % counter_slots;
    slots[mine].value.fetch_add(1, std::memory_order_relaxed);
  }
  std::uint64_t load() const noexcept {
    std::uint64_t sum = 0;
    for (const auto& slot : slots) sum += slot.value.load(std::memory_order_relaxed);
    return sum;
  }
};

Trial finish(const Stopwatch& watch, const Counter& counter, std::uint64_t tasks) {
  const double ns = watch.elapsed_ns();
  return {ns / static_cast<double>(tasks),
          expect_equal("final count", counter.load(), initial_count + tasks)};
}

Trial run_nerve(nerve::Context& context, Counter& counter, std::uint64_t tasks, bool inject_fault) {
  Stopwatch watch;
  for (std::uint64_t i = 0; i < tasks; ++i) {
    context.spawn([&counter] { counter.increment(); });
  }
  context.wait_all();
  if (inject_fault) counter.increment();  // tests of the check only
  return finish(watch, counter, tasks);
}

#if NERVE_HAVE_TBB
Trial run_tbb(Counter& counter, std::uint64_t tasks) {
  Stopwatch watch;
  tbb::task_group group;
  for (std::uint64_t i = 0; i < tasks; ++i) {
    group.run([&counter] { counter.increment(); });
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
      counter.increment();
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
  counter.reset();
  auto reset = [&counter] { counter.reset(); };
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
