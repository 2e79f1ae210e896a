// The machine section: topology tree, a one-line summary and the distance matrices.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "report.hpp"

namespace nerve::info {
namespace {

// Above this many cores the core matrix (cores² numbers) is too wide to read on a terminal; the NUMA
// matrix says most of what matters there, and --json still has the full matrix.
constexpr std::size_t max_cores_in_matrix = 32;

std::string plural(std::size_t count, const char* one, const char* many) {
  return fmt::format("{} {}", count, count == 1 ? one : many);
}

// memory_summary() gives "7.6 GiB", "4 × 1 GiB = 4 GiB", or "no memory reported" (synthetic machines).
std::string memory_summary(const std::vector<NumaNode>& nodes) {
  std::uint64_t total = 0;
  bool all_equal = true;
  for (const NumaNode& node : nodes) {
    total += node.memory_bytes;
    all_equal = all_equal && node.memory_bytes == nodes.front().memory_bytes;
  }
  if (total == 0) return "no memory reported";
  if (nodes.size() == 1) return format_bytes(total);
  if (all_equal)
    return fmt::format("{} × {} = {}", nodes.size(), format_bytes(nodes.front().memory_bytes),
                       format_bytes(total));
  std::string parts;
  for (const NumaNode& node : nodes) {
    parts += fmt::format("{}#{} {}", parts.empty() ? "" : ", ", node.index, format_bytes(node.memory_bytes));
  }
  return fmt::format("{}; {} in all", parts, format_bytes(total));
}

// cache_summary() groups caches by level and size: "2 × L1 48 KiB, 2 × L2 1.2 MiB, 1 × L3 32 MiB".
std::string cache_summary(const std::vector<Cache>& caches) {
  if (caches.empty()) return "none reported";
  std::map<std::pair<int, std::uint64_t>, int> groups;
  for (const Cache& cache : caches) ++groups[{cache.level, cache.size_bytes}];
  std::string text;
  for (const auto& [key, count] : groups) {
    text +=
        fmt::format("{}{} × L{} {}", text.empty() ? "" : ", ", count, key.first, format_bytes(key.second));
  }
  return text;
}

std::string summary_line(const Topology& topology) {
  return fmt::format("  Summary: {}, {} ({}), {}, {}, caches: {}\n",
                     plural(topology.packages().size(), "package", "packages"),
                     plural(topology.numa_nodes().size(), "NUMA node", "NUMA nodes"),
                     memory_summary(topology.numa_nodes()), plural(topology.cores().size(), "core", "cores"),
                     plural(static_cast<std::size_t>(topology.pu_count()), "PU", "PUs"),
                     cache_summary(topology.caches()));
}

// matrix() renders a size × size table with row and column headers, columns as wide as the widest
// number in the table.
std::string matrix(const char* corner, int size, const std::function<int(int, int)>& value) {
  std::size_t width = fmt::formatted_size("{}", size - 1);
  for (int row = 0; row < size; ++row) {
    for (int column = 0; column < size; ++column)
      width = std::max(width, fmt::formatted_size("{}", value(row, column)));
  }
  const std::size_t header_width = std::max(width, std::string_view(corner).size());
  std::string out = fmt::format("    {:>{}}", corner, header_width);
  for (int column = 0; column < size; ++column) out += fmt::format(" {:>{}}", column, width);
  out += '\n';
  for (int row = 0; row < size; ++row) {
    out += fmt::format("    {:>{}}", row, header_width);
    for (int column = 0; column < size; ++column) out += fmt::format(" {:>{}}", value(row, column), width);
    out += '\n';
  }
  return out;
}

std::string core_matrix(const Topology& topology) {
  const std::size_t cores = topology.cores().size();
  if (cores > max_cores_in_matrix) {
    return fmt::format(
        "  Core distances: not shown for {} cores (more than {}); the NUMA distances below summarise them,\n"
        "  and `nerve-info --json` has the full matrix (topology.core_distances).\n",
        cores, max_cores_in_matrix);
  }
  std::string out = fmt::format(
      "  Core distances (smaller is closer): {} same core, {} shared L1/L2, {} shared L3, {} same NUMA "
      "node,\n"
      "  >= {} other NUMA node (scaled by the NUMA distance), +{} other package\n",
      core_distance::same_core, core_distance::shared_l2, core_distance::shared_l3, core_distance::same_numa,
      core_distance::other_numa, core_distance::other_package_penalty);
  return out + matrix("core", static_cast<int>(cores), [&](int a, int b) { return topology.distance(a, b); });
}

std::string numa_matrix(const Topology& topology) {
  const auto nodes = static_cast<int>(topology.numa_nodes().size());
  return "  NUMA distances (relative latency, 10 = local)\n" +
         matrix("node", nodes, [&](int a, int b) { return topology.numa_distance(a, b); });
}

// indent() prefixes every line of `text` with two spaces.
std::string indent(const std::string& text) {
  std::string out;
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t end = text.find('\n', start);
    const std::size_t stop = end == std::string::npos ? text.size() : end + 1;
    out += "  " + text.substr(start, stop - start);
    start = stop;
  }
  return out;
}

}  // namespace

// machine_tree() is Topology::tree() with its first line's description (the XML file's name or the
// synthetic text, as the user gave it) written visibly: a newline in the name broke the tree, an ESC
// sequence coloured the terminal.
std::string machine_tree(const Topology& topology) {
  std::string tree = topology.tree();
  const std::string& description = topology.description();
  const std::string opening = "Machine (";
  if (tree.compare(0, opening.size(), opening) == 0 &&
      tree.compare(opening.size(), description.size(), description) == 0)
    tree.replace(opening.size(), description.size(), printable(description));
  return tree;
}

std::string print_machine(const Topology& topology) {
  std::string out = "Topology\n";
  out += indent(machine_tree(topology));
  out += summary_line(topology);
  out += '\n';
  out += core_matrix(topology);
  out += '\n';
  out += numa_matrix(topology);
  return out;
}

}  // namespace nerve::info
