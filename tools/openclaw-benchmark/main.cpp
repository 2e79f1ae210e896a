// openclaw-benchmark — runs the standard workloads (WORKLOADS.md) that this build and machine
// support, each next to its baselines in the same process, verifies every result, and reports:
// a table on the terminal, --json (every figure, the machine, the effective configuration,
// versions, git commit), --html (one self-contained page of SVG charts), --compare against an
// earlier JSON. docs/BENCHMARKS.md explains the options and the method.
//
// Exit status: 0 every result verified (and no regression past --fail-over); 1 a result failed its
// check or a workload could not run, or the standard output was lost (closed early); 2 usage or configuration
// error; 3 a regression past --fail-over.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <utility>

#include <unistd.h>

#include <CLI/CLI.hpp>

#include "nerve/nerve.hpp"

#include "common/cli_usage.hpp"
#include "common/files.hpp"
#include "config/diagnostics.hpp"
#include "perf/output_path.hpp"
#include "report.hpp"
#include "scaling.hpp"
#include "workloads/allocator_baselines.hpp"

namespace nb = nerve::benchmark;

namespace {

struct CommandLine {
  bool quick = false, list = false, help = false;
  unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  int repeat = 0, warmup = 1, settle_ms = 20;
  std::vector<std::string> parameters;
  std::string only, runtimes, config, json, html, trace, compare, from_json, scaling = "default",
                                                                             inject_fault;
  double fail_over = -1;
  std::vector<std::string> runtime_list;  // --runtimes, checked and spelled as runtime_names() does
};

std::vector<std::string> split(const std::string& text, bool upper) {
  std::vector<std::string> items;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    // Blanks around an item are separators ("W1, W9"); one inside it stays, to be reported: "W1 0"
    // named W10 when they were squeezed out.
    const auto blank = [](unsigned char c) { return std::isspace(c) != 0; };
    item.erase(std::find_if_not(item.rbegin(), item.rend(), blank).base(), item.end());
    item.erase(item.begin(), std::find_if_not(item.begin(), item.end(), blank));
    if (upper)
      std::transform(item.begin(), item.end(), item.begin(), [](unsigned char c) { return std::toupper(c); });
    if (!item.empty()) items.push_back(item);
  }
  return items;
}

// range() is "1 to 1000", the text of an option's range in its errors.
std::string range(double low, double high) {
  char text[64];
  std::snprintf(text, sizeof text, "%.15g to %.15g", low, high);
  return text;
}

// decimal_number() checks a number option's text before CLI11 converts it: a finite decimal number
// (nerve::bench::parse_number(), what --param takes) from `low` to `high`. CLI11 alone takes "0x10"
// as 16, and "nan", which CLI::Range lets through (every comparison with NaN is false): --fail-over
// nan would turn the regression check off.
CLI::Validator decimal_number(double low, double high) {
  return CLI::Validator(
      [low, high](std::string& text) -> std::string {
        const std::optional<double> value = nerve::bench::parse_number(text);
        if (!value) return "'" + text + "' is not a (decimal) number";
        if (*value < low || *value > high) return "'" + text + "' is out of range (" + range(low, high) + ")";
        return "";
      },
      "NUMBER");
}

// whole_number() does the same for a count: decimal digits, a minus sign allowed, from `low` to
// `high`. CLI::Range called "3.5", "2.0" and "abc" "not in range", which sends the user looking for
// a bigger or smaller number.
CLI::Validator whole_number(long long low, long long high) {
  return CLI::Validator(
      [low, high](std::string& text) -> std::string {
        long long value = 0;
        const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
        if (error == std::errc::invalid_argument || end != text.data() + text.size())
          return "'" + text + "' is not a whole number (" + range(low, high) + ")";
        if (error == std::errc::result_out_of_range || value < low || value > high)
          return "'" + text + "' is out of range (" + range(low, high) + ")";
        return "";
      },
      "INT");
}

