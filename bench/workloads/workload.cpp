#include "workload.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <stdexcept>
#include <system_error>

#include <fmt/format.h>

namespace nerve::bench {

bool WorkloadResult::verified() const {
  return !measurements.empty() && std::all_of(measurements.begin(), measurements.end(),
                                              [](const Measurement& m) { return m.verified; });
}

std::optional<double> parse_number(std::string_view text) {
  double value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  // from_chars also reads "nan" and "inf": no parameter or percentage means either, and a NaN slips
  // past every range check (NaN < low and NaN > high are both false).
  if (text.empty() || error != std::errc{} || end != text.data() + text.size() || !std::isfinite(value))
    return std::nullopt;
  return value;
}

double WorkloadOptions::parameter(const std::string& workload, const std::string& name, double fallback,
                                  double low, double high) const {
  const std::string key = workload + "." + name;
  const auto found = parameters.find(key);
  if (found == parameters.end()) return fallback;
  const std::optional<double> parsed = parse_number(found->second);
  const double value = parsed.value_or(0);
  if (!parsed || !(value >= low && value <= high)) {
    // Shortest form: an integer range reads [1, 4096], not [1.000000, 4096.000000].
    throw std::invalid_argument(
        fmt::format("{} = '{}': expected a number in [{}, {}]", key, found->second, low, high));
  }
  return value;
}

long long WorkloadOptions::integer_parameter(const std::string& workload, const std::string& name,
                                             long long fallback, long long low, long long high) const {
  const double value = parameter(workload, name, static_cast<double>(fallback), static_cast<double>(low),
                                 static_cast<double>(high));
  if (value != std::floor(value)) {
    throw std::invalid_argument(workload + "." + name + " = '" + parameters.at(workload + "." + name) +
                                "': expected a whole number in [" + std::to_string(low) + ", " +
                                std::to_string(high) + "]");
  }
  return static_cast<long long>(value);
}

std::optional<GoalCheck> check_goal(const WorkloadResult& result, const Goal& goal) {
  const Measurement* nerve = nullptr;
  const Measurement* best = nullptr;
  for (const Measurement& m : result.measurements) {
    if (m.case_name != goal.case_name) continue;
    if (m.runtime == "nerve" && nerve == nullptr &&
        (goal.nerve_variant.empty() || m.variant == goal.nerve_variant))
      nerve = &m;
    if (std::find(goal.baselines.begin(), goal.baselines.end(), m.variant) == goal.baselines.end()) continue;
    if (best == nullptr || (m.lower_is_better ? m.value < best->value : m.value > best->value)) best = &m;
  }
  if (nerve == nullptr || best == nullptr || best->value == 0) return std::nullopt;
  const double ratio = nerve->value / best->value;
  const bool met = nerve->lower_is_better ? ratio <= goal.max_ratio : ratio >= goal.max_ratio;
  return GoalCheck{&goal, nerve, best, ratio, met};
}

namespace {

std::string needs_blas(const nerve::Settings& /*settings*/) {
  return have_blas() ? "" : "built without OpenBLAS and LAPACKE (libopenblas-dev liblapacke-dev)";
}

// The BLAS workloads exist in every build, so that --list and reports can say why they did not run;
// without BLAS their run functions are stubs that are never called (supported() is false).
#if !NERVE_HAVE_BLAS
[[noreturn]] WorkloadResult not_built(const WorkloadOptions&) {
  throw std::logic_error("workload not built");
}
#endif

}  // namespace

bool have_blas() noexcept { return NERVE_HAVE_BLAS != 0; }

#if !NERVE_HAVE_BLAS
WorkloadResult run_w6_cholesky(const WorkloadOptions& o) { return not_built(o); }
WorkloadResult run_w7_gemm(const WorkloadOptions& o) { return not_built(o); }
WorkloadResult run_w10_glm(const WorkloadOptions& o) { return not_built(o); }
WorkloadResult run_w11_inference(const WorkloadOptions& o) { return not_built(o); }
#endif

const std::vector<std::string>& runtime_names() {
  static const std::vector<std::string> names{"nerve",  "oneTBB",       "OpenMP",   "naive",   "BLAS",
                                              "STREAM", "glibc malloc", "jemalloc", "tcmalloc"};
  return names;
}

const std::vector<WorkloadEntry>& workload_registry() {
  static const std::vector<WorkloadEntry> entries = [] {
    std::vector<WorkloadEntry> all = {
        {"W1", "independent tasks", &run_w1_independent},
        {"W2", "recursive tasks", &run_w2_fib},
        {"W3", "dependency chain", &run_w3_chain},
        {"W4", "2D wavefront", &run_w4_wavefront},
        {"W5", "vector add", &run_w5_vector_add},
        {"W6", "tiled Cholesky", &run_w6_cholesky, &needs_blas},
        {"W7", "tiled GEMM", &run_w7_gemm, &needs_blas},
        {"W8", "small allocations", &run_w8_allocations},
        {"W9", "fork-join", &run_w9_fork_join},
        {"W10", "GLM fit (IRLS)", &run_w10_glm, &needs_blas},
        {"W11", "batched inference", &run_w11_inference, &needs_blas, "rate max_batch max_wait_us"},
        {"W12", "transfer overlap", &run_w12_streaming, &needs_opencl_device},
    };
    for (const WorkloadEntry& entry : registered_workloads()) {
      const auto same_id = [&](const WorkloadEntry& known) { return std::string(known.id) == entry.id; };
      if (std::any_of(all.begin(), all.end(), same_id))
        throw std::logic_error(std::string("workload ") + entry.id + " is registered twice");
      all.push_back(entry);
    }
    // Id order: by the number after the W.
    std::stable_sort(all.begin(), all.end(), [](const WorkloadEntry& a, const WorkloadEntry& b) {
      return std::stoi(a.id + 1) < std::stoi(b.id + 1);
    });
    return all;
  }();
  return entries;
}

const std::vector<WorkloadEntry>& core_workloads() {
  static const std::vector<WorkloadEntry> entries = [] {
    std::vector<WorkloadEntry> core;
    for (const WorkloadEntry& entry : workload_registry()) {
      const std::string id = entry.id;
      if (id == "W1" || id == "W2" || id == "W3" || id == "W4" || id == "W8" || id == "W9")
        core.push_back(entry);
    }
    return core;
  }();
  return entries;
}

}  // namespace nerve::bench
