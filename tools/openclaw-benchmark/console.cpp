// console.cpp — the terminal output: a progress bar redrawn in place on a TTY (plain lines
// elsewhere, e.g. in CI logs), and the results table.
#include <cmath>
#include <cstdio>
#include <string>

#include <fmt/format.h>

#include "report.hpp"

namespace nerve::benchmark {
namespace {

std::string pad(const std::string& text, std::size_t width) {
  // Width in characters, counting UTF-8 continuation bytes out (the table has "×" and "—").
  std::size_t length = 0;
  for (unsigned char c : text) length += (c & 0xC0) != 0x80;
  return length >= width ? text : text + std::string(width - length, ' ');
}

std::string right(const std::string& text, std::size_t width) {
  std::size_t length = 0;
  for (unsigned char c : text) length += (c & 0xC0) != 0x80;
  return length >= width ? text : std::string(width - length, ' ') + text;
}

std::string extras(const Measurement& m) {
  std::string text;
  for (const auto& [name, value] : m.extra)
    text += (text.empty() ? "" : ", ") + name + " " + format_figure(value);
  return text;
}

// workload_verdict() is a workload's line in the table and the progress: one that measured nothing
// (--runtimes selected none of its variants) verified nothing.
const char* workload_verdict(const WorkloadResult& result) {
  if (result.measurements.empty()) return "MEASURED NOTHING";
  return result.verified() ? "verified" : "VERIFICATION FAILED";
}

std::string mark(const std::vector<Compared>* comparison, const std::string& id, const Measurement& m) {
  if (comparison == nullptr) return "";
  for (const auto& c : *comparison) {
    if (c.workload != id || c.case_name != m.case_name || c.variant != m.variant) continue;
    if (c.verdict == Change::missing) return "  missing";
    return "  " + std::string(change_name(c.verdict)) + " " + format_change(c.change);
  }
  return "  missing";
}

}  // namespace

std::string format_figure(double value) {
  char text[32];
  const double magnitude = value < 0 ? -value : value;
  std::snprintf(text, sizeof text,
                magnitude >= 1e6   ? "%.3g"
                : magnitude >= 100 ? "%.0f"
                : magnitude >= 10  ? "%.1f"
                : magnitude >= 1   ? "%.2f"
                                   : "%.3g",  // three significant digits: 0.0123, not 0.01
                value);
  return text;
}

std::string format_change(double change) {
  // Rounded first: a change that rounds to nothing is "+0%", whatever its sign (an unchanged time's
  // change is -0.0, which printed "same -0%").
  const double percent = std::round(change * 100);
  char text[32];
  std::snprintf(text, sizeof text, "%+.0f%%", percent == 0 ? 0.0 : percent);
  return text;
}

std::string format_ratio(double ratio) {
  char text[32];
  std::snprintf(text, sizeof text, ratio >= 100 ? "%.0f" : ratio >= 10 ? "%.1f" : "%.2f", ratio);
  return text;
}

std::string tuning_summary(const RunReport& report) {
  std::string text = report.config_file.empty() ? "" : "config " + report.config_file;
  for (const auto& [key, value] : report.parameters) text += (text.empty() ? "" : "; ") + key + "=" + value;
  return text;
}

void print_table(const RunReport& report, const std::vector<Compared>* comparison) {
  std::printf(
      "\nopenclaw-benchmark %s (commit %s): %u thread%s per runtime, %s sizes, median of %d after %d "
      "warm-up\n",
      report.tool_version.c_str(), report.git_commit.c_str(), report.threads, report.threads == 1 ? "" : "s",
      report.quick ? "quick" : "full", report.repetitions, report.warmup);
  if (const std::string tuning = tuning_summary(report); !tuning.empty())
    std::printf("tuned with: %s (NERVE_* variables: see --json's config)\n", tuning.c_str());
  std::printf("%s, %u hardware threads. nerve ×: how many times faster nerve is (>1: nerve faster)\n",
              report.cpu_model.c_str(), report.hardware_threads);
  for (const auto& run : report.workloads) {
    const WorkloadResult& r = run.result;
    std::printf("\n%s %s — %s  [%.1f s, load %.1f → %.1f] %s\n", r.id.c_str(), r.title.c_str(),
                r.size.c_str(), run.duration_s, run.load_before, run.load_after, workload_verdict(r));
    for (const std::string& case_name : cases(r)) {
      if (cases(r).size() > 1 || case_name != r.title) std::printf("  %s\n", case_name.c_str());
      const Measurement* nerve = headline(r, case_name);
      std::printf("    %s %s %s %s  %s\n", pad("variant", 40).c_str(), right("median", 18).c_str(),
                  right("±MAD", 8).c_str(), pad("  [min .. max]", 20).c_str(), right("nerve ×", 8).c_str());
      for (const auto& m : r.measurements) {
        if (m.case_name != case_name) continue;
        const std::string ratio = &m == nerve || nerve == nullptr ? "—" : format_ratio(speed(*nerve, m));
        std::string detail = m.verified ? extras(m) : "CHECK FAILED: " + m.note;
        if (m.verified && !m.note.empty()) detail = m.note + (detail.empty() ? "" : "; " + detail);
        std::printf("    %s %s %s %s  %s%s%s\n", pad(m.variant, 40).c_str(),
                    right(format_figure(m.value) + " " + m.unit, 18).c_str(),
                    right(format_figure(m.mad), 8).c_str(),
                    pad("  [" + format_figure(m.min) + " .. " + format_figure(m.max) + "]", 20).c_str(),
                    right(ratio, 8).c_str(), mark(comparison, r.id, m).c_str(),
                    detail.empty() ? "" : ("  " + detail).c_str());
      }
    }
  }
  for (const auto& skipped : report.skipped) {
    const bool named = report.named(skipped);
    std::printf("\n%s %s — %s: %s\n", skipped.id.c_str(), skipped.title.c_str(),
                named ? "CHECK FAILED: could not run here" : "skipped", skipped.reason.c_str());
  }
  if (!report.scaling.empty()) {
    std::printf("\nscaling (nerve alone, quick sizes):\n");
    for (const auto& series : report.scaling) {
      std::printf("  %-4s %-28s", series.workload.c_str(), series.case_name.c_str());
      for (const auto& point : series.points)
        std::printf("  %u: %s%s", point.threads, format_figure(point.value).c_str(),
                    point.verified ? "" : " (FAILED)");
      std::printf("  %s\n", series.unit.c_str());
    }
  }
  const std::size_t figures = report.figures();
  const std::size_t failed = report.failed_results();
  const std::vector<const Skipped*> not_run = report.not_run();
  std::string verdict = failed == 0 ? "" : std::to_string(failed) + " FAILED VERIFICATION";
  if (!not_run.empty())
    verdict += (verdict.empty() ? "" : "; ") + std::to_string(not_run.size()) +
               " workload(s) named by --only COULD NOT RUN";
  if (const std::size_t empty = report.measured_nothing().size();
      empty != 0 && !report.measured_nothing_at_all())
    verdict += (verdict.empty() ? "" : "; ") + std::to_string(empty) +
               " workload(s) MEASURED NOTHING (--runtimes selects none of their variants): NOT VERIFIED";
  if (verdict.empty())
    verdict = report.measured_nothing_at_all() ? std::string("NOTHING VERIFIED: ") + nothing_measured
                                               : "every result verified";
  std::printf("\n%zu workload(s), %zu figure%s in %.1f s: %s\n", report.workloads.size(), figures,
              figures == 1 ? "" : "s", report.duration_s, verdict.c_str());
  std::fflush(stdout);
}

void Progress::clear() {
  if (terminal_ && drawn_) {
    std::printf("\r\x1b[2K");
    drawn_ = false;
  }
}

void Progress::start_workload(std::size_t index, std::size_t count, const std::string& id,
                              const std::string& title) {
  clear();
  prefix_ = fmt::format("[{}/{}] {}", index + 1, count, id);
  cases_shown_.clear();
  if (!terminal_) std::printf("%s %s: running\n", prefix_.c_str(), title.c_str());
  std::fflush(stdout);
}

void Progress::update(const bench::Progress& progress) {
  if (!terminal_) {
    if (cases_shown_.insert(progress.case_name).second)
      std::printf("%s   case %s\n", prefix_.c_str(), progress.case_name.c_str());
    std::fflush(stdout);
    return;
  }
  constexpr int width = 24;
  const int filled = progress.total == 0 ? 0 : width * progress.done / progress.total;
  std::printf("\r\x1b[2K%s %s [%s%s] %d/%d %s", prefix_.c_str(), progress.case_name.c_str(),
              std::string(static_cast<std::size_t>(filled), '#').c_str(),
              std::string(static_cast<std::size_t>(width - filled), '.').c_str(), progress.done,
              progress.total, progress.variant.c_str());
  drawn_ = true;
  std::fflush(stdout);
}

void Progress::finish_workload(const WorkloadRun& run) {
  clear();
  std::printf("%s %s: %s in %.1f s\n", prefix_.c_str(), run.result.title.c_str(),
              workload_verdict(run.result), run.duration_s);
  std::fflush(stdout);
}

void Progress::message(const std::string& text) {
  clear();
  std::printf("%s\n", text.c_str());
  std::fflush(stdout);
}

}  // namespace nerve::benchmark
