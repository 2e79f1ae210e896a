// w2_fib.cpp — W2: recursive fork-join, fib(30) with one task per call. Every call above the cutoff
// spawns both children as tasks into a fresh group and waits for them (the same shape in all three
// runtimes: nerve::TaskGroup, tbb::task_group, OpenMP task + taskwait). Without a cutoff this is
// ~2.7 million tasks whose bodies are almost empty, so it measures spawn + wait-for-children (the
// waiting thread runs other tasks meanwhile); with the sequential cutoff at n < 20 each task carries
// real work and it measures how well the runtime spreads a recursive tree over the workers.
#include <cstdint>
#include <functional>
#include <string>

#if NERVE_HAVE_TBB
#include <tbb/task_group.h>
#endif

#include "nerve/nerve.hpp"

#include "measure.hpp"
#include "runtimes.hpp"
#include "workload.hpp"

namespace nerve::bench {
namespace {

constexpr int full_n = 30;
constexpr int quick_n = 25;
constexpr int no_cutoff = 2;  // fib(n) = n below 2: every call with n >= 2 spawns
constexpr int cutoff_n = 20;  // WORKLOADS.md: "also with a sequential cutoff at n < 20"
// With the cutoff one fib(30) takes ~2 ms: a sample times this many in a row (the figure stays per
// fib), so that a sample is long enough not to be dominated by waking the workers or by one
// preemption on a shared machine.
constexpr int cutoff_fibs_per_sample = 10;

// serial_fib() is the sequential leaf work below the cutoff; noinline so that every runtime calls
// the very same code.
[[gnu::noinline]] long serial_fib(int n) { return n < 2 ? n : serial_fib(n - 1) + serial_fib(n - 2); }

long expected_fib(int n) {
  long a = 0, b = 1;
  for (int i = 0; i < n; ++i) {
    const long next = a + b;
    a = b;
    b = next;
  }
  return a;
}

// task_count() is the number of calls of the parallel function, i.e. tasks (the root included).
std::uint64_t task_count(int n, int cutoff) {
  if (n < cutoff) return 1;
  return 1 + task_count(n - 1, cutoff) + task_count(n - 2, cutoff);
}

long nerve_fib(nerve::Context& context, int n, int cutoff) {
  if (n < cutoff) return serial_fib(n);
  long x = 0, y = 0;
  nerve::TaskGroup group(context);
  group.spawn([&context, &x, n, cutoff] { x = nerve_fib(context, n - 1, cutoff); });
  group.spawn([&context, &y, n, cutoff] { y = nerve_fib(context, n - 2, cutoff); });
  group.wait();
  return x + y;
}

#if NERVE_HAVE_TBB
long tbb_fib(int n, int cutoff) {
  if (n < cutoff) return serial_fib(n);
  long x = 0, y = 0;
  tbb::task_group group;
  group.run([&x, n, cutoff] { x = tbb_fib(n - 1, cutoff); });
  group.run([&y, n, cutoff] { y = tbb_fib(n - 2, cutoff); });
  group.wait();
  return x + y;
}
#endif

#if NERVE_HAVE_OPENMP
long omp_fib(int n, int cutoff) {
  if (n < cutoff) return serial_fib(n);
  long x = 0, y = 0;
#pragma omp task shared(x) firstprivate(n, cutoff)
  x = omp_fib(n - 1, cutoff);
#pragma omp task shared(y) firstprivate(n, cutoff)
  y = omp_fib(n - 2, cutoff);
#pragma omp taskwait
  return x + y;
}

long omp_fib_root(int n, int cutoff, unsigned threads) {
  long result = 0;
#pragma omp parallel num_threads(threads)
#pragma omp single
  result = omp_fib(n, cutoff);
  return result;
}
#endif

// time_fib() times `count` calls of fib() and returns ms per call; every result is checked.
template <class Fib>
Trial time_fib(int n, int count, Fib&& fib, bool inject_fault = false) {
  const long expected = expected_fib(n);
  std::string failure;
  Stopwatch watch;
  for (int i = 0; i < count; ++i) {
    const long value = fib() + (inject_fault ? 1 : 0);  // inject_fault: tests of the check only
    if (failure.empty()) failure = expect_equal("fib", value, expected);
  }
  const double ns = watch.elapsed_ns();
  return {ns / 1e6 / count, failure};
}

}  // namespace

WorkloadResult run_w2_fib(const WorkloadOptions& options) {
  const int n = options.quick ? quick_n : full_n;
  const std::string fib_name = "fib(" + std::to_string(n) + ")";
  WorkloadResult result{
      "W2", "recursive tasks", fib_name + ", one task per call; and with cutoff n < 20", {}, {}};
  nerve::Context context(nerve_settings(options));
  TbbLimit tbb_limit(options.threads);
  set_openmp_threads(options.threads);
  const unsigned threads = options.threads;
  (void)threads;

  std::vector<Variant> variants;
  for (const int cutoff : {no_cutoff, cutoff_n}) {
    const std::string case_name = cutoff == no_cutoff ? fib_name : fib_name + ", cutoff n<20";
    const std::string suffix = cutoff == no_cutoff ? "" : ", cutoff";
    const std::uint64_t tasks_per_fib = task_count(n, cutoff);
    const int count = cutoff == no_cutoff ? 1 : cutoff_fibs_per_sample;
    // A sample times `count` fibs: its planned tasks are all of theirs (BENCHMARK_JSON.md's `tasks`),
    // while the figure, and so the note's time per task, are per fib.
    const std::uint64_t tasks = tasks_per_fib * static_cast<std::uint64_t>(count);
    auto per_task = [tasks_per_fib](const Measurement& m) {
      char text[64];
      std::snprintf(text, sizeof text, "%.1f ns/task", m.value * 1e6 / static_cast<double>(tasks_per_fib));
      return std::string(text);
    };
    auto add = [&](const char* runtime, const std::string& variant, std::function<long()> fib) {
      variants.push_back({case_name,
                          runtime,
                          variant + suffix,
                          "ms",
                          true,
                          tasks,
                          {},
                          [n, count, fib, inject = options.inject_fault && std::string(runtime) == "nerve"] {
                            return time_fib(n, count, fib, inject);
                          },
                          per_task});
    };
    add("nerve", "nerve TaskGroup", [&context, n, cutoff] { return nerve_fib(context, n, cutoff); });
#if NERVE_HAVE_TBB
    add("oneTBB", "oneTBB task_group", [n, cutoff] { return tbb_fib(n, cutoff); });
#endif
#if NERVE_HAVE_OPENMP
    add("OpenMP", "OpenMP task", [n, cutoff, threads] { return omp_fib_root(n, cutoff, threads); });
#endif
    result.goals.push_back({case_name, {"oneTBB task_group" + suffix}, 1.0, "<= 1.0x oneTBB"});
  }
  result.measurements = measure_interleaved(variants, options);
  return result;
}

}  // namespace nerve::bench
