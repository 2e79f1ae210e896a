// environment.cpp — what the report says about the machine, the versions and the configuration.
#include <ctime>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include <unistd.h>

#include "nerve/nerve.hpp"

#include "git_commit.hpp"
#include "report.hpp"
#include "workloads/workload.hpp"
#if NERVE_HAVE_TBB
#include <tbb/version.h>
#endif
#if NERVE_HAVE_OPENMP
#include <omp.h>
#endif
#if NERVE_HAVE_BLAS
#include "workloads/blas_support.hpp"
#endif

namespace nerve::benchmark {
namespace {

std::string cpu_model() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "unknown CPU";
}

const char* source_name(ConfigSource source) {
  switch (source) {
    case ConfigSource::default_value: return "default";
    case ConfigSource::file: return "file";
    case ConfigSource::environment: return "environment";
    case ConfigSource::api: return "api";
  }
  return "unknown";
}

}  // namespace

double load_average() {
  std::ifstream loadavg("/proc/loadavg");
  double load = -1;
  loadavg >> load;
  return load;
}

std::string now_utc() {
  const std::time_t now = std::time(nullptr);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return text;
}

void describe_machine(RunReport& report, const nerve::Settings& settings,
                      const std::map<std::string, std::string>& set_by) {
  report.tool_version = NERVE_VERSION_STRING;
  report.git_commit = NERVE_GIT_COMMIT;
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  report.hostname = host;
  report.cpu_model = cpu_model();
  report.hardware_threads = std::thread::hardware_concurrency();

  const nerve::Config config = nerve::Config::load(settings);
  for (const auto& entry : config.entries) {
    // nerve's own description of an API origin is "api" alone: the option that made the tool set the
    // value says where it was set, as a file's line or a variable's name does.
    const auto option = set_by.find(entry.key);
    const bool by_option = entry.origin.source == ConfigSource::api && option != set_by.end();
    const std::string origin = entry.origin.source == ConfigSource::default_value
                                   ? "default"
                                   : std::string(source_name(entry.origin.source)) + " (" +
                                         (by_option ? option->second : entry.origin.describe()) + ")";
    report.config.push_back({entry.key, entry.value, origin});
  }
  const nerve::Topology topology = nerve::Topology::discover(config);
  report.topology_description = topology.description();
  report.packages = static_cast<int>(topology.packages().size());
  report.numa_nodes = static_cast<int>(topology.numa_nodes().size());
  report.cores = static_cast<int>(topology.cores().size());
  report.pus = topology.pu_count();
  std::set<std::pair<int, std::uint64_t>> seen;
  for (const auto& cache : topology.caches()) seen.insert({cache.level, cache.size_bytes});
  report.caches.assign(seen.begin(), seen.end());

  report.versions.emplace_back("nerve", NERVE_VERSION_STRING);
  report.versions.emplace_back("compiler", "GCC " __VERSION__);
#if NERVE_HAVE_TBB
  report.versions.emplace_back("oneTBB", TBB_VERSION_STRING);
#else
  report.versions.emplace_back("oneTBB", "");
#endif
#if NERVE_HAVE_OPENMP
  report.versions.emplace_back("OpenMP", std::to_string(_OPENMP));
#else
  report.versions.emplace_back("OpenMP", "");
#endif
#if NERVE_HAVE_BLAS
  report.versions.emplace_back("OpenBLAS", bench::blas_description());
#else
  report.versions.emplace_back("OpenBLAS", "");
#endif
}

bool RunReport::named(const Skipped& workload) const {
  return std::find(only.begin(), only.end(), workload.id) != only.end();
}

std::vector<const Skipped*> RunReport::not_run() const {
  std::vector<const Skipped*> workloads_not_run;
  for (const auto& s : skipped)
    if (named(s)) workloads_not_run.push_back(&s);
  return workloads_not_run;
}

std::size_t RunReport::failed_results() const {
  std::size_t failed = 0;
  for (const auto& run : workloads)
    for (const auto& m : run.result.measurements) failed += !m.verified;
  for (const auto& series : scaling)
    for (const auto& point : series.points) failed += !point.verified;
  return failed;
}

std::size_t RunReport::figures() const {
  std::size_t count = 0;
  for (const auto& run : workloads)
    for (const auto& m : run.result.measurements) count += !did_not_run(m);
  return count;
}

bool RunReport::measured_nothing_at_all() const {
  for (const auto& run : workloads)
    for (const auto& m : run.result.measurements)
      if (did_not_run(m)) return false;
  return figures() == 0;
}

std::vector<const WorkloadRun*> RunReport::measured_nothing() const {
  std::vector<const WorkloadRun*> empty;
  for (const auto& run : workloads)
    if (run.result.measurements.empty()) empty.push_back(&run);
  return empty;
}

bool RunReport::verified() const {
  return figures() != 0 && measured_nothing().empty() && not_run().empty() && failed_results() == 0;
}

double speed(const Measurement& nerve, const Measurement& other) {
  if (nerve.value <= 0 || other.value <= 0) return 0;
  return nerve.lower_is_better ? other.value / nerve.value : nerve.value / other.value;
}

const Measurement* headline(const WorkloadResult& result, const std::string& case_name) {
  for (const auto& m : result.measurements)
    if (m.case_name == case_name && m.runtime == "nerve") return &m;
  return nullptr;
}

std::vector<std::string> cases(const WorkloadResult& result) {
  std::vector<std::string> names;
  for (const auto& m : result.measurements)
    if (std::find(names.begin(), names.end(), m.case_name) == names.end()) names.push_back(m.case_name);
  return names;
}

}  // namespace nerve::benchmark
