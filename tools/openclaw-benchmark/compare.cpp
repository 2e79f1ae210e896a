// compare.cpp — --compare: each figure of this run against the same figure (workload, case,
// variant) of an earlier run. The change is how many times faster or slower the figure got, minus
// one (compare_runs()); it counts only when it is larger than the noise both runs measured:
// |change| must exceed max(3 × √(MAD_before² + MAD_after²) / before, 5 %).
// MAD is each figure's median absolute deviation over its repetitions; on a shared machine the 5 %
// floor keeps two quiet runs from flagging sub-noise differences.
#include <cmath>

#include "report.hpp"

namespace nerve::benchmark {

// The least change that counts, whatever the measured noise: two quiet runs on a shared machine.
constexpr double noise_floor = 0.05;

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
      // A figure with nothing to compare to has the floor as its threshold (BENCHMARK_JSON.md).
      Compared c{run.result.id, m.case_name, m.variant,   m.runtime,      m.unit, 0,
                 m.value,       0,           noise_floor, Change::missing};
      const Measurement* before = nullptr;
      for (const auto& old_run : baseline.workloads) {
        if (old_run.result.id != run.result.id) continue;
        for (const auto& old : old_run.result.measurements)
          if (old.case_name == m.case_name && old.variant == m.variant && old.unit == m.unit) before = &old;
      }
      if (before != nullptr && before->value > 0 && m.value > 0) {
        c.before = before->value;
        const double noise = 3.0 * std::sqrt(before->mad * before->mad + m.mad * m.mad) / before->value;
        c.threshold = std::max(noise, noise_floor);
        // The change is how many times faster (> 0, better) or slower (< 0, worse) the figure got,
        // minus one, the same for times and rates: twice as fast +100%, twice as slow -100%, ten times
        // as slow -900% (a time ten times as long, a rate a tenth of what it was). The relative change
        // in the figure's unit never reached -100% for a rate (a tenth was -90%), so --fail-over could
        // not catch a rate's fall that it caught for a time.
        const double faster = m.lower_is_better ? before->value / m.value : m.value / before->value;
        c.change = faster >= 1 ? faster - 1 : 1 - 1 / faster;
        // The noise limit applies to that change too: a rate's relative fall never reaches 1, so a
        // threshold of 1.2 (noisy figures) kept a rate that fell to a tenth "same" while a time ten
        // times as long was "worse".
        c.verdict = std::abs(c.change) <= c.threshold ? Change::same
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