template <class T, class U>
bool contains(const std::vector<T>& list, const U& item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

// configuration_error() says on stderr what stopped the configuration (a bad key or value: exit 2;
// anything else, such as a plugin that does not load: exit 1) and returns that exit status.
int configuration_error(const nerve::Error& error) {
  const bool configuration = error.code() == nerve::ErrorCode::invalid_config;
  std::fprintf(stderr, "openclaw-benchmark: %s: %s\n", configuration ? "configuration" : "error",
               error.what());
  return configuration ? 2 : 1;
}

// report_failures(): on stderr, each workload --only names that could not run here, each workload
// that ran and measured nothing, and each result that did not verify, by workload, case and variant,
// with what failed (the table says it too, among everything else); or that nothing was measured, so
// nothing verified.
void report_failures(const nb::RunReport& report) {
  if (report.measured_nothing_at_all()) {
    std::fprintf(stderr, "openclaw-benchmark: NOTHING VERIFIED: %s\n", nb::nothing_measured);
  } else {
    for (const nb::WorkloadRun* run : report.measured_nothing())
      std::fprintf(stderr, "openclaw-benchmark: %s MEASURED NOTHING: %s\n", run->result.id.c_str(),
                   nb::workload_measured_nothing);
  }
  for (const nb::Skipped* skipped : report.not_run())
    std::fprintf(stderr, "openclaw-benchmark: %s could not run here: %s\n", skipped->id.c_str(),
                 skipped->reason.c_str());
  bool header = false;
  const auto failed = [&header] {
    if (!header) std::fprintf(stderr, "openclaw-benchmark: FAILED: a result did not verify:\n");
    header = true;
  };
  for (const auto& run : report.workloads) {
    for (const auto& m : run.result.measurements) {
      if (m.verified) continue;
      failed();
      std::fprintf(stderr, "  %s %s / %s: %s\n", run.result.id.c_str(), m.case_name.c_str(),
                   m.variant.c_str(), m.note.empty() ? "did not verify" : m.note.c_str());
    }
  }
  for (const auto& series : report.scaling) {
    for (const auto& point : series.points) {
      if (point.verified) continue;
      failed();
      std::fprintf(stderr, "  %s %s / %s at %u worker(s) (scaling): did not verify\n",
                   series.workload.c_str(), series.case_name.c_str(), series.variant.c_str(), point.threads);
    }
  }
}

int list_workloads(const nerve::Settings& settings) {
  // Asking whether a workload can run makes a context: what stops a run (a bad plugin, a bad key)
  // stops the list the same way, with the same message and exit status, rather than an abort.
  try {
    for (const auto& entry : nerve::bench::workload_registry()) {
      std::string reason;
      const bool ok = entry.supported(settings, &reason);
      std::printf("%-4s %-22s %s", entry.id, entry.title,
                  ok ? "supported" : ("not supported: " + reason).c_str());
      if (*entry.parameters != '\0') std::printf("; --param %s.{%s}", entry.id, entry.parameters);
      std::printf("\n");
    }
  } catch (const nerve::Error& error) {
    std::fflush(stdout);
    return configuration_error(error);
  }
  return 0;
}

// parse_runtimes() checks --runtimes "nerve,openmp" against the runtimes of the workloads
// (nerve::bench::runtime_names()), ignoring case and spaces, and fills `out` with their exact names;
// "" or the error, which names the bad name, or says that a `given` list names none, and lists the
// valid ones.
std::string parse_runtimes(const std::string& text, bool given, std::vector<std::string>& out) {
  const auto normal = [](std::string name) {
    std::string result;
    for (const unsigned char c : name)
      if (!std::isspace(c)) result += static_cast<char>(std::tolower(c));
    return result;
  };
  const auto& known = nerve::bench::runtime_names();
  std::string valid;
  for (const std::string& k : known) valid += (valid.empty() ? "" : ", ") + k;
  for (const std::string& name : split(text, false)) {
    const auto match = std::find_if(known.begin(), known.end(),
                                    [&](const std::string& k) { return normal(k) == normal(name); });
    if (match == known.end()) return "--runtimes: no runtime '" + name + "' (valid: " + valid + ")";
    if (!contains(out, *match)) out.push_back(*match);
  }
  if (given && out.empty()) return "--runtimes names no runtime (valid: " + valid + ")";
  return {};
}

// empty_item() is the error for a list with an empty item ("W1,,W5", "W1,": a variable that expanded
// to nothing), as --param gives, or "" (also for a list that is all blank: "names no ..." says that).
std::string empty_item(const char* option, const std::string& text) {
  if (text.find_first_not_of(" \t,") == std::string::npos) return {};
  std::stringstream stream(text + ",");  // getline() drops a trailing empty item: keep it
  for (std::string item; std::getline(stream, item, ',');) {
    if (item.find_first_not_of(" \t") == std::string::npos)
      return std::string(option) + " '" + text + "': an empty item between its commas";
  }
  return {};
}

// parse_parameters() turns --param "W11.max_batch=16,W11.rate=8000" into a map, checking that each
// name is one its workload reads (the registry's `parameters`); "" or the error.
std::string parse_parameters(const std::vector<std::string>& arguments,
                             std::map<std::string, std::string>& out) {
  for (const std::string& argument : arguments) {
    // An empty list ("", ",": a variable that expanded to nothing) or an empty item ("a=1,,b=2",
    // "a=1,") is a mistake, as an empty --only, --runtimes or --scaling is, not nothing to set.
    if (argument.find_first_not_of(" \t,") == std::string::npos)
      return "--param '" + argument + "' names no parameter (expected W<n>.<name>=<value>; see --list)";
    if (const std::string error = empty_item("--param", argument); !error.empty())
      return error + " (expected W<n>.<name>=<value>)";
    std::stringstream items(argument);
    for (std::string item; std::getline(items, item, ',');) {
      // Blanks around an item are separators ("a=1, b=2"); one inside it is a mistake to report, not
      // to squeeze out ("W11.max_batch=1 6" is not 16). No item is only blanks (empty_item()).
      const auto first = item.find_first_not_of(" \t");
      item = item.substr(first, item.find_last_not_of(" \t") - first + 1);
      if (item.find_first_of(" \t\n\r\f\v") != std::string::npos)
        return "--param '" + item + "': a blank inside a parameter (expected W<n>.<name>=<value>)";
      const auto equals = item.find('='), dot = item.find('.');
      if (equals == std::string::npos || dot == std::string::npos || dot > equals)
        return "--param " + item + ": expected W<n>.<name>=<value>";
      std::string id = item.substr(0, dot);
      std::transform(id.begin(), id.end(), id.begin(), [](unsigned char c) { return std::toupper(c); });
      const std::string name = item.substr(dot + 1, equals - dot - 1);
      const auto& all = nerve::bench::workload_registry();
      const auto entry = std::find_if(all.begin(), all.end(), [&](const auto& e) { return id == e.id; });
      if (entry == all.end()) return "--param " + item + ": no workload " + id + " (see --list)";
      std::stringstream names(entry->parameters);
      std::string known;
      bool found = false;
      while (names >> known) found = found || known == name;
      if (!found)
        return "--param " + item + ": " + id + " has no parameter '" + name +
               "' (it reads: " + (*entry->parameters != '\0' ? entry->parameters : "none") + ")";
      // Every parameter is a number (WorkloadOptions::parameter): anything else is a usage error here;
      // a number out of the workload's range fails its run.
      const std::string value = item.substr(equals + 1);
      if (!nerve::bench::parse_number(value))
        return "--param " + item + ": '" + value + "' is not a (decimal) number";
      out[id + "." + name] = value;
    }
  }
  return {};
}

// unwritable() is true, having said why on stderr, when the output `path` that `option` names cannot
// be written: anything but a regular file is refused before opening it (opening a FIFO waited for a
// reader: the run hung), then a file is probed, changing nothing (common/files.hpp).
bool unwritable(const char* option, const std::string& path) {
  if (path.empty()) return false;
  std::string error = nerve::tools::not_a_regular_file(path);
  if (error.empty()) {
    error = nerve::tools::cannot_write(path);
    if (!error.empty()) error = "cannot write this file: " + error;
  }
  if (!error.empty())
    std::fprintf(stderr, "openclaw-benchmark: %s %s: %s\n", option, path.c_str(), error.c_str());
  return !error.empty();
}

// check_trace_path() throws the ConfigError a context would for perf.trace (a FIFO or a socket there,
// a file that cannot be written), with where it was set ("env NERVE_TRACE: perf.trace: ..."): the
// run's probe context traces nothing (see its caller), and without this the first workload's context
// found it, failing each workload in turn and the run with exit 1. A device (/dev/null) is nerve's to
// write in place (docs/TRACING.md), and not probed.
void check_trace_path(const nerve::Config& config) {
  const std::string& path = config.perf.trace;
  if (path.empty()) return;
  try {
    nerve::detail::refuse_unwritable_kind(path, "perf.trace");
    const std::string kind = nerve::tools::special_file_kind(path);
    if (const std::string error =
            kind.empty() || kind == "a directory" ? nerve::tools::cannot_write(path) : "";
        !error.empty())
      throw nerve::ConfigError("perf.trace: cannot write '" + path + "': " + error, "perf.trace");
  } catch (const nerve::ConfigError& error) {
    nerve::config::rethrow_with_origin(config, error);
  }
}

// numbered_after() is true when `path` names a file a later context of the run writes for `written`
// (perf.trace, perf.decision_log): the first context writes `written` itself, each later one
// `<stem>.<context id><ext>` beside it — again with a number, when that name is taken too
// (docs/TRACING.md): `--json tr.3.json` with NERVE_TRACE=tr.json replaced W9's trace with the report.
bool numbered_after(const std::string& path, const std::string& written) {
  if (path.empty() || written.empty()) return false;
  const std::filesystem::path output = nerve::detail::absolute_path(path);
  const std::filesystem::path base = nerve::detail::absolute_path(written);
  const std::string name = output.filename().string(), stem = base.stem().string();
  const std::string extension = base.extension().string();
  if (output.parent_path() != base.parent_path() || !name.starts_with(stem) || !name.ends_with(extension) ||
      name.size() <= stem.size() + extension.size())
    return false;
  // What lies between: one or more ".<digits>".
  const std::string_view numbers(name.data() + stem.size(), name.size() - stem.size() - extension.size());
  for (std::size_t at = 0; at < numbers.size();) {
    const std::size_t end = std::min(numbers.find_first_not_of("0123456789", at + 1), numbers.size());
    if (numbers[at] != '.' || end == at + 1) return false;
    at = end;
  }
  return true;
}

// run_settings() are the settings every nerve context of a run starts from: the NERVE_* variables
// and the --config file over them.
nerve::Settings run_settings(const CommandLine& line) {
  nerve::Settings settings;
  settings.use_environment(true);
  if (!line.config.empty()) settings.config_file(line.config, "--config");
  return settings;
}

// check_configuration() makes every check of the configuration a run makes before it starts, and
// returns 0, or the exit status having said why on stderr (configuration_error()). The run, --help
// and --list all call it, so that what stops a run stops them with the same message: --list passed a
// NUMA node the machine lacks (W12 said "no OpenCL device", naming the key), and --help a NERVE_TRACE
// that cannot be written. First the keys, then what only a context can check against the machine
// (gpu.devices naming an accelerator that is not there, a NUMA node it lacks): found by making one
// context as the workloads will, instead of failing each of them.
int check_configuration(const nerve::Settings& settings, const CommandLine& line) {
  try {
    const nerve::Config config = nerve::Config::load(settings);
    // The files the run's contexts write: a report written over one would destroy it (or be
    // destroyed by it), as one over an input would (the overwrites check in main()).
    const std::pair<const char*, const std::string*> outputs[] = {{"--json", &line.json},
                                                                  {"--html", &line.html}};
    const std::pair<const char*, const std::string*> written[] = {
        {"perf.trace", &config.perf.trace}, {"perf.decision_log", &config.perf.decision_log}};
    for (const auto& [output, path] : outputs) {
      for (const auto& [key, other] : written) {
        if (nerve::tools::same_file(*path, *other)) {
          std::fprintf(stderr,
                       "openclaw-benchmark: %s and %s name the same file (%s): %s would overwrite it\n",
                       output, key, path->c_str(), output);
          return 2;
        }
        if (numbered_after(*path, *other)) {
          std::fprintf(stderr,
                       "openclaw-benchmark: %s names %s, which a later context of the run writes for %s "
                       "(%s): %s would overwrite it\n",
                       output, path->c_str(), key, other->c_str(), output);
          return 2;
        }
      }
    }
    nerve::Settings probe = settings;
    probe.set("parallel.thread_pool_size", std::to_string(line.threads));
    // The probe traces nothing: the first context to name a trace file keeps it, and that must
    // be the first workload's (docs/BENCHMARKS.md, --trace). Its path is checked here instead.
    probe.set("perf.trace", "");
    check_trace_path(config);
    const nerve::Context context(probe);
  } catch (const nerve::Error& error) {
    return configuration_error(error);
  }
  return 0;
}

// percent_over() writes `percent`, which is over `limit`, with the decimals it takes to show that it
// is (as format_figure() would, or more): the limit 5.4 was exceeded by "5%" when whole percents
// were printed ("5% worse ... (limit 5%)" for 5.45).
std::string percent_over(double percent, double limit) {
  char text[64];
  for (int decimals = percent >= 100 ? 0 : percent >= 10 ? 1 : 2; decimals <= 15; ++decimals) {
    std::snprintf(text, sizeof text, "%.*f", decimals, percent);
    if (std::strtod(text, nullptr) > limit) break;
  }
  return text;
}

// stdout_lost() is true, having said on stderr that `what`, when the standard output did not take
// everything written to it: closed early (`openclaw-benchmark --list | head -1`: SIGPIPE is
// ignored, so the writes failed instead of ending the tool) or full. Called last, after a flush.
bool stdout_lost(const char* what) { return nerve::tools::stdout_lost("openclaw-benchmark", what); }

// run_suite() runs the selected workloads and fills `report`.
void run_suite(const CommandLine& line, const std::vector<std::string>& only, const nerve::Settings& settings,
               nb::RunReport& report) {
  nerve::bench::WorkloadOptions options;
  options.threads = line.threads;
  options.quick = line.quick;
  options.repetitions = report.repetitions;
  options.warmup = line.warmup;
  options.settle_ms = line.settle_ms;
  options.settings = settings;
  options.runtimes = line.runtime_list;
  options.parameters = report.parameters;

  std::vector<const nerve::bench::WorkloadEntry*> selected;
  for (const auto& entry : nerve::bench::workload_registry()) {
    if (!only.empty() && !contains(only, entry.id)) continue;
    std::string reason;
    if (!entry.supported(settings, &reason)) {
      report.skipped.push_back({entry.id, entry.title, reason});
      continue;
    }
    selected.push_back(&entry);
  }
  nb::Progress progress(isatty(STDOUT_FILENO) != 0);
  for (const auto& skipped : report.skipped)
    progress.message(skipped.id + " " + skipped.title + ": skipped (" + skipped.reason + ")");
  for (std::size_t i = 0; i < selected.size(); ++i) {
    const auto& entry = *selected[i];
    options.inject_fault = line.inject_fault == entry.id;
    options.on_progress = [&progress](const nerve::bench::Progress& p) { progress.update(p); };
    progress.start_workload(i, selected.size(), entry.id, entry.title);
    nb::WorkloadRun run;
    run.load_before = nb::load_average();
    const auto start = std::chrono::steady_clock::now();
    try {
      run.result = entry.run(options);
    } catch (const std::exception& error) {
      // A workload that cannot run at all fails the run like a wrong result does.
      run.result = {entry.id, entry.title, "", {}, {}};
      nerve::bench::Measurement failed;
      failed.case_name = "run";
      failed.runtime = "nerve";
      failed.variant = nb::did_not_run_variant;
      failed.note = error.what();
      run.result.measurements.push_back(failed);
    }
    run.duration_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    run.load_after = nb::load_average();
    progress.finish_workload(run);
    report.workloads.push_back(std::move(run));
  }
  if (!line.html.empty() && line.scaling != "none") {
    // The default list is narrowed to the workloads run (--only); a list given is run as given.
    const bool named = line.scaling != "default";
    std::vector<std::string> wanted =
        named ? split(line.scaling, true) : std::vector<std::string>{"W1", "W5", "W6"};
    std::vector<const nerve::bench::WorkloadEntry*> scaled;
    for (const auto& entry : nerve::bench::workload_registry()) {
      if (!contains(wanted, entry.id)) continue;
      if (contains(selected, &entry)) {
        scaled.push_back(&entry);
      } else if (named) {
        std::string reason;
        if (entry.supported(settings, &reason)) {
          scaled.push_back(&entry);
        } else {
          progress.message(std::string(entry.id) + " " + entry.title + ": not scaled (" + reason + ")");
        }
      }
    }
    if (!scaled.empty()) report.scaling = nb::run_scaling(scaled, options, progress);
  }
}

}  // namespace

