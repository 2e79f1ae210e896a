// nerve-bench-core — runs the core-runtime workloads (W1 W2 W3 W4 W8 W9) on nerve and on the baselines
// built in (oneTBB, OpenMP, W8's allocators), in one process, and prints each workload's figures, the
// ratios nerve / baseline and whether nerve meets its goal. Exit status: 0 when every result verified
// (and for --help, --list), 1 when any did not (the failing variants are named), 2 for a usage error.
//
//   nerve-bench-core [--threads N] [--quick] [--only W1,W3] [--runtimes nerve,oneTBB,OpenMP]
//                    [--repeat N] [--warmup N] [--settle-ms N] [--probe-idle] [--list] [--help]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "nerve/nerve.hpp"

#include "workloads/allocator_baselines.hpp"
#include "workloads/idle_probe.hpp"
#include "workloads/workload.hpp"

namespace {

using nerve::bench::WorkloadOptions;
using nerve::bench::WorkloadResult;

struct CommandLine {
  WorkloadOptions options;
  std::vector<std::string> only;
  bool probe_idle = false;
  bool list = false;
  bool help = false;
};

void print_usage(std::FILE* out) {
  std::fprintf(
      out,
      "usage: nerve-bench-core [--threads N] [--quick] [--only W1,W3] [--runtimes nerve,oneTBB,OpenMP]\n"
      "                        [--repeat N] [--warmup N] [--settle-ms N] [--probe-idle] [--list] [--help]\n"
      "  --threads N    workers for every runtime, the calling thread included (default: %u)\n"
      "  --quick        smaller sizes, 3 repetitions (a smoke run)\n"
      "  --only LIST    run only these workloads (comma-separated ids)\n"
      "  --runtimes L   run only these runtimes' variants (e.g. nerve, to profile it alone)\n"
      "  --repeat N     timed repetitions per variant (default 5)\n"
      "  --warmup N     untimed, verified repetitions before them (default 1)\n"
      "  --settle-ms N  pause before each variant, then until no other thread runs (default 20)\n"
      "  --probe-idle   measure how long each runtime's idle workers spin, then exit\n"
      "  --list         list the workloads and exit\n"
      "  --help         print this help and exit\n",
      std::max(1u, std::thread::hardware_concurrency()));
}

// usage() ends a command line that did not parse: the reason and the usage on stderr, exit 2.
[[noreturn]] void usage(const char* message) {
  std::fprintf(stderr, "nerve-bench-core: %s\n", message);
  print_usage(stderr);
  std::exit(2);
}

int parse_int(const char* flag, const char* text, int minimum) {
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || value < minimum || value > 1'000'000) {
    usage((std::string(flag) + " needs an integer >= " + std::to_string(minimum)).c_str());
  }
  return static_cast<int>(value);
}

std::vector<std::string> split_ids(const std::string& text) {
  std::vector<std::string> ids;
  std::stringstream stream(text);
  std::string id;
  while (std::getline(stream, id, ',')) {
    for (char& c : id) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    if (!id.empty()) ids.push_back(id);
  }
  return ids;
}

std::vector<std::string> split_names(const std::string& text) {
  std::vector<std::string> names;
  std::stringstream stream(text);
  std::string name;
  while (std::getline(stream, name, ',')) {
    if (name != "nerve" && name != "oneTBB" && name != "OpenMP")
      usage(("--runtimes: no runtime '" + name + "' (nerve, oneTBB, OpenMP)").c_str());
    names.push_back(name);
  }
  return names;
}

