// scaling.hpp — the scaling runs behind the HTML report's charts: a workload's nerve variants alone,
// at quick sizes, with 1, 2, ... up to --threads workers.
#pragma once

#include <vector>

#include "report.hpp"

namespace nerve::benchmark {

// worker_counts() is 1..threads, thinned to powers of two (plus `threads`) above 8.
std::vector<unsigned> worker_counts(unsigned threads);

std::vector<ScalingSeries> run_scaling(const std::vector<const bench::WorkloadEntry*>& workloads,
                                       const bench::WorkloadOptions& options, Progress& progress);

}  // namespace nerve::benchmark
