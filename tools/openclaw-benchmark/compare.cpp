// compare.cpp — --compare: each figure of this run against the same figure (workload, case,
// variant) of an earlier run. A change counts only when it is larger than the noise both runs
// measured: |after − before| must exceed max(3 × √(MAD_before² + MAD_after²), 5 % of before). It is
// then reported as how many times faster or slower the figure got (compare_runs()).
// MAD is each figure's median absolute deviation over its repetitions; on a shared machine the 5 %
// floor keeps two quiet runs from flagging sub-noise differences.
#include <cmath>

#include "report.hpp"

namespace nerve::benchmark {

const char* change_name(Change change) {
  switch (change) {
    case Change::better: return "better";
    case Change::worse: return "worse";
    case Change::same: return "same";
    case Change::missing: return "missing";
  }
  return "?";
}

std::vector<Compared> compare_runs(const RunReport& baseline, const RunReport& current) {
  std::vector<Compared> out;
  for (const auto& run : current.workloads) {
    for (const auto& m : run.result.measurements) {
      Compared c{run.result.id, m.case_name, m.variant, m.runtime, m.unit, 0, m.value, 0, 0, Change::missing};
      const Measurement* before = nullptr;
      for (const auto& old_run : baseline.workloads) {
        if (old_run.result.id != run.result.id) continue;
        for (const auto& old : old_run.result.measurements)
          if (old.case_name == m.case_name && old.variant == m.variant && old.unit == m.unit) before = &old;
      }
      if (before != nullptr && before->value > 0 && m.value > 0) {
        c.before = before->value;
        const double noise = 3.0 * std::sqrt(before->mad * before->mad + m.mad * m.mad) / before->value;
        c.threshold = std::max(noise, 0.05);
        const double relative = (m.value - before->value) / before->value;
        // The change is how many times faster (> 0, better) or slower (< 0, worse) the figure got,
        // minus one, the same for times and rates: twice as fast +100%, twice as slow -100%, ten times
        // as slow -900% (a time ten times as long, a rate a tenth of what it was). The relative change
        // in the figure's unit never reached -100% for a rate (a tenth was -90%), so --fail-over could
        // not catch a rate's fall that it caught for a time.
        const double faster = m.lower_is_better ? before->value / m.value : m.value / before->value;
        c.change = faster >= 1 ? faster - 1 : 1 - 1 / faster;
        c.verdict = std::abs(relative) <= c.threshold ? Change::same
                    : c.change > 0                    ? Change::better
                                                      : Change::worse;
      }
      out.push_back(c);
    }
  }
  return out;
}

double worst_nerve_regression(const std::vector<Compared>& comparison) {
  double worst = 0;
  for (const auto& c : comparison)
    if (c.runtime == "nerve" && c.verdict == Change::worse) worst = std::max(worst, -c.change);
  return worst;
}

}  // namespace nerve::benchmark