CommandLine parse(int argc, char** argv) {
  CommandLine line;
  line.options.threads = std::max(1u, std::thread::hardware_concurrency());
  bool repeat_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) usage((arg + " needs a value").c_str());
      return argv[++i];
    };
    if (arg == "--threads") {
      line.options.threads = static_cast<unsigned>(parse_int("--threads", value(), 1));
    } else if (arg == "--quick") {
      line.options.quick = true;
    } else if (arg == "--only") {
      line.only = split_ids(value());
    } else if (arg == "--runtimes") {
      line.options.runtimes = split_names(value());
    } else if (arg == "--repeat") {
      line.options.repetitions = parse_int("--repeat", value(), 1);
      repeat_given = true;
    } else if (arg == "--warmup") {
      line.options.warmup = parse_int("--warmup", value(), 0);
    } else if (arg == "--settle-ms") {
      line.options.settle_ms = parse_int("--settle-ms", value(), 0);
    } else if (arg == "--probe-idle") {
      line.probe_idle = true;
    } else if (arg == "--list") {
      line.list = true;
    } else if (arg == "--help" || arg == "-h") {
      // Answered after the whole line parsed, as the CLI11 tools do (tools/common/cli_usage.hpp):
      // --help exits 0 only when nothing else on the line is wrong.
      line.help = true;
    } else {
      usage(("unknown argument " + arg).c_str());
    }
  }
  if (line.options.quick && !repeat_given) line.options.repetitions = 3;
  for (const std::string& id : line.only) {
    const auto& all = nerve::bench::core_workloads();
    if (std::none_of(all.begin(), all.end(), [&](const auto& entry) { return id == entry.id; }))
      usage(("--only: no workload " + id).c_str());
  }
  return line;
}

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

std::string today() {
  const std::time_t now = std::time(nullptr);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M", std::localtime(&now));
  return text;
}

// load_average() is the 1-minute load average: above the thread count, other processes compete for
// the cores and every figure (most of all the ones that need all workers at once) suffers.
double load_average() {
  std::ifstream loadavg("/proc/loadavg");
  double load = -1;
  loadavg >> load;
  return load;
}

std::string figure(double value) {
  char text[32];
  std::snprintf(text, sizeof text, value >= 100 ? "%.0f" : value >= 10 ? "%.1f" : "%.2f", value);
  return text;
}

void print_result(const WorkloadResult& result, double load_before) {
  std::printf("\n%s %s — %s (load average %.1f before, %.1f after)\n", result.id.c_str(),
              result.title.c_str(), result.size.c_str(), load_before, load_average());
  std::printf("  %-30s %12s %-13s %21s %9s\n", "variant", "median", "unit", "[min .. max]", "MAD");
  for (const auto& m : result.measurements) {
    char spread[64];
    std::snprintf(spread, sizeof spread, "[%s .. %s]", figure(m.min).c_str(), figure(m.max).c_str());
    std::printf("  %-30s %12s %-13s %21s %9s  %s%s\n", m.variant.c_str(), figure(m.value).c_str(),
                m.unit.c_str(), spread, figure(m.mad).c_str(),
                m.verified ? "" : "VERIFICATION FAILED: ", m.note.c_str());
  }
  for (const auto& goal : result.goals) {
    const auto check = nerve::bench::check_goal(result, goal);
    if (!check) {
      std::printf("  goal %s (%s): no baseline measured\n", goal.text.c_str(), goal.case_name.c_str());
      continue;
    }
    std::printf("  goal %s (%s): nerve / %s = %.2f — %s\n", goal.text.c_str(), goal.case_name.c_str(),
                check->baseline->variant.c_str(), check->ratio, check->met ? "met" : "NOT MET");
  }
  std::fflush(stdout);
}

// The summary is a Markdown table (docs/BENCHMARKS.md takes it as is): one row per nerve figure and
// baseline of the same case.
void print_summary(const std::vector<WorkloadResult>& results, const WorkloadOptions& options) {
  // A case without a baseline figure: either --runtimes left the baselines out (they are built in,
  // W8's allocators always), or none of the case's baselines is in this build.
  std::string no_baseline = "(none built in)";
  if (!options.runtimes.empty()) {
    std::string names;
    for (const std::string& name : options.runtimes) names += (names.empty() ? "" : ",") + name;
    no_baseline = "(none run: --runtimes " + names + ", or not built in)";
  }
  std::printf("\n| workload | case | nerve | baseline | baseline figure | nerve / baseline | goal |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (const auto& result : results) {
    for (const auto& nerve_m : result.measurements) {
      if (nerve_m.runtime != "nerve") continue;
      std::string goal_text = "";
      for (const auto& goal : result.goals) {
        if (goal.case_name != nerve_m.case_name) continue;
        if (const auto check = nerve::bench::check_goal(result, goal); check && check->nerve == &nerve_m) {
          char text[160];
          std::snprintf(text, sizeof text, "%s: %.2f, %s", goal.text.c_str(), check->ratio,
                        check->met ? "met" : "**not met**");
          goal_text = text;
        }
      }
      bool first = true;
      for (const auto& base : result.measurements) {
        if (base.case_name != nerve_m.case_name || base.runtime == "nerve") continue;
        std::printf("| %s | %s | %s %s | %s | %s %s | %.2f | %s |\n", first ? result.id.c_str() : "",
                    first ? nerve_m.case_name.c_str() : "", first ? figure(nerve_m.value).c_str() : "",
                    first ? nerve_m.unit.c_str() : "", base.variant.c_str(), figure(base.value).c_str(),
                    base.unit.c_str(), nerve_m.value / base.value, first ? goal_text.c_str() : "");
        first = false;
      }
      if (first) {
        std::printf("| %s | %s | %s %s | %s | | | |\n", result.id.c_str(), nerve_m.case_name.c_str(),
                    figure(nerve_m.value).c_str(), nerve_m.unit.c_str(), no_baseline.c_str());
      }
    }
  }
}

