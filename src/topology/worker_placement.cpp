// plan_workers() and default_worker_count(): which core each worker thread runs on.
#include <algorithm>
#include <cstddef>

#include "topology/affinity.hpp"

namespace nerve::topology {
namespace {

// interleave() takes one element from each list in turn: {{0,1},{4,5}} → {0,4,1,5}.
std::vector<int> interleave(const std::vector<std::vector<int>>& lists) {
  std::vector<int> result;
  for (std::size_t round = 0;; ++round) {
    const std::size_t before = result.size();
    for (const std::vector<int>& list : lists) {
      if (round < list.size()) result.push_back(list[round]);
    }
    if (result.size() == before) return result;
  }
}

// scatter_order() orders `usable` cores (ascending) round-robin over packages; within a package,
// round-robin over its NUMA nodes.
std::vector<int> scatter_order(const Topology& topology, const std::vector<int>& usable) {
  std::vector<std::vector<int>> per_package;
  for (const Package& package : topology.packages()) {
    std::vector<std::vector<int>> per_node;
    for (int node : package.numa_nodes) {
      std::vector<int> cores;
      for (int core : usable) {
        const Core& info = topology.cores()[core];
        if (info.package == package.index && info.numa_node == node) cores.push_back(core);
      }
      if (!cores.empty()) per_node.push_back(std::move(cores));
    }
    per_package.push_back(interleave(per_node));
  }
  return interleave(per_package);
}

std::vector<int> allowed_subset(const std::vector<int>& pus, const std::vector<int>& allowed_sorted) {
  std::vector<int> result;
  for (int pu : pus) {
    if (std::ranges::binary_search(allowed_sorted, pu)) result.push_back(pu);
  }
  return result;
}

std::vector<int> every_pu(const Topology& topology) {
  std::vector<int> pus;
  for (const Core& core : topology.cores())
    pus.insert(pus.end(), core.pu_os_indices.begin(), core.pu_os_indices.end());
  return pus;
}

}  // namespace

unsigned default_worker_count(const Topology& topology) {
  const std::size_t cpus = topology.synthetic() ? topology.cores().size() : available_cpu_count();
  return static_cast<unsigned>(std::min<std::size_t>(cpus, max_worker_count));
}

std::vector<WorkerPlacement> plan_workers(const Topology& topology, unsigned workers,
                                          ThreadAffinity affinity) {
  return plan_workers(topology, workers, affinity,
                      topology.synthetic() ? every_pu(topology) : current_thread_cpus());
}

std::vector<WorkerPlacement> plan_workers(const Topology& topology, unsigned workers, ThreadAffinity affinity,
                                          const std::vector<int>& allowed_pus) {
  std::vector<int> allowed = allowed_pus;
  std::ranges::sort(allowed);
  std::vector<int> usable;
  for (const Core& core : topology.cores()) {
    if (!allowed_subset(core.pu_os_indices, allowed).empty()) usable.push_back(core.index);
  }
  if (usable.empty()) {
    allowed = every_pu(topology);
    std::ranges::sort(allowed);
    for (const Core& core : topology.cores()) usable.push_back(core.index);
  }
  const std::vector<int> order =
      affinity == ThreadAffinity::scatter ? scatter_order(topology, usable) : usable;

  std::vector<WorkerPlacement> placements;
  placements.reserve(workers);
  for (unsigned worker = 0; worker < workers; ++worker) {
    const Core& core = topology.cores()[order[worker % order.size()]];
    placements.push_back(WorkerPlacement{.core = core.index,
                                         .numa_node = core.numa_node,
                                         .package = core.package,
                                         .pu_os_indices = allowed_subset(core.pu_os_indices, allowed)});
  }
  return placements;
}

}  // namespace nerve::topology
