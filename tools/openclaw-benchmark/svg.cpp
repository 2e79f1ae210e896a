#include "svg.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace nerve::benchmark {
namespace {

std::string number(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", v);
  return text;
}

double extra(const Measurement& m, const std::string& name) {
  for (const auto& [key, value] : m.extra)
    if (key == name) return value;
  return -1;
}

}  // namespace

namespace {

// utf8_length(): the length of the valid UTF-8 sequence at text[at], 0 when there is none (a stray
// continuation byte, an overlong form, a surrogate, past U+10FFFF, a sequence cut short).
std::size_t utf8_length(const std::string& text, std::size_t at) {
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const unsigned lead = byte(at);
  if (lead < 0x80) return 1;
  std::size_t length = 0;
  unsigned low = 0x80, high = 0xBF;  // the range of the second byte
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    if (lead == 0xE0) low = 0xA0;
    if (lead == 0xED) high = 0x9F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    if (lead == 0xF0) low = 0x90;
    if (lead == 0xF4) high = 0x8F;
  } else {
    return 0;
  }
  if (at + length > text.size() || byte(at + 1) < low || byte(at + 1) > high) return 0;
  for (std::size_t i = 2; i < length; ++i) {
    if ((byte(at + i) & 0xC0) != 0x80) return 0;
  }
  return length;
}

}  // namespace

// escape_html() also writes each byte that is not part of valid UTF-8 as U+FFFD, as the JSON report
// does (BENCHMARK_JSON.md): the page declares charset utf-8, and a path or name from the user (a
// --config file name) need not be.
std::string escape_html(const std::string& text) {
  std::string out;
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t length = utf8_length(text, at);
    if (length == 0) {
      out += "\xEF\xBF\xBD";
      ++at;
      continue;
    }
    if (length > 1) {
      out.append(text, at, length);
      at += length;
      continue;
    }
    switch (text[at++]) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += text[at - 1];
    }
  }
  return out;
}

std::string colour(const std::string& runtime) {
  if (runtime == "nerve") return "#d9480f";
  if (runtime == "oneTBB") return "#1c7ed6";
  if (runtime == "OpenMP") return "#2f9e44";
  if (runtime == "naive") return "#868e96";
  if (runtime == "BLAS") return "#7048e8";
  if (runtime == "STREAM") return "#e67700";
  return "#495057";
}

