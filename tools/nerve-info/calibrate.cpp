// calibrate.cpp — `nerve-info --calibrate`: measure the bus between every pair of memory nodes again
// (latency and bandwidth, through the backends' asynchronous copies), save it where heft reads it
// (perf.model_dir/bus.json) and print the matrix.
#include <cstdio>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "nerve/nerve.hpp"

#include "perf/bus_model.hpp"
#include "perf/history_model.hpp"
#include "report.hpp"
#include "runtime/context_impl.hpp"
#include "util/json_text.hpp"

namespace nerve::info {

std::string calibrate_bus(const Settings& settings, bool json, std::string& save_error) {
  const Context context(settings);
  detail::ContextImpl& impl = *context.impl();
  const auto nodes = impl.memory_nodes();
  const std::filesystem::path directory = impl.config.perf.model_dir.empty()
                                              ? detail::HistoryModels::default_directory()
                                              : std::filesystem::path(impl.config.perf.model_dir);
  detail::BusModel bus(directory);
  bus.calibrate(nodes);
  save_error = bus.save_error();
  if (json) {
    nlohmann::json links = nlohmann::json::array();
    for (unsigned from = 0; from < nodes.size(); ++from) {
      for (unsigned to = 0; to < nodes.size(); ++to) {
        const detail::BusLink link = bus.link(from, to);
        if (!link.measured()) continue;
        links.push_back({{"from", nodes[from]->name()},
                         {"to", nodes[to]->name()},
                         {"latency_ns", link.latency_ns},
                         {"bytes_per_second", link.bytes_per_ns * 1e9}});
      }
    }
    return nerve::detail::json_text(nlohmann::json{{"schema", "nerve.busmodel/1"},
                                                   {"file", bus.file().string()},
                                                   {"saved", save_error.empty()},
                                                   {"links", links}},
                                    2) +
           "\n";
  }
  std::string out =
      fmt::format("Bus calibration ({} memory node{}; {} {})\n", nodes.size(), nodes.size() == 1 ? "" : "s",
                  save_error.empty() ? "saved to" : "NOT saved to", printable(bus.file().string()));
  if (nodes.size() < 2) return out + "  only host memory: nothing to measure (no devices)\n";
  // Rows and columns are memory node numbers, named in a legend above the matrix: names cut to a
  // column's width could not be told apart (two devices of one model differ only in the " (device 2)"
  // at the end of the second's name), and cutting a name by bytes could split a UTF-8 character.
  for (const auto* node : nodes)
    out += fmt::format("  memory node {}: '{}'\n", node->index(), printable(node->name()));
  out += "  latency (us) / bandwidth (GB/s), from the row's memory node to the column's\n";
  out += fmt::format("  {:>9}", "from \\ to");
  for (const auto* node : nodes) out += fmt::format(" {:>18}", node->index());
  out += '\n';
  for (unsigned from = 0; from < nodes.size(); ++from) {
    out += fmt::format("  {:>9}", nodes[from]->index());
    for (unsigned to = 0; to < nodes.size(); ++to) {
      const detail::BusLink link = bus.link(from, to);
      out += link.measured() ? fmt::format(" {:>9.1f} / {:>6.2f}", link.latency_ns / 1e3, link.bytes_per_ns)
                             : fmt::format(" {:>18}", "-");
    }
    out += '\n';
  }
  return out;
}

}  // namespace nerve::info
