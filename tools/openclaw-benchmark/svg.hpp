// svg.hpp — the inline SVG charts of the HTML report. Every chart is one <svg class="chart"
// data-chart="..."> element (the tests count them); no script, no external resource.
#pragma once

#include <string>
#include <vector>

#include "report.hpp"

namespace nerve::benchmark {

std::string escape_html(const std::string& text);

// bar_chart(): one horizontal bar per measurement of a case, nerve's highlighted, a whisker from
// min to max, the median and "nerve ×" written beside each bar.
std::string bar_chart(const std::string& chart_id, const std::vector<const Measurement*>& bars,
                      const Measurement* nerve);

// latency_chart(): p50 and p99 latency per variant (W11), for measurements that carry them.
std::string latency_chart(const std::string& chart_id, const std::vector<const Measurement*>& bars);

// scaling_chart(): the figure at each worker count and the ideal (linear) line from 1 worker.
std::string scaling_chart(const std::string& chart_id, const ScalingSeries& series);

// colour() is a stable colour for a runtime name.
std::string colour(const std::string& runtime);

}  // namespace nerve::benchmark
