// runtimes.hpp — giving every runtime the same number of threads T.
//
// T counts the application thread in all three runtimes: nerve's slot 0 is run by the thread that
// waits, OpenMP's team includes the encountering thread, and oneTBB's max_allowed_parallelism
// includes the master thread. So T = 2 is one extra worker thread in each.
#pragma once

#include <memory>

#include "nerve/config.hpp"
#include "nerve/task.hpp"

#include "workload.hpp"

namespace nerve::bench {

// nerve_settings() is options.settings with parallel.thread_pool_size = options.threads and the
// NERVE_* environment honoured (so a user can try e.g. NERVE_SCHEDULER_SPIN_US on every workload).
nerve::Settings nerve_settings(const WorkloadOptions& options);

// policy_name(): the scheduler.policy value that selects `policy`.
const char* policy_name(nerve::SchedulerPolicy policy);

// TbbLimit caps oneTBB's parallelism at `threads` while it lives (tbb::global_control); it does
// nothing in a build without oneTBB.
class TbbLimit {
 public:
  explicit TbbLimit(unsigned threads);
  ~TbbLimit();
  TbbLimit(const TbbLimit&) = delete;
  TbbLimit& operator=(const TbbLimit&) = delete;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// named() is TaskOptions with only a name (traces and statistics show it).
inline nerve::TaskOptions named(const char* name) {
  nerve::TaskOptions options;
  options.name = name;
  return options;
}

// set_openmp_threads() sets the default team size (omp_set_num_threads); the workloads also pass
// num_threads(T) on every parallel construct. No-op without OpenMP.
void set_openmp_threads(unsigned threads);

}  // namespace nerve::bench
