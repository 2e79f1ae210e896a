// The workers section: how many, why that many, and where each one runs.
#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "report.hpp"

namespace nerve::info {
namespace {

// slot, core, NUMA node, PUs, binding, runs on
using Row = std::array<std::string, 6>;

std::string binding_text(const WorkerInfo& worker) {
  return worker.bound ? std::string("bound") : "not bound: " + worker.not_bound_reason;
}

std::string runs_on_text(const WorkerInfo& worker) {
  if (!worker.observed_cpus) return "not observed";
  if (worker.observed_cpus->empty()) return "unknown";
  return "CPUs " + format_cpu_list(*worker.observed_cpus);
}

}  // namespace

std::string print_workers(const Report& report) {
  const WorkerPool& pool = report.pool;
  std::string out = fmt::format("Workers: {}\n", pool.count);
  out += fmt::format("  Count: {}\n", printable(pool.reason));  // names a file the user chose
  out += fmt::format("  Affinity: parallel.thread_affinity = {} ({})\n", affinity_name(pool.affinity),
                     printable(report.config.origin("parallel.thread_affinity").describe()));
  out +=
      "  Slot 0 is run by any application thread while it waits inside nerve; the others have their "
      "own threads.\n";
  if (report.topology.synthetic()) {
    out +=
        "  The topology is not this machine's: PUs below are the described machine's, \"runs on\" lists "
        "real CPUs.\n";
  }

  std::vector<Row> rows{{"slot", "core", "NUMA", "PUs", "binding", "runs on"}};
  for (const WorkerInfo& worker : report.workers) {
    rows.push_back(Row{fmt::format("{}", worker.index), fmt::format("{}", worker.core),
                       fmt::format("{}", worker.numa_node), format_cpu_list(worker.planned_pus),
                       binding_text(worker), runs_on_text(worker)});
  }
  std::array<std::size_t, 6> width{};
  for (const Row& row : rows) {
    for (std::size_t column = 0; column < row.size(); ++column)
      width[column] = std::max(width[column], row[column].size());
  }
  for (const Row& row : rows) {
    // Numbers right-aligned, text left-aligned; the last column is not padded.
    out += fmt::format("  {:>{}}  {:>{}}  {:>{}}  {:<{}}  {:<{}}  {}\n", row[0], width[0], row[1], width[1],
                       row[2], width[2], row[3], width[3], row[4], width[4], row[5]);
  }
  return out;
}

}  // namespace nerve::info
