#include "idle_probe.hpp"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <thread>
#include <vector>

#if NERVE_HAVE_TBB
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>
#endif

#include "nerve/nerve.hpp"

#include "runtimes.hpp"

namespace nerve::bench {
namespace {

constexpr int burst_fork_joins = 2000;
constexpr auto slice = std::chrono::microseconds(250);

double process_cpu_ms() {
  timespec now{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) * 1e3 + static_cast<double>(now.tv_nsec) / 1e6;
}

// sample() sleeps `slices` slices and returns the process CPU time used in each.
std::vector<double> sample(int slices) {
  std::vector<double> used(static_cast<std::size_t>(slices));
  const auto start = std::chrono::steady_clock::now();
  double before = process_cpu_ms();
  for (int k = 0; k < slices; ++k) {
    std::this_thread::sleep_until(start + slice * (k + 1));
    const double after = process_cpu_ms();
    used[static_cast<std::size_t>(k)] = after - before;
    before = after;
  }
  return used;
}

// observe() samples right after a burst and charges to the idle workers whatever CPU exceeds what a
// sleeping thread alone costs per slice (`baseline`, measured with no runtime active).
IdleProfile observe(const std::string& runtime, int window_ms, double baseline) {
  const int slices = window_ms * 1000 / static_cast<int>(slice.count());
  const std::vector<double> used = sample(slices);
  IdleProfile profile{runtime, 0, 0, static_cast<double>(window_ms)};
  const double slice_ms = static_cast<double>(slice.count()) / 1e3;
  for (int k = 0; k < slices; ++k) {
    const double excess = std::max(0.0, used[static_cast<std::size_t>(k)] - baseline);
    profile.busy_cpu_ms += excess;
    if (excess >= 0.2 * slice_ms) profile.busy_until_ms = slice_ms * (k + 1);
  }
  return profile;
}

double baseline_per_slice(int window_ms) {
  const std::vector<double> used = sample(window_ms * 1000 / static_cast<int>(slice.count()));
  std::vector<double> sorted = used;
  std::sort(sorted.begin(), sorted.end());
  return sorted[sorted.size() / 2];
}

}  // namespace

std::vector<IdleProfile> probe_idle_spin(unsigned threads, int window_ms) {
  std::vector<IdleProfile> profiles;
  const double baseline = baseline_per_slice(window_ms);
  WorkloadOptions options;
  options.threads = threads;
  {
    nerve::Context context(nerve_settings(options));
    for (int r = 0; r < burst_fork_joins; ++r)
      nerve::parallel_for(context, 0, threads, 1, [](std::size_t) {});
    profiles.push_back(observe("nerve", window_ms, baseline));
  }
#if NERVE_HAVE_TBB
  {
    TbbLimit limit(threads);
    for (int r = 0; r < burst_fork_joins; ++r)
      tbb::parallel_for(
          0u, threads, [](unsigned) {}, tbb::simple_partitioner());
    profiles.push_back(observe("oneTBB", window_ms, baseline));
  }
#endif
#if NERVE_HAVE_OPENMP
  {
    set_openmp_threads(threads);
    for (int r = 0; r < burst_fork_joins; ++r) {
#pragma omp parallel num_threads(threads)
      {}  // an empty region still forks and joins the team
    }
    profiles.push_back(observe("OpenMP", window_ms, baseline));
  }
#endif
  return profiles;
}

}  // namespace nerve::bench
