// report.hpp — openclaw-benchmark's run report: what a run measured (or what a JSON file of an
// earlier run holds), and the functions that print, save, render and compare it.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "workloads/workload.hpp"

namespace nerve::benchmark {

using bench::Measurement;
using bench::WorkloadResult;

struct WorkloadRun {
  WorkloadResult result;
  double duration_s = 0;
  double load_before = -1, load_after = -1;  // 1-minute load average
};

struct Skipped {
  std::string id, title, reason;
};

// One workload's nerve figure at 1..N workers (the HTML report's scaling charts).
struct ScalingSeries {
  std::string workload, case_name, variant, unit;
  bool lower_is_better = true;
  struct Point {
    unsigned threads = 0;
    double value = 0, mad = 0;
    bool verified = false;
  };
  std::vector<Point> points;
};

struct ConfigEntry {
  std::string key, value, origin;
};

struct RunReport {
  std::string tool_version, git_commit, started_at;
  double duration_s = 0;
  // options as run
  bool quick = false;
  unsigned threads = 0;
  int repetitions = 0, warmup = 0, settle_ms = 0;
  std::vector<std::string> only;
  std::map<std::string, std::string> parameters;  // --param: "W11.max_batch" → "16"
  std::string config_file;                        // "" when none
  // machine
  std::string hostname, cpu_model, topology_description;
  unsigned hardware_threads = 0;
  int packages = 0, numa_nodes = 0, cores = 0, pus = 0;
  std::vector<std::pair<int, std::uint64_t>> caches;          // (level, bytes), one per distinct cache
  std::vector<std::pair<std::string, std::string>> versions;  // name → version ("" when absent)
  std::vector<ConfigEntry> config;
  std::vector<WorkloadRun> workloads;
  std::vector<Skipped> skipped;
  std::vector<ScalingSeries> scaling;