int main(int argc, char** argv) {
  nerve::bench::reexec_with_static_tls(argv);  // W8 dlopens jemalloc (allocator_baselines.hpp)
  // A closed standard output (`openclaw-benchmark --json run.json | head -1`) must not end the run:
  // SIGPIPE killed it before it wrote the report files. Writes to it fail (EPIPE) instead; the run
  // and its reports go on, and at the end a note on stderr says the output was lost and the exit
  // status is 1 where it would have been 0 (stdout_lost()).
  nerve::tools::ignore_sigpipe();
  CommandLine line;
  CLI::App app{
      "openclaw-benchmark: the standard workloads on nerve and its rivals, verified, in one process"};
  nerve::tools::add_help_flag(app, line.help);
  // Each option that takes a value refuses one of the options as its value first (not_an_option()):
  // `--json --help` wrote the report to a file named "--help" and ran the whole suite.
  const auto value = [&app](CLI::Option* option, const char* what = "a value") {
    return option->check(nerve::tools::not_an_option(app, what));
  };
  app.add_flag("--quick", line.quick,
               "smaller sizes, 3 repetitions: the whole suite in under a minute (CI smoke run)");
  value(app.add_option("--only", line.only, "run only these workloads, e.g. W5,W6"), "workloads");
  value(app.add_option("--threads", line.threads, "threads for every runtime, the calling thread included"),
        "a number")
      ->check(whole_number(1, 1024));
  value(app.add_option("--repeat", line.repeat, "timed repetitions per variant (default 5, quick 3)"),
        "a number")
      ->check(whole_number(1, 1000));
  value(app.add_option("--warmup", line.warmup, "untimed, verified repetitions first (default 1)"),
        "a number")
      ->check(whole_number(0, 100));
  value(app.add_option("--settle-ms", line.settle_ms,
                       "pause before each variant, then until the process is quiet (default 20)"),
        "a number")
      ->check(whole_number(0, 10000));
  value(app.add_option("--runtimes", line.runtimes,
                       "run only these runtimes' variants (nerve, oneTBB, OpenMP, naive, BLAS, STREAM, "
                       "'glibc malloc', jemalloc, tcmalloc)"),
        "runtimes");
  value(app.add_option("--param", line.parameters,
                       "a workload parameter, e.g. W11.max_batch=16,W11.max_wait_us=500 (--list names them)"),
        "a parameter");
  value(
      app.add_option("--config", line.config, "nerve configuration file (YAML); NERVE_* variables apply too"),
      "a path");
  value(app.add_option("--json", line.json,
                       "write every figure, the machine and the configuration to this JSON file"),
        "a path");
  value(app.add_option("--html", line.html, "write a self-contained HTML report with charts to this file"),
        "a path");
  value(app.add_option("--trace", line.trace,
                       "a Chrome trace-event JSON file: the HTML report shows a timeline excerpt of it"),
        "a path");
  value(app.add_option("--compare", line.compare,
                       "mark each figure better/worse/same against this earlier --json file"),
        "a path");
  value(app.add_option("--fail-over", line.fail_over,
                       "with --compare: exit 3 when a nerve figure is worse by more than PCT %"),
        "a number")
      ->check(decimal_number(0, 1e6));
  value(
      app.add_option("--scaling", line.scaling,
                     "workloads timed at 1..threads workers for the HTML report (default W1,W5,W6; 'none')"),
      "workloads");
  value(app.add_option("--from-json", line.from_json,
                       "do not run: report (table, --html, --compare, --json) an earlier --json file"),
        "a path");
  app.add_flag("--list", line.list, "list the workloads and whether they can run here");
  // For the tests of the checks only: corrupt nerve's result in this workload (the run must fail).
  value(app.add_option("--inject-fault", line.inject_fault), "a workload")->group("");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return nerve::tools::usage_error(app, error);  // exit 2, --help or not (cli_usage.hpp)
  }
  if (line.list) {
    // --list runs nothing and writes no report: an option that shapes a run or names its inputs or
    // outputs would be ignored (--json and --html were probed for writing, then left unwritten),
    // which the user should hear about, as with --from-json. --config applies: the list says what
    // it allows.
    for (const char* option : {"--quick", "--only", "--threads", "--repeat", "--warmup", "--settle-ms",
                               "--runtimes", "--param", "--json", "--html", "--trace", "--compare",
                               "--fail-over", "--scaling", "--from-json", "--inject-fault"}) {
      if (app.count(option) != 0) {
        std::fprintf(
            stderr,
            "openclaw-benchmark: %s does not apply with --list (it runs nothing and writes no report)\n",
            option);
        return 2;
      }
    }
  }

  // A path option given an empty value ("--json ''", a variable that expanded to nothing) is a
  // mistake to report, not a request to skip the step.
  const std::pair<const char*, const std::string*> paths[] = {
      {"--config", &line.config}, {"--json", &line.json},       {"--html", &line.html},
      {"--trace", &line.trace},   {"--compare", &line.compare}, {"--from-json", &line.from_json}};
  for (const auto& [option, value] : paths) {
    if (app.count(option) != 0 && value->empty()) {
      std::fprintf(stderr, "openclaw-benchmark: %s needs a file name (it was given an empty one)\n", option);
      return 2;
    }
  }
  if (line.fail_over >= 0 && line.compare.empty()) {
    std::fprintf(stderr, "openclaw-benchmark: --fail-over needs --compare\n");
    return 2;
  }
  if (!line.trace.empty() && line.html.empty()) {
    std::fprintf(stderr,
                 "openclaw-benchmark: --trace needs --html (the trace is shown in the HTML report)\n");
    return 2;
  }
  std::transform(line.inject_fault.begin(), line.inject_fault.end(), line.inject_fault.begin(),
                 [](unsigned char c) { return std::toupper(c); });
  std::vector<std::string> only;  // each workload once, in the order first named
  for (std::string& id : split(line.only, true))
    if (!contains(only, id)) only.push_back(std::move(id));
  // An unknown name is quoted as the user wrote it (ids are matched in upper case).
  const auto unknown_workload = [](const char* option, const std::string& text, const char* hint) {
    const auto& all = nerve::bench::workload_registry();
    const std::vector<std::string> names = split(text, false), ids = split(text, true);
    for (std::size_t i = 0; i < ids.size(); ++i) {
      if (std::none_of(all.begin(), all.end(), [&](const auto& entry) { return ids[i] == entry.id; })) {
        std::fprintf(stderr, "openclaw-benchmark: %s: no workload '%s' in this build (see --list%s)\n",
                     option, names[i].c_str(), hint);
        return true;
      }
    }
    return false;
  };
  for (const auto& [option, text] : {std::pair<const char*, const std::string&>{"--only", line.only},
                                     {"--runtimes", line.runtimes},
                                     {"--scaling", line.scaling}}) {
    if (const std::string error = empty_item(option, text); !error.empty()) {
      std::fprintf(stderr, "openclaw-benchmark: %s\n", error.c_str());
      return 2;
    }
  }
  if (unknown_workload("--only", line.only, "")) return 2;
  if (app.count("--only") != 0 && only.empty()) {
    std::fprintf(stderr, "openclaw-benchmark: --only names no workload (see --list)\n");
    return 2;
  }
  if (line.scaling != "none" && line.scaling != "default" &&
      unknown_workload("--scaling", line.scaling, "; 'none' for no scaling runs"))
    return 2;

  if (const std::string error =
          parse_runtimes(line.runtimes, app.count("--runtimes") != 0, line.runtime_list);
      !error.empty()) {
    std::fprintf(stderr, "openclaw-benchmark: %s\n", error.c_str());
    return 2;
  }
  if (app.count("--scaling") != 0 && split(line.scaling, true).empty()) {
    std::fprintf(stderr, "openclaw-benchmark: --scaling names no workload (use 'none' for none)\n");
    return 2;
  }

  nb::RunReport report;
  if (const std::string error = parse_parameters(line.parameters, report.parameters); !error.empty()) {
    std::fprintf(stderr, "openclaw-benchmark: %s\n", error.c_str());
    return 2;
  }
  // Earlier runs are read before anything runs: a file that is missing or not a report is a usage
  // error found at once, not after the whole suite.
  std::optional<nb::RunReport> baseline;
  std::optional<nb::RunReport> earlier;
  const auto read_report = [](const std::string& option, const std::string& path,
                              std::optional<nb::RunReport>& into) {
    try {
      into = nb::read_json(path);
      return true;
    } catch (const std::exception& error) {  // its text names the file first
      std::fprintf(stderr, "openclaw-benchmark: %s %s\n", option.c_str(), error.what());
      return false;
    }
  };
  if (!line.compare.empty() && !read_report("--compare", line.compare, baseline)) return 2;
  if (!line.from_json.empty() && !read_report("--from-json", line.from_json, earlier)) return 2;
  if (earlier) {
    // Nothing runs: options that shape a run would be ignored, which the user should hear about.
    for (const char* option : {"--quick", "--only", "--threads", "--repeat", "--warmup", "--settle-ms",
                               "--runtimes", "--param", "--config", "--scaling"}) {
      if (app.count(option) != 0) {
        std::fprintf(stderr, "openclaw-benchmark: %s does not apply with --from-json (nothing runs)\n",
                     option);
        return 2;
      }
    }
  }
  // So are outputs that cannot be written (unwritable()).
  // An output naming the file of another output, or an input (the --compare baseline, the
  // --from-json report, the --trace file, the configuration: --config's file or NERVE_CONFIG's),
  // would overwrite it: the same path however spelt, or the same file under two names (same_file()).
  // `--config tune.yaml --json tune.yaml` ran and replaced the configuration by the report.
  const char* named_config = std::getenv("NERVE_CONFIG");
  const std::string environment_config = named_config != nullptr ? named_config : "";
  const std::tuple<const char*, const std::string*, const char*, const std::string*> overwrites[] = {
      {"--json", &line.json, "--html", &line.html},
      {"--json", &line.json, "--compare", &line.compare},
      {"--html", &line.html, "--compare", &line.compare},
      {"--json", &line.json, "--from-json", &line.from_json},
      {"--html", &line.html, "--from-json", &line.from_json},
      {"--json", &line.json, "--trace", &line.trace},
      {"--html", &line.html, "--trace", &line.trace},
      {"--json", &line.json, "--config", &line.config},
      {"--html", &line.html, "--config", &line.config},
      {"--json", &line.json, "NERVE_CONFIG", &environment_config},
      {"--html", &line.html, "NERVE_CONFIG", &environment_config}};
  for (const auto& [output, path, other, other_path] : overwrites) {
    if (nerve::tools::same_file(*path, *other_path)) {
      std::fprintf(stderr, "openclaw-benchmark: %s and %s name the same file (%s): %s would overwrite it\n",
                   output, other, path->c_str(), output);
      return 2;
    }
  }
  if (unwritable("--json", line.json) || unwritable("--html", line.html)) return 2;
  // --help and --list after every check of the command line (cli_usage.hpp), the configuration's
  // as a run makes them included: a mistake on it is reported as without them. --from-json runs
  // nothing and takes no --config, so no configuration is checked for it.
  const nerve::Settings settings = run_settings(line);
  if (const int status = earlier ? 0 : check_configuration(settings, line); status != 0) return status;
  if (line.help) return nerve::tools::answer("openclaw-benchmark", app.help());
  if (line.list) {
    const int status = list_workloads(settings);
    return stdout_lost("the list on it is incomplete") && status == 0 ? 1 : status;
  }
  const auto start = std::chrono::steady_clock::now();
  try {
    if (earlier) {
      report = std::move(*earlier);
    } else {
      report.quick = line.quick;
      report.threads = line.threads;
      report.repetitions = line.repeat > 0 ? line.repeat : line.quick ? 3 : 5;
      report.warmup = line.warmup;
      report.settle_ms = line.settle_ms;
      report.only = only;
      report.config_file = line.config;
      report.started_at = nb::now_utc();
      // Every nerve context of the run gets parallel.thread_pool_size = --threads through the API
      // (nerve_settings()): the configuration recorded says so, with that origin and option.
      nerve::Settings effective = settings;
      effective.set("parallel.thread_pool_size", std::to_string(line.threads));
      nb::describe_machine(report, effective, {{"parallel.thread_pool_size", "--threads"}});
      run_suite(line, only, settings, report);
      report.duration_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    std::optional<std::vector<nb::Compared>> comparison;
    if (baseline) comparison = nb::compare_runs(*baseline, report);
    const auto* compared = comparison ? &*comparison : nullptr;
    nb::print_table(report, compared);
    // Every report that can be written is, each announced on stdout or its error on stderr (naming
    // its option; the text names the file and the system's reason): one that cannot be written now
    // (its directory removed during the run) left the other unwritten or unannounced. The run then
    // exits 1.
    bool written = true;
    const auto write_report = [&written](const char* option, const char* name, const std::string& path,
                                         const auto& write) {
      if (path.empty()) return;
      try {
        write();
        std::printf("%s report: %s\n", name, std::filesystem::absolute(path).c_str());
      } catch (const std::exception& error) {
        std::fflush(stdout);
        std::fprintf(stderr, "openclaw-benchmark: %s %s\n", option, error.what());
        written = false;
      }
    };
    write_report("--html", "HTML", line.html, [&] {
      nb::write_html(report, compared,
                     line.trace.empty() ? std::nullopt : std::optional<std::filesystem::path>(line.trace),
                     line.html);
    });
    write_report("--json", "JSON", line.json, [&] { nb::write_json(report, compared, line.json); });
    // The report files are written by now; a failed or regressed run keeps its own exit status.
    const bool lost = stdout_lost("the table on it is incomplete");
    // A result that failed its check, or a workload --only asks for by name and this machine cannot
    // run (without --only, the ones that cannot run here are only skipped).
    if (!report.verified()) {
      report_failures(report);
      return 1;
    }
    // A report not written is exit 1, the regression (if any) said too.
    if (comparison && line.fail_over >= 0) {
      const double worst = nb::worst_nerve_regression(*comparison);
      if (worst * 100 > line.fail_over) {
        std::fprintf(
            stderr,
            "openclaw-benchmark: REGRESSION: a nerve figure is %s%% worse than in %s (limit %.15g%%)\n",
            percent_over(worst * 100, line.fail_over).c_str(), line.compare.c_str(), line.fail_over);
        return written ? 3 : 1;
      }
    }
    if (lost || !written) return 1;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "openclaw-benchmark: %s\n", error.what());
    return 1;
  }
  return 0;
}