std::string bar_chart(const std::string& chart_id, const std::vector<const Measurement*>& bars,
                      const Measurement* nerve) {
  // The right margin holds the value label after the longest bar ("11996 requests/s nerve × 1.00").
  constexpr double label_w = 290, plot_w = 360, row_h = 26, top = 10;
  const double width = label_w + plot_w + 260, height = top + row_h * static_cast<double>(bars.size()) + 26;
  double scale_max = 0;
  for (const auto* m : bars) scale_max = std::max({scale_max, m->value, m->max});
  if (scale_max <= 0) scale_max = 1;
  std::string svg = "<svg class=\"chart\" data-chart=\"" + escape_html(chart_id) +
                    "\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" + number(width) + "\" height=\"" +
                    number(height) + "\" role=\"img\">";
  double y = top;
  for (const auto* m : bars) {
    const double w = plot_w * m->value / scale_max;
    const bool is_nerve = m == nerve;
    svg += "<text x=\"" + number(label_w - 6) + "\" y=\"" + number(y + 17) +
           "\" text-anchor=\"end\" class=\"label" + (is_nerve ? " nerve" : "") + "\">" +
           escape_html(m->variant) + "</text>";
    svg += "<rect x=\"" + number(label_w) + "\" y=\"" + number(y + 4) + "\" width=\"" +
           number(std::max(w, 1.0)) + "\" height=\"" + number(row_h - 8) + "\" fill=\"" + colour(m->runtime) +
           "\"" + (m->verified ? "" : " fill-opacity=\"0.3\"") + "><title>" +
           escape_html(m->variant + ": " + format_figure(m->value) + " " + m->unit + " [" +
                       format_figure(m->min) + " .. " + format_figure(m->max) + "], MAD " +
                       format_figure(m->mad)) +
           "</title></rect>";
    const double x0 = label_w + plot_w * m->min / scale_max, x1 = label_w + plot_w * m->max / scale_max;
    svg += "<line x1=\"" + number(x0) + "\" x2=\"" + number(x1) + "\" y1=\"" + number(y + row_h / 2) +
           "\" y2=\"" + number(y + row_h / 2) + "\" class=\"whisker\"/>";
    std::string text = format_figure(m->value) + " " + m->unit;
    if (!m->verified)
      text += "  CHECK FAILED";
    else if (nerve != nullptr && !is_nerve)
      text += "   nerve × " + format_ratio(speed(*nerve, *m));
    svg += "<text x=\"" + number(std::max(label_w + w, x1) + 6) + "\" y=\"" + number(y + 17) +
           "\" class=\"value\">" + escape_html(text) + "</text>";
    y += row_h;
  }
  const std::string direction =
      !bars.empty() && bars.front()->lower_is_better ? "lower is better" : "higher is better";
  svg += "<line x1=\"" + number(label_w) + "\" x2=\"" + number(label_w) + "\" y1=\"" + number(top) +
         "\" y2=\"" + number(y) + "\" class=\"axis\"/>";
  svg += "<text x=\"" + number(label_w) + "\" y=\"" + number(y + 18) + "\" class=\"note\">" +
         escape_html((bars.empty() ? std::string() : bars.front()->unit) + ", " + direction +
                     "; whiskers: min .. max of the repetitions") +
         "</text></svg>";
  return svg;
}

std::string latency_chart(const std::string& chart_id, const std::vector<const Measurement*>& bars) {
  constexpr double label_w = 290, plot_w = 360, row_h = 34, top = 10;
  const double height = top + row_h * static_cast<double>(bars.size()) + 26;
  double scale_max = 0;
  for (const auto* m : bars) scale_max = std::max(scale_max, extra(*m, "p99 latency ms"));
  if (scale_max <= 0) scale_max = 1;
  // Latencies span orders of magnitude (a backlog reaches seconds): a log scale from 0.01 ms.
  const double low = std::log10(0.01), high = std::log10(std::max(scale_max, 0.1) * 1.2);
  auto x_of = [&](double ms) {
    return label_w + plot_w * (std::log10(std::max(ms, 0.01)) - low) / (high - low);
  };
  std::string svg = "<svg class=\"chart\" data-chart=\"" + escape_html(chart_id) +
                    "\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" + number(label_w + plot_w + 170) +
                    "\" height=\"" + number(height) + "\" role=\"img\">";
  double y = top;
  for (const auto* m : bars) {
    const double p50 = extra(*m, "p50 latency ms"), p99 = extra(*m, "p99 latency ms");
    svg += "<text x=\"" + number(label_w - 6) + "\" y=\"" + number(y + 20) +
           "\" text-anchor=\"end\" class=\"label\">" + escape_html(m->variant) + "</text>";
    svg += "<rect x=\"" + number(label_w) + "\" y=\"" + number(y + 4) + "\" width=\"" +
           number(x_of(p50) - label_w) + "\" height=\"12\" fill=\"" + colour(m->runtime) + "\"><title>p50 " +
           format_figure(p50) + " ms</title></rect>";
    svg += "<rect x=\"" + number(label_w) + "\" y=\"" + number(y + 17) + "\" width=\"" +
           number(x_of(p99) - label_w) + "\" height=\"12\" fill=\"" + colour(m->runtime) +
           "\" fill-opacity=\"0.45\"><title>p99 " + format_figure(p99) + " ms</title></rect>";
    svg += "<text x=\"" + number(x_of(p99) + 6) + "\" y=\"" + number(y + 20) + "\" class=\"value\">p50 " +
           format_figure(p50) + " ms, p99 " + format_figure(p99) + " ms</text>";
    y += row_h;
  }
  svg += "<text x=\"" + number(label_w) + "\" y=\"" + number(y + 18) +
         "\" class=\"note\">latency from arrival to answer, log scale; solid p50, light p99</text></svg>";
  return svg;
}

