// html_report.cpp — --html: one self-contained page (inline CSS and SVG; no script, no external
// resource, so it opens from a file, offline, and archives as one file). Sections: the summary, one
// chart per workload case (nerve against each baseline), W11's latencies, the scaling charts, the
// trace timeline (only with --trace), the comparison (only with --compare), machine and config.
#include <cstdio>
#include <stdexcept>

#include "common/files.hpp"
#include "report.hpp"
#include "svg.hpp"

namespace nerve::benchmark {
namespace {

constexpr const char* style = R"(
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px auto; max-width: 1000px; color: #212529; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 32px; border-bottom: 1px solid #dee2e6; } h3 { font-size: 15px; }
table { border-collapse: collapse; margin: 8px 0; } td, th { border: 1px solid #dee2e6; padding: 3px 8px; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; } .fail { color: #c92a2a; font-weight: bold; }
.better { color: #2b8a3e; } .worse { color: #c92a2a; font-weight: bold; } .same { color: #868e96; }
svg.chart { display: block; margin: 6px 0 16px; } svg .label { font-size: 12px; fill: #343a40; } svg .label.nerve { font-weight: bold; }
svg .value { font-size: 12px; fill: #212529; } svg .note { font-size: 11px; fill: #868e96; }
svg .axis { stroke: #adb5bd; } svg .whisker { stroke: #212529; stroke-width: 1.5; } svg .ideal { stroke: #adb5bd; stroke-dasharray: 4 3; }
.meta { color: #495057; } details { margin: 8px 0; }
)";

std::string cell(const std::string& text, bool number = false) {
  return std::string(number ? "<td class=\"num\">" : "<td>") + escape_html(text) + "</td>";
}

std::string chart_id(const std::string& workload, std::size_t index) {
  return workload + "-" + std::to_string(index);
}

bool has_latency(const std::vector<const Measurement*>& bars) {
  for (const auto* m : bars)
    for (const auto& [name, value] : m->extra)
      if (name == "p99 latency ms") return true;
  return false;
}

std::string summary_table(const RunReport& report) {
  std::string html =
      "<table><tr><th>workload</th><th>case</th><th>nerve</th><th>best baseline</th><th>nerve "
      "×</th><th>checks</th></tr>";
  for (const auto& run : report.workloads) {
    for (const std::string& case_name : cases(run.result)) {
      const Measurement* nerve = headline(run.result, case_name);
      const Measurement* best = nullptr;
      bool verified = true;
      for (const auto& m : run.result.measurements) {
        if (m.case_name != case_name) continue;
        verified = verified && m.verified;
        if (m.runtime == "nerve") continue;
        if (best == nullptr || (m.lower_is_better ? m.value < best->value : m.value > best->value)) best = &m;
      }
      html += "<tr>" + cell(run.result.id + " " + run.result.title) + cell(case_name) +
              cell(nerve ? format_figure(nerve->value) + " " + nerve->unit : "—", true) +
              cell(best ? best->variant + ": " + format_figure(best->value) + " " + best->unit : "—") +
              cell(nerve && best ? format_ratio(speed(*nerve, *best)) : "—", true) +
              (verified ? cell("verified") : "<td class=\"fail\">FAILED</td>") + "</tr>";
    }
  }
  return html + "</table>";
}

std::string workload_section(const WorkloadRun& run, const std::vector<Compared>* comparison) {
  const WorkloadResult& r = run.result;
  std::string html =
      "<section id=\"" + escape_html(r.id) + "\"><h2>" + escape_html(r.id + " " + r.title) + "</h2>";
  char meta[160];
  std::snprintf(meta, sizeof meta, "%.1f s, load average %.1f → %.1f", run.duration_s, run.load_before,
                run.load_after);
  html += "<p class=\"meta\">" + escape_html(r.size) + " — " + meta + "</p>";
  std::size_t index = 0;
  for (const std::string& case_name : cases(r)) {
    std::vector<const Measurement*> bars;
    for (const auto& m : r.measurements)
      if (m.case_name == case_name) bars.push_back(&m);
    const Measurement* nerve = headline(r, case_name);
    html += "<h3>" + escape_html(case_name) + "</h3>" + bar_chart(chart_id(r.id, index++), bars, nerve);
    if (has_latency(bars)) html += latency_chart(chart_id(r.id, index++), bars);
    html +=
        "<table><tr><th>variant</th><th>median</th><th>MAD</th><th>min .. max</th><th>nerve "
        "×</th><th>details</th>" +
        std::string(comparison ? "<th>vs baseline run</th>" : "") + "</tr>";
    for (const auto* m : bars) {
      std::string details = m->verified ? m->note : "CHECK FAILED: " + m->note;
      for (const auto& [name, value] : m->extra)
        details += (details.empty() ? "" : "; ") + name + " " + format_figure(value);
      html += "<tr>" + cell(m->variant) + cell(format_figure(m->value) + " " + m->unit, true) +
              cell(format_figure(m->mad), true) +
              cell(format_figure(m->min) + " .. " + format_figure(m->max), true) +
              cell(m == nerve || nerve == nullptr ? "—" : format_ratio(speed(*nerve, *m)), true) +
              (m->verified ? cell(details) : "<td class=\"fail\">" + escape_html(details) + "</td>");
      if (comparison != nullptr) {
        std::string mark = "—", css = "same";
        for (const auto& c : *comparison) {
          if (c.workload != r.id || c.case_name != m->case_name || c.variant != m->variant) continue;
          css = change_name(c.verdict);
          char noise[32];
          std::snprintf(noise, sizeof noise, " (noise ±%.0f%%)", c.threshold * 100);
          mark = c.verdict == Change::missing
                     ? "new"
                     : std::string(change_name(c.verdict)) + " " + format_change(c.change) + noise;
        }
        html += "<td class=\"" + css + "\">" + escape_html(mark) + "</td>";
      }
      html += "</tr>";
    }
    html += "</table>";
  }
  return html + "</section>";
}

std::string machine_section(const RunReport& report) {
  std::string html = "<h2>Machine, versions and configuration</h2><table>";
  html += "<tr>" + cell("CPU") +
          cell(report.cpu_model + ", " + std::to_string(report.hardware_threads) + " hardware threads") +
          "</tr>";
  html += "<tr>" + cell("topology") +
          cell(report.topology_description + ": " + std::to_string(report.packages) + " package(s), " +
               std::to_string(report.numa_nodes) + " NUMA node(s), " + std::to_string(report.cores) +
               " core(s), " + std::to_string(report.pus) + " PU(s)") +
          "</tr>";
  std::string caches;
  for (const auto& [level, bytes] : report.caches)
    caches +=
        (caches.empty() ? "L" : ", L") + std::to_string(level) + " " + std::to_string(bytes / 1024) + " KiB";
  html += "<tr>" + cell("caches") + cell(caches) + "</tr>";
  html += "<tr>" + cell("host") + cell(report.hostname) + "</tr>";
  for (const auto& [name, version] : report.versions)
    html += "<tr>" + cell(name) + cell(version.empty() ? "(not built in)" : version) + "</tr>";
  html += "</table><details><summary>effective nerve configuration (" + std::to_string(report.config.size()) +
          " keys)</summary><table><tr><th>key</th><th>value</th><th>from</th></tr>";
  for (const auto& entry : report.config)
    html += "<tr>" + cell(entry.key) + cell(entry.value) + cell(entry.origin) + "</tr>";
  return html + "</table></details>";
}

}  // namespace

void write_html(const RunReport& report, const std::vector<Compared>* comparison,
                const std::optional<std::filesystem::path>& trace, const std::filesystem::path& path) {
  std::string html =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>openclaw-benchmark "
      "report</title><style>";
  html += style;
  html += "</style></head><body><h1>openclaw-benchmark report</h1>";
  char meta[512];
  std::snprintf(
      meta, sizeof meta,
      "nerve %s, commit %s — %s, %.1f s — %u thread%s per runtime, %s sizes, median of %d after %d warm-up",
      report.tool_version.c_str(), report.git_commit.c_str(), report.started_at.c_str(), report.duration_s,
      report.threads, report.threads == 1 ? "" : "s", report.quick ? "quick" : "full", report.repetitions,
      report.warmup);
  html += "<p class=\"meta\">" + escape_html(meta) + "</p>";
  if (const std::string tuning = tuning_summary(report); !tuning.empty())
    html += "<p class=\"meta\">Tuned with: " + escape_html(tuning) + "</p>";
  std::string verdict = "Every result verified.";
  if (!report.verified()) {
    const std::size_t failed = report.failed_results();
    const std::size_t not_run = report.not_run().size();
    verdict = "<span class=\"fail\">";
    if (failed != 0) verdict += std::to_string(failed) + " result(s) FAILED verification. ";
    if (not_run != 0) verdict += std::to_string(not_run) + " workload(s) named by --only COULD NOT RUN. ";
    if (report.measured_nothing_at_all()) {
      verdict += std::string("NOTHING VERIFIED: ") + nothing_measured + ". ";
    } else if (const std::size_t empty = report.measured_nothing().size(); empty != 0) {
      verdict += std::to_string(empty) +
                 " workload(s) MEASURED NOTHING (--runtimes selects none of their variants): not verified. ";
    }
    verdict += "</span>";
  }
  html += std::string("<p>") + verdict +
          " <b>nerve ×</b> is how many times faster nerve is than the variant (above 1: nerve is faster). "
          "These figures come from "
          "one machine at one moment; the load average is given per workload.</p>";
  html += "<h2>Summary</h2>" + summary_table(report);
  for (const auto& skipped : report.skipped) {
    const bool named = report.named(skipped);
    html += std::string("<p class=\"") + (named ? "fail" : "meta") + "\">" +
            escape_html(skipped.id + " " + skipped.title +
                        (named ? ": CHECK FAILED, could not run here — " : ": skipped — ") + skipped.reason) +
            "</p>";
  }
  for (const auto& run : report.workloads) html += workload_section(run, comparison);
  if (!report.scaling.empty()) {
    html +=
        "<h2>Scaling over workers</h2><p class=\"meta\">nerve's variant alone, quick sizes, at each worker "
        "count.</p>";
    for (const auto& series : report.scaling) {
      html += "<h3>" + escape_html(series.workload + " " + series.case_name + " (" + series.variant + ")") +
              "</h3>";
      html += scaling_chart("scaling-" + series.workload, series);
    }
  }
  if (trace) {
    // The trace is read after the run (the run may be what wrote it): one that cannot be read costs
    // the report its timeline, not the whole run's figures.
    std::string summary;
    try {
      const std::string svg = trace_timeline_svg(*trace, &summary);
      html += "<h2>Timeline excerpt</h2><p class=\"meta\">" + escape_html(summary) + "</p>" + svg;
    } catch (const std::exception& error) {
      std::fprintf(stderr, "openclaw-benchmark: warning: --trace %s; the HTML report has no timeline\n",
                   error.what());
      html += "<h2>Timeline excerpt</h2><p class=\"meta\">Not shown: " + escape_html(error.what()) + "</p>";
    }
  }
  if (comparison != nullptr) {
    std::size_t better = 0, worse = 0, same = 0;
    for (const auto& c : *comparison) {
      better += c.verdict == Change::better;
      worse += c.verdict == Change::worse;
      same += c.verdict == Change::same;
    }
    html += "<h2>Comparison with the baseline run</h2><p>" + std::to_string(better) + " better, " +
            std::to_string(worse) + " worse, " + std::to_string(same) +
            " within noise (a change counts when it exceeds max(3 × combined MAD, 5 %)); per figure in the "
            "tables above.</p>";
  }
  html += machine_section(report);
  html += "</body></html>\n";
  nerve::tools::write_file(path, html);
}

}  // namespace nerve::benchmark