int probe_idle(unsigned threads) {
  std::printf("idle spinning after a burst of fork-joins, %u threads (250 us slices, 50 ms window):\n",
              threads);
  for (const auto& profile : nerve::bench::probe_idle_spin(threads)) {
    std::printf("  %-8s CPU used while idle: %7.2f ms; busy (>= 20%% of a core) until %6.1f ms\n",
                profile.runtime.c_str(), profile.busy_cpu_ms, profile.busy_until_ms);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  nerve::bench::reexec_with_static_tls(argv);  // W8 dlopens jemalloc (allocator_baselines.hpp)
  const CommandLine line = parse(argc, argv);
  if (line.help) {
    // The help asked for is the answer: on stdout, exit 0 (1 when it could not be written).
    print_usage(stdout);
    if (std::fflush(stdout) != 0 || std::ferror(stdout) != 0) {
      std::fprintf(stderr,
                   "nerve-bench-core: the standard output was closed early: the help is incomplete\n");
      return 1;
    }
    return 0;
  }
  const auto& workloads = nerve::bench::core_workloads();
  if (line.list) {
    for (const auto& entry : workloads) std::printf("%s  %s\n", entry.id, entry.title);
    return 0;
  }
  if (line.probe_idle) return probe_idle(line.options.threads);

  const WorkloadOptions& options = line.options;
  std::printf(
      "nerve-bench-core: %u thread%s per runtime, %d repetitions + %d warm-up, %s sizes, settle %d ms\n",
      options.threads, options.threads == 1 ? "" : "s", options.repetitions, options.warmup,
      options.quick ? "quick" : "full", options.settle_ms);
  std::printf("baselines: oneTBB %s, OpenMP %s; %s; %u hardware threads; %s\n",
              nerve::bench::have_tbb() ? "yes" : "no (not built in)",
              nerve::bench::have_openmp() ? "yes" : "no (not built in)", cpu_model().c_str(),
              std::thread::hardware_concurrency(), today().c_str());
  std::printf("figures: median of the repetitions; variants run interleaved, round by round\n");

  const auto start = std::chrono::steady_clock::now();
  std::vector<WorkloadResult> results;
  try {
    for (const auto& entry : workloads) {
      if (!line.only.empty() && std::find(line.only.begin(), line.only.end(), entry.id) == line.only.end())
        continue;
      const double load_before = load_average();
      results.push_back(entry.run(options));
      print_result(results.back(), load_before);
    }
  } catch (const std::exception& error) {
    std::fprintf(stderr, "nerve-bench-core: %s\n", error.what());
    return 1;
  }
  print_summary(results, options);

  int failures = 0;
  for (const auto& result : results) {
    for (const auto& m : result.measurements) {
      if (m.verified) continue;
      std::fprintf(stderr, "nerve-bench-core: %s %s: verification failed: %s\n", result.id.c_str(),
                   m.variant.c_str(), m.note.c_str());
      ++failures;
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("\n%zu workload(s) in %.1f s; %s\n", results.size(), seconds,
              failures == 0 ? "every result verified" : "SOME RESULTS FAILED VERIFICATION");
  return failures == 0 ? 0 : 1;
}
