// idle_probe.hpp — how long each runtime's workers keep burning CPU after their work runs out.
//
// On a 2-core machine a runtime whose idle workers still spin steals a core from whichever runtime
// is timed next. probe_idle_spin() runs a burst of fork-joins on one runtime, then sleeps on the
// calling thread in 250 us slices and reads the process's CPU time: whatever CPU the process uses
// beyond what a sleeping thread costs on its own (measured first, with no runtime active) is idle
// workers spinning. This is the evidence behind
// WorkloadOptions::settle_ms.
#pragma once

#include <string>
#include <vector>

namespace nerve::bench {

struct IdleProfile {
  std::string runtime;
  double busy_cpu_ms = 0;    // CPU the idle workers used after the burst, over the whole window
  double busy_until_ms = 0;  // end of the last slice in which they used >= 20% of a core
  double window_ms = 0;
};

// probe_idle_spin() profiles nerve, then oneTBB and OpenMP where built in; `threads` as for the
// workloads. Takes about (runtimes x window_ms) plus the bursts.
std::vector<IdleProfile> probe_idle_spin(unsigned threads, int window_ms = 50);

}  // namespace nerve::bench
