// Topology::tree(): Machine → Package → NUMA node → caches → cores → PUs as indented text, with
// single-child chains joined by " + " the way lstopo's console output does.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "nerve/topology.hpp"

namespace nerve {
namespace {

struct Line {
  std::string label;
  std::vector<Line> children;
};

// Rounded to the nearest unit, as nerve-info's summary lines round (23.5 GiB is "24 GiB" in both).
std::string format_bytes(std::uint64_t bytes) {
  constexpr std::uint64_t kib = 1024, mib = kib * 1024, gib = mib * 1024;
  if (bytes >= 10 * gib) return fmt::format("{} GiB", (bytes + gib / 2) / gib);
  if (bytes >= mib) return fmt::format("{} MiB", (bytes + mib / 2) / mib);
  return fmt::format("{} KiB", (bytes + kib / 2) / kib);
}

std::string core_label(const Core& core) {
  return fmt::format("Core {} (PU P#{})", core.index, fmt::join(core.pu_os_indices, ", P#"));
}

// shared_with(): ", shared with NUMA node 1, 2" for a cache whose cores reach NUMA nodes other than
// `node` (a cache above the NUMA level, shown under each node it serves), else "".
std::string shared_with(const Topology& topology, const Cache& cache, int node) {
  std::vector<int> others;
  for (int core : cache.cores) {
    const int other = topology.cores()[core].numa_node;
    if (other != node && std::ranges::find(others, other) == others.end()) others.push_back(other);
  }
  if (others.empty()) return {};
  std::ranges::sort(others);
  return fmt::format(", shared with NUMA node {}", fmt::join(others, ", "));
}

// cache_lines() nests the caches of `levels[0]` and below over `cores` (of NUMA node `node`). Cores
// outside every cache of the current level move on to the next level at the same depth.
std::vector<Line> cache_lines(const Topology& topology, const std::vector<int>& cores, int node,
                              std::vector<int> levels) {
  if (levels.empty()) {
    std::vector<Line> lines;
    lines.reserve(cores.size());
    for (int core : cores) lines.push_back(Line{core_label(topology.cores()[core]), {}});
    return lines;
  }
  const int level = levels.front();
  levels.erase(levels.begin());
  std::vector<Line> lines;
  std::vector<int> uncovered = cores;
  int index_in_level = -1;  // hwloc-style logical index among the caches of this level
  for (const Cache& cache : topology.caches()) {
    if (cache.level != level) continue;
    ++index_in_level;
    std::vector<int> inside;
    std::ranges::set_intersection(cache.cores, cores, std::back_inserter(inside));
    if (inside.empty()) continue;
    std::erase_if(uncovered, [&](int core) { return std::ranges::binary_search(inside, core); });
    lines.push_back(Line{fmt::format("L{} #{} ({}{})", level, index_in_level, format_bytes(cache.size_bytes),
                                     shared_with(topology, cache, node)),
                         cache_lines(topology, inside, node, levels)});
  }
  for (Line& line : cache_lines(topology, uncovered, node, levels)) lines.push_back(std::move(line));
  return lines;
}

std::vector<int> levels_from_top(const Topology& topology) {
  std::vector<int> levels;
  for (const Cache& cache : topology.caches()) levels.push_back(cache.level);
  std::ranges::sort(levels, std::greater<>());
  // std::unique, not std::ranges::unique: the latter does not compile under clang 14 with libstdc++ 12.
  levels.erase(std::unique(levels.begin(), levels.end()), levels.end());
  return levels;
}

// numa_line(): `node` under `package`. A node spanning packages (BIOS node interleaving) is shown
// under each: its memory once, under its first package, which says which packages it spans; the
// others say it continues from there.
Line numa_line(const Topology& topology, const NumaNode& node, int package) {
  std::vector<int> cores;
  std::vector<int> packages;
  for (int core : node.cores) {
    const int own = topology.cores()[core].package;
    if (own == package) cores.push_back(core);
    if (std::ranges::find(packages, own) == packages.end()) packages.push_back(own);
  }
  std::ranges::sort(packages);
  std::string label = fmt::format("NUMA node {} (P#{}", node.index, node.os_index);
  if (packages.size() > 1 && package != packages.front()) {
    label += fmt::format(", continued from Package {})", packages.front());
  } else {
    if (node.memory_bytes != 0) label += ", " + format_bytes(node.memory_bytes);
    if (packages.size() > 1) label += fmt::format(", spans packages {}", fmt::join(packages, ", "));
    label += ')';
  }
  return Line{std::move(label), cache_lines(topology, cores, node.index, levels_from_top(topology))};
}

void render(const Line& line, int depth, std::string& out) {
  // Join single-child chains ("L2 #0 (1 MiB) + Core 0 (PU P#0)") to keep the tree short.
  std::string text = line.label;
  const Line* node = &line;
  while (node->children.size() == 1) {
    node = &node->children.front();
    text += " + " + node->label;
  }
  out += fmt::format("{:{}}{}\n", "", depth * 2, text);
  for (const Line& child : node->children) render(child, depth + 1, out);
}

}  // namespace

std::string Topology::tree() const {
  std::uint64_t memory = 0;
  for (const NumaNode& node : numa_nodes_) memory += node.memory_bytes;
  std::string out = fmt::format("Machine ({}): {} package(s), {} NUMA node(s), {} core(s), {} PU(s){}\n",
                                description_, packages_.size(), numa_nodes_.size(), cores_.size(), pu_count(),
                                memory != 0 ? ", " + format_bytes(memory) : std::string());
  for (const Package& package : packages_) {
    Line line{fmt::format("Package {}", package.index), {}};
    for (int node : package.numa_nodes)
      line.children.push_back(numa_line(*this, numa_nodes_[node], package.index));
    render(line, 1, out);
  }
  return out;
}

}  // namespace nerve
