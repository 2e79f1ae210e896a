// trace_timeline.cpp — the HTML report's timeline excerpt of a Chrome trace-event file (the format
// Perfetto and chrome://tracing open): complete events ("ph": "X", ts + dur) and begin/end pairs
// ("B"/"E") per thread, thread names from "M" metadata events; times in microseconds. The excerpt
// is the first 400 spans (or all of them): one lane per thread, one rectangle per span, coloured by
// name, each with its name and duration as a tooltip.
#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "common/files.hpp"
#include "report.hpp"
#include "svg.hpp"

namespace nerve::benchmark {
namespace {

struct Span {
  double start = 0, duration = 0;
  std::string name;
  std::pair<long long, long long> lane;  // (pid, tid)
};

constexpr std::size_t excerpt_spans = 400;

std::string palette(const std::string& name) {
  static const char* colours[] = {"#d9480f", "#1c7ed6", "#2f9e44", "#7048e8",
                                  "#e67700", "#0c8599", "#c2255c", "#5c940d"};
  return colours[std::hash<std::string>{}(name) % 8];
}

long long id_of(const nlohmann::json& event, const char* key) {
  if (!event.contains(key)) return 0;
  const auto& v = event.at(key);
  return v.is_number() ? v.get<long long>() : static_cast<long long>(std::hash<std::string>{}(v.dump()));
}

std::string number(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", v);
  return text;
}

}  // namespace

std::string trace_timeline_svg(const std::filesystem::path& path, std::string* summary) {
  const std::string text = nerve::tools::read_file(path);  // its errors name the file
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& error) {
    throw std::runtime_error(path.string() + ": not JSON: " + error.what());
  }
  const nlohmann::json& events = doc.is_array() ? doc : doc.value("traceEvents", nlohmann::json::array());
  if (!events.is_array())
    throw std::runtime_error(path.string() + ": no trace events (Chrome trace-event format)");

  std::vector<Span> spans;
  std::map<std::pair<long long, long long>, std::string> names;
  std::map<std::pair<long long, long long>, std::vector<Span>> open;  // B events waiting for their E
  for (const auto& event : events) {
    if (!event.is_object() || !event.contains("ph")) continue;
    const std::string ph = event.at("ph").get<std::string>();
    const std::pair<long long, long long> lane{id_of(event, "pid"), id_of(event, "tid")};
    const std::string name = event.value("name", std::string("?"));
    if (ph == "M" && name == "thread_name" && event.contains("args")) {
      names[lane] = event.at("args").value("name", std::string());
    } else if (ph == "X" && event.contains("ts")) {
      spans.push_back({event.at("ts").get<double>(), event.value("dur", 0.0), name, lane});
    } else if (ph == "B" && event.contains("ts")) {
      open[lane].push_back({event.at("ts").get<double>(), 0, name, lane});
    } else if (ph == "E" && event.contains("ts") && !open[lane].empty()) {
      Span span = open[lane].back();
      open[lane].pop_back();
      span.duration = event.at("ts").get<double>() - span.start;
      spans.push_back(span);
    }
  }
  if (spans.empty()) throw std::runtime_error(path.string() + ": no complete (X) or begin/end (B/E) events");
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.start < b.start; });
  const std::size_t total = spans.size();
  std::set<std::pair<long long, long long>> all_lanes;  // the trace's threads, not only the excerpt's
  for (const Span& s : spans) all_lanes.insert(s.lane);
  if (spans.size() > excerpt_spans) spans.resize(excerpt_spans);
  const double t0 = spans.front().start;
  double t1 = t0;
  for (const Span& s : spans) t1 = std::max(t1, s.start + s.duration);
  if (t1 <= t0) t1 = t0 + 1;

  std::vector<std::pair<long long, long long>> lanes;
  for (const Span& s : spans)
    if (std::find(lanes.begin(), lanes.end(), s.lane) == lanes.end()) lanes.push_back(s.lane);
  std::sort(lanes.begin(), lanes.end());
  constexpr double label_w = 150, plot_w = 700, lane_h = 22, top = 6;
  const double height = top + lane_h * static_cast<double>(lanes.size()) + 28;
  std::string svg =
      "<svg class=\"chart\" data-chart=\"trace-timeline\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" +
      number(label_w + plot_w + 20) + "\" height=\"" + number(height) + "\" role=\"img\">";
  for (std::size_t l = 0; l < lanes.size(); ++l) {
    const auto found = names.find(lanes[l]);
    const std::string label =
        found != names.end() && !found->second.empty()
            ? found->second
            : "pid " + std::to_string(lanes[l].first) + " tid " + std::to_string(lanes[l].second);
    svg += "<text x=\"" + number(label_w - 6) + "\" y=\"" + number(top + lane_h * l + 15) +
           "\" text-anchor=\"end\" class=\"label\">" + escape_html(label) + "</text>";
  }
  for (const Span& s : spans) {
    const std::size_t l =
        static_cast<std::size_t>(std::find(lanes.begin(), lanes.end(), s.lane) - lanes.begin());
    const double x = label_w + plot_w * (s.start - t0) / (t1 - t0);
    const double w = std::max(0.5, plot_w * s.duration / (t1 - t0));
    svg += "<rect x=\"" + number(x) + "\" y=\"" + number(top + lane_h * l + 3) + "\" width=\"" + number(w) +
           "\" height=\"" + number(lane_h - 6) + "\" fill=\"" + palette(s.name) + "\"><title>" +
           escape_html(s.name) + ": " + format_figure(s.duration) + " µs at +" + format_figure(s.start - t0) +
           " µs</title></rect>";
  }
  svg += "<text x=\"" + number(label_w) + "\" y=\"" + number(height - 8) + "\" class=\"note\">" +
         escape_html("0 .. " + format_figure(t1 - t0) + " µs; first " + std::to_string(spans.size()) +
                     " of " + std::to_string(total) + " spans") +
         "</text></svg>";
  if (summary != nullptr) {
    *summary = std::to_string(total) + " spans on " + std::to_string(all_lanes.size()) + " thread(s) in " +
               path.filename().string() + "; the excerpt shows the first " + std::to_string(spans.size()) +
               " (" + format_figure(t1 - t0) + " µs)";
  }
  return svg;
}

}  // namespace nerve::benchmark
