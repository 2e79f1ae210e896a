#include "measure.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>
#include <thread>

#include <unistd.h>

namespace nerve::bench {
namespace {

double median_of_sorted(const std::vector<double>& sorted) {
  const std::size_t n = sorted.size();
  if (n == 0) return 0;
  return n % 2 == 1 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
}

}  // namespace

Summary summarize(std::vector<double> samples) {
  Summary summary;
  if (samples.empty()) return summary;
  std::sort(samples.begin(), samples.end());
  summary.median = median_of_sorted(samples);
  summary.min = samples.front();
  summary.max = samples.back();
  for (double& sample : samples) sample = std::abs(sample - summary.median);
  std::sort(samples.begin(), samples.end());
  summary.mad = median_of_sorted(samples);
  return summary;
}

int runnable_other_threads() {
  std::error_code error;
  std::filesystem::directory_iterator task("/proc/self/task", error);
  if (error) return -1;
  // The caller's name under /proc/self/task: /proc/thread-self's, since gettid() is the id in this
  // thread's own PID namespace, which differs when /proc is the parent's (unshare -p without
  // --mount-proc, some containers) and would count the caller as another thread.
  std::filesystem::path thread_self = std::filesystem::read_symlink("/proc/thread-self", error);
  const std::string self =
      error ? std::to_string(static_cast<long>(::gettid())) : thread_self.filename().string();
  error.clear();
  int runnable = 0;
  for (; !error && task != std::filesystem::directory_iterator(); task.increment(error)) {
    if (task->path().filename() == self) continue;
    std::ifstream stat(task->path() / "stat");
    std::string line;
    if (!std::getline(stat, line)) continue;  // the thread has just exited
    // "tid (comm) state ...": the name may hold spaces and parentheses; the state follows the last ')'.
    const std::size_t name_end = line.rfind(')');
    if (name_end != std::string::npos && name_end + 2 < line.size() && line[name_end + 2] == 'R') ++runnable;
  }
  return runnable;
}

bool wait_until_quiet(std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (true) {
    if (runnable_other_threads() <= 0) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void settle(const WorkloadOptions& options) {
  if (options.settle_ms <= 0) return;
  std::this_thread::sleep_for(std::chrono::milliseconds(options.settle_ms));
  (void)wait_until_quiet(max_quiet_wait);
}

std::vector<Measurement> measure_interleaved(const std::vector<Variant>& all_variants,
                                             const WorkloadOptions& options) {
  std::vector<Variant> variants;
  for (const Variant& variant : all_variants) {
    const auto& known = runtime_names();
    if (std::find(known.begin(), known.end(), variant.runtime) == known.end()) {
      throw std::logic_error("variant '" + variant.variant + "' belongs to runtime '" + variant.runtime +
                             "', which runtime_names() (bench/workloads/workload.cpp) does not list");
    }
    if (options.runtimes.empty() || std::find(options.runtimes.begin(), options.runtimes.end(),
                                              variant.runtime) != options.runtimes.end())
      variants.push_back(variant);
  }
  std::vector<Measurement> results(variants.size());
  for (std::size_t v = 0; v < variants.size(); ++v) {
    results[v].case_name = variants[v].case_name;
    results[v].runtime = variants[v].runtime;
    results[v].variant = variants[v].variant;
    results[v].unit = variants[v].unit;
    results[v].lower_is_better = variants[v].lower_is_better;
    results[v].tasks = variants[v].tasks;
    results[v].verified = true;
  }
  const int rounds = std::max(0, options.warmup) + std::max(1, options.repetitions);
  std::vector<std::map<std::string, std::vector<double>>> extra(variants.size());
  std::vector<std::vector<std::string>> extra_order(variants.size());
  for (int round = 0; round < rounds; ++round) {
    for (std::size_t v = 0; v < variants.size(); ++v) {
      const Variant& variant = variants[v];
      Measurement& result = results[v];
      if (variant.prepare) variant.prepare();
      settle(options);
      const Trial trial = variant.run();
      if (!trial.failure.empty() && result.verified) {
        result.verified = false;
        result.note = trial.failure;  // the first failure is the informative one
      }
      if (round >= options.warmup) {
        result.samples.push_back(trial.value);
        for (const auto& [name, value] : trial.extra) extra[v][name].push_back(value);
        if (extra_order[v].size() < trial.extra.size()) {
          extra_order[v].clear();
          for (const auto& entry : trial.extra) extra_order[v].push_back(entry.first);
        }
      }
      if (options.on_progress) {
        options.on_progress({variant.case_name, variant.variant,
                             round * static_cast<int>(variants.size()) + static_cast<int>(v) + 1,
                             rounds * static_cast<int>(variants.size())});
      }
    }
  }
  for (std::size_t v = 0; v < variants.size(); ++v) {
    Measurement& result = results[v];
    const Summary summary = summarize(result.samples);
    result.value = summary.median;
    result.min = summary.min;
    result.max = summary.max;
    result.mad = summary.mad;
    for (const std::string& name : extra_order[v])
      result.extra.emplace_back(name, summarize(extra[v][name]).median);
    if (result.verified && variants[v].describe) result.note = variants[v].describe(result);
  }
  return results;
}

std::string format_count(std::uint64_t value) {
  std::string digits = std::to_string(value);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i != 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

void note_share_of(std::vector<Measurement>& measurements, const std::string& reference,
                   const std::string& label) {
  const auto found = std::find_if(measurements.begin(), measurements.end(),
                                  [&](const Measurement& m) { return m.variant == reference; });
  // A reference that failed its check is no reference (its figure may be of a wrong result).
  if (found == measurements.end() || !found->verified || !(found->value > 0)) return;
  const double base = found->value;
  for (Measurement& m : measurements) {
    if (&m == &*found || !m.verified) continue;
    char share[32];
    std::snprintf(share, sizeof share, "%.0f%% of ", 100 * m.value / base);
    m.note += (m.note.empty() ? "" : "; ") + std::string(share) + label;
  }
}

}  // namespace nerve::bench