std::string scaling_chart(const std::string& chart_id, const ScalingSeries& series) {
  constexpr double left = 60, top = 20, plot_w = 360, plot_h = 180;
  std::string svg = "<svg class=\"chart\" data-chart=\"" + escape_html(chart_id) +
                    "\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" + number(left + plot_w + 40) +
                    "\" height=\"" + number(top + plot_h + 50) + "\" role=\"img\">";
  if (series.points.empty() || series.points.front().value <= 0) return svg + "</svg>";
  // Speed-up over one worker, whatever the unit's direction.
  const double base = series.points.front().value;
  auto speedup = [&](double v) { return v <= 0 ? 0 : series.lower_is_better ? base / v : v / base; };
  const double max_threads = series.points.back().threads;
  double max_speedup = max_threads;
  for (const auto& p : series.points) max_speedup = std::max(max_speedup, speedup(p.value));
  auto x_of = [&](double t) {
    return left + plot_w * (max_threads <= 1 ? 0.5 : (t - 1) / (max_threads - 1));
  };
  auto y_of = [&](double s) { return top + plot_h - plot_h * s / max_speedup; };
  svg += "<line x1=\"" + number(left) + "\" y1=\"" + number(top + plot_h) + "\" x2=\"" +
         number(left + plot_w) + "\" y2=\"" + number(top + plot_h) + "\" class=\"axis\"/>";
  svg += "<line x1=\"" + number(left) + "\" y1=\"" + number(top) + "\" x2=\"" + number(left) + "\" y2=\"" +
         number(top + plot_h) + "\" class=\"axis\"/>";
  svg += "<line x1=\"" + number(x_of(1)) + "\" y1=\"" + number(y_of(1)) + "\" x2=\"" +
         number(x_of(max_threads)) + "\" y2=\"" + number(y_of(max_threads)) +
         "\" class=\"ideal\"><title>linear scaling</title></line>";
  std::string path;
  for (const auto& p : series.points) {
    path += (path.empty() ? "M" : " L") + number(x_of(p.threads)) + " " + number(y_of(speedup(p.value)));
    svg += "<circle cx=\"" + number(x_of(p.threads)) + "\" cy=\"" + number(y_of(speedup(p.value))) +
           "\" r=\"4\" fill=\"" + colour("nerve") + "\"><title>" + std::to_string(p.threads) +
           " worker(s): " + format_figure(p.value) + " " + escape_html(series.unit) + " (x" +
           format_ratio(speedup(p.value)) + ")</title></circle>";
    svg += "<text x=\"" + number(x_of(p.threads)) + "\" y=\"" + number(top + plot_h + 16) +
           "\" text-anchor=\"middle\" class=\"note\">" + std::to_string(p.threads) + "</text>";
    svg += "<text x=\"" + number(x_of(p.threads) + 6) + "\" y=\"" + number(y_of(speedup(p.value)) - 6) +
           "\" class=\"value\">x" + format_ratio(speedup(p.value)) + "</text>";
  }
  svg += "<path d=\"" + path + "\" fill=\"none\" stroke=\"" + colour("nerve") + "\" stroke-width=\"2\"/>";
  svg += "<text x=\"" + number(left + plot_w / 2) + "\" y=\"" + number(top + plot_h + 36) +
         "\" text-anchor=\"middle\" class=\"note\">workers; y: speed-up over 1 worker (dashed: "
         "linear)</text></svg>";
  return svg;
}

}  // namespace nerve::benchmark
