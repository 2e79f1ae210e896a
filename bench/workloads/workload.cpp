#include "workload.hpp"

#include <algorithm>

namespace nerve::bench {

bool WorkloadResult::verified() const {
  return std::all_of(measurements.begin(), measurements.end(),
                     [](const Measurement& m) { return m.verified; });
}

std::optional<GoalCheck> check_goal(const WorkloadResult& result, const Goal& goal) {
  const Measurement* nerve = nullptr;
  const Measurement* best = nullptr;
  for (const Measurement& m : result.measurements) {
    if (m.case_name != goal.case_name) continue;
    if (m.runtime == "nerve" && nerve == nullptr) nerve = &m;
    if (std::find(goal.baselines.begin(), goal.baselines.end(), m.variant) == goal.baselines.end()) continue;
    if (best == nullptr || (m.lower_is_better ? m.value < best->value : m.value > best->value)) best = &m;
  }
  if (nerve == nullptr || best == nullptr || best->value == 0) return std::nullopt;
  const double ratio = nerve->value / best->value;
  const bool met = nerve->lower_is_better ? ratio <= goal.max_ratio : ratio >= goal.max_ratio;
  return GoalCheck{&goal, nerve, best, ratio, met};
}

const std::vector<WorkloadEntry>& core_workloads() {
  static const std::vector<WorkloadEntry> entries = {
      {"W1", "independent tasks", &run_w1_independent}, {"W2", "recursive tasks", &run_w2_fib},
      {"W3", "dependency chain", &run_w3_chain},        {"W4", "2D wavefront", &run_w4_wavefront},
      {"W5", "vector add", &run_w5_vector_add},         {"W8", "small allocations", &run_w8_allocations},
      {"W9", "fork-join", &run_w9_fork_join},           {"W12", "transfer overlap", &run_w12_streaming},
  };
  return entries;
}

}  // namespace nerve::bench
