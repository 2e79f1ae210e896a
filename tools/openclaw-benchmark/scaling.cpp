#include "scaling.hpp"

#include <exception>

namespace nerve::benchmark {

std::vector<unsigned> worker_counts(unsigned threads) {
  std::vector<unsigned> counts;
  for (unsigned t = 1; t <= threads; t = t < 8 ? t + 1 : t * 2) counts.push_back(t);
  if (counts.back() != threads) counts.push_back(threads);
  return counts;
}

std::vector<ScalingSeries> run_scaling(const std::vector<const bench::WorkloadEntry*>& workloads,
                                       const bench::WorkloadOptions& options, Progress& progress) {
  std::vector<ScalingSeries> all;
  for (const auto* entry : workloads) {
    ScalingSeries series;
    series.workload = entry->id;
    for (unsigned threads : worker_counts(options.threads)) {
      bench::WorkloadOptions scaled = options;
      scaled.threads = threads;
      scaled.quick = true;  // small sizes: this is about the shape of the curve
      scaled.runtimes = {"nerve"};
      scaled.repetitions = std::min(options.repetitions, 3);
      scaled.inject_fault = false;
      scaled.on_progress = {};  // the "scaling:" line says what runs; the bar would name the last workload
      progress.message("scaling: " + std::string(entry->id) + " with " + std::to_string(threads) +
                       " worker(s)");
      ScalingSeries::Point point;
      point.threads = threads;
      try {
        const bench::WorkloadResult result = entry->run(scaled);
        if (result.measurements.empty()) continue;
        const Measurement& m = result.measurements.front();  // the first case's nerve figure
        series.case_name = m.case_name;
        series.variant = m.variant;
        series.unit = m.unit;
        series.lower_is_better = m.lower_is_better;
        point.value = m.value;
        point.mad = m.mad;
        point.verified = m.verified;
      } catch (const std::exception& error) {
        progress.message("scaling: " + std::string(entry->id) + ": " + error.what());
      }
      series.points.push_back(point);
    }
    all.push_back(std::move(series));
  }
  return all;
}

}  // namespace nerve::benchmark