  // named() is true for a skipped workload that --only names: asked for by name, it fails the run
  // (without --only, the workloads this build or machine cannot run are only skipped).
  bool named(const Skipped& skipped) const;
  std::vector<const Skipped*> not_run() const;  // the skipped workloads named()
  // failed_results(): measurements and scaling points that failed their check.
  std::size_t failed_results() const;
  // figures() counts the measurements of every workload run; the record of a workload that did not
  // run (did_not_run()) is not one (BENCHMARK_JSON.md), though it fails the run as a result would.
  std::size_t figures() const;
  // measured_nothing_at_all() is true when no figure was measured and no workload failed to run:
  // every workload was skipped, or --runtimes selects none of the variants of those run
  // (nothing_measured). A workload that did not run measured nothing either, but fails as such.
  bool measured_nothing_at_all() const;
  // measured_nothing() lists the workloads that ran and measured nothing (--runtimes selected none of
  // their variants), --only naming them or not.
  std::vector<const WorkloadRun*> measured_nothing() const;
  // verified() is true when every workload run measured something (so at least one figure was
  // measured), every result verified and every workload --only names ran. A workload that measured
  // nothing verified nothing: a run with one is not a pass, as a run that measured nothing at all.
  bool verified() const;
};

// The versions a report records (BENCHMARK_JSON.md's `versions`), in order; describe_machine() gives
// each, "" for a baseline not built in.
inline constexpr const char* version_names[] = {"nerve", "compiler", "oneTBB", "OpenMP", "OpenBLAS"};

// Why a run that measured no figure is not verified: said on stderr, in the table and the HTML page.
inline constexpr const char* nothing_measured =
    "no figure was measured (every workload was skipped, or --runtimes selects none of the variants of "
    "those run)";

// Why a workload that ran and measured no figure fails the run: said on stderr.
inline constexpr const char* workload_measured_nothing =
    "--runtimes selects none of its variants, so nothing in it was verified (--only chooses the workloads "
    "that have them)";

// The variant of the one record a workload that did not run has (it threw before measuring
// anything), which marks that record (BENCHMARK_JSON.md).
inline constexpr const char* did_not_run_variant = "(the workload did not run)";
inline bool did_not_run(const Measurement& m) { return m.variant == did_not_run_variant; }

// speed() is how many times faster nerve's figure is than `other` (> 1: nerve faster), whatever the
// unit's direction.
double speed(const Measurement& nerve, const Measurement& other);
// headline() is the case's first nerve measurement (the one the ratios are against), or null.
const Measurement* headline(const WorkloadResult& result, const std::string& case_name);
// cases() lists a result's case names in order of first appearance.
std::vector<std::string> cases(const WorkloadResult& result);

// Comparison with an earlier run (--compare).
enum class Change { better, worse, same, missing };
struct Compared {
  std::string workload, case_name, variant, runtime, unit;
  double before = 0, after = 0;
  // How many times faster (> 0, better) or slower (< 0, worse) the figure got, minus one, for times
  // and rates alike: +1 twice as fast, -1 twice as slow, -9 ten times as slow (compare_runs()).
  double change = 0;
  double threshold = 0;  // relative noise threshold used
  Change verdict = Change::same;
};
std::vector<Compared> compare_runs(const RunReport& baseline, const RunReport& current);
// The worst significant regression of a nerve figure, as a positive fraction (0.3 = 30 % worse: a
// time 1.3 times as long, or a rate 1/1.3 of what it was).
double worst_nerve_regression(const std::vector<Compared>& comparison);
const char* change_name(Change change);

// Output.
std::string format_figure(double value);
// tuning_summary() is one line naming what the run was tuned with ("" when nothing): the --config
// file and the --param values, e.g. "config tuning.yaml; W11.max_batch=16".
std::string tuning_summary(const RunReport& report);
// format_change() writes a Compared::change as a signed whole percentage ("+12%", "-100%"); one that
// rounds to nothing is "+0%".
std::string format_change(double change);
// format_ratio() writes a ratio with two decimals below 100 ("1.00", "0.15", "24.7" above 10).
std::string format_ratio(double ratio);
void print_table(const RunReport& report, const std::vector<Compared>* comparison);
// write_json() and write_html() write a report to `path`; they throw std::runtime_error "<path>:
// cannot write this file: <the system's reason>" (common/files.hpp).
void write_json(const RunReport& report, const std::vector<Compared>* comparison,
                const std::filesystem::path& path);
// read_json() reads a --json file back; it throws std::runtime_error, whose text names the file and
// what is wrong with it (not a regular file nor a pipe with a writer, common/files.hpp; which field,
// where).
RunReport read_json(const std::filesystem::path& path);
void write_html(const RunReport& report, const std::vector<Compared>* comparison,
                const std::optional<std::filesystem::path>& trace, const std::filesystem::path& path);

// The timeline excerpt of a Chrome trace-event file as SVG (throws std::runtime_error, whose text names
// the file, on one that cannot be read, common/files.hpp, or is not trace-event JSON).
std::string trace_timeline_svg(const std::filesystem::path& trace, std::string* summary);

// Environment helpers.
// describe_machine() fills in the machine, the versions and the effective configuration of
// `settings`; `set_by` names the option behind each key the tool sets through the API
// ("parallel.thread_pool_size" → "--threads"), the origin recorded for it ("api (--threads)").
void describe_machine(RunReport& report, const nerve::Settings& settings,
                      const std::map<std::string, std::string>& set_by);
double load_average();
std::string now_utc();

// Progress on a terminal: a bar redrawn in place; elsewhere, plain lines.
class Progress {
 public:
  explicit Progress(bool terminal) : terminal_(terminal) {}
  void start_workload(std::size_t index, std::size_t count, const std::string& id, const std::string& title);
  void update(const bench::Progress& progress);
  void finish_workload(const WorkloadRun& run);
  void message(const std::string& text);

 private:
  void clear();
  bool terminal_;
  std::string prefix_;
  std::set<std::string> cases_shown_;  // plain output: one line per case, though repetitions interleave them
  bool drawn_ = false;
};

}  // namespace nerve::benchmark
