#include "perf/stats.hpp"

#include <fstream>

#include <fmt/format.h>

#include "nerve/error.hpp"

#include "runtime/context_impl.hpp"

namespace nerve::detail {

ContextStats collect_stats(const ContextImpl& context) {
  ContextStats stats;
  const Scheduler& scheduler = context.scheduler;
  for (unsigned i = 0; i < scheduler.slot_count(); ++i) {
    const WorkerSlot& slot = scheduler.slot(i);
    WorkerStats worker;
    worker.index = slot.index;
    worker.core = slot.core;
    worker.numa_node = slot.numa_node;
    worker.bound = slot.bound;
    worker.application_thread = i == 0;
    worker.tasks_run = slot.stats.tasks_run.load(std::memory_order_relaxed);
    worker.steals = slot.stats.steals.load(std::memory_order_relaxed);
    worker.sleeps = slot.stats.sleeps.load(std::memory_order_relaxed);
    stats.workers.push_back(worker);
  }
  if (context.coherence != nullptr) {
    const unsigned nodes = context.coherence->node_count();
    for (unsigned from = 0; from < nodes; ++from) {
      for (unsigned to = 0; to < nodes; ++to) {
        const TransferCounters& counters = context.coherence->counters(from, to);
        const auto copies = counters.copies.load(std::memory_order_relaxed);
        if (copies == 0) continue;
        TransferStats transfer{static_cast<int>(from), static_cast<int>(to), copies,
                               counters.bytes.load(std::memory_order_relaxed)};
        stats.transfers.push_back(transfer);
        stats.bytes_transferred += transfer.bytes;
        stats.copies += transfer.copies;
      }
    }
  }
  HostMemoryStats memory = context.host_memory.memory_stats();
  stats.memory.host_pools = std::move(memory.pools);
  stats.memory.host_bytes_reserved = memory.bytes_reserved;
  stats.memory.host_bytes_in_use = memory.bytes_in_use;
  stats.memory.staging_bytes_reserved = memory.staging.bytes_reserved;
  const std::size_t threads = context.thread_count.load(std::memory_order_acquire);
  for (std::size_t i = 0; i < threads; ++i) {
    const ThreadState* thread = context.thread_list[i].load(std::memory_order_relaxed);
    stats.tasks_submitted += thread->submitted.load(std::memory_order_acquire);
    stats.tasks_completed += thread->completed.load(std::memory_order_acquire);
  }
  return stats;
}

nlohmann::json stats_to_json(const ContextStats& stats) {
  nlohmann::json workers = nlohmann::json::array();
  for (const WorkerStats& worker : stats.workers) {
    workers.push_back({{"index", worker.index},
                       {"core", worker.core},
                       {"numa_node", worker.numa_node},
                       {"bound", worker.bound},
                       {"application_thread", worker.application_thread},
                       {"tasks_run", worker.tasks_run},
                       {"steals", worker.steals},
                       {"sleeps", worker.sleeps}});
  }
  nlohmann::json transfers = nlohmann::json::array();
  for (const TransferStats& transfer : stats.transfers) {
    transfers.push_back({{"from_node", transfer.from_node},
                         {"to_node", transfer.to_node},
                         {"copies", transfer.copies},
                         {"bytes", transfer.bytes}});
  }
  nlohmann::json pools = nlohmann::json::array();
  for (const MemoryPoolStats& pool : stats.memory.host_pools) {
    pools.push_back({{"node", pool.node},
                     {"limit_bytes", pool.limit_bytes},
                     {"bytes_reserved", pool.bytes_reserved},
                     {"bytes_in_use", pool.bytes_in_use},
                     {"allocations", pool.allocations},
                     {"from_thread_cache", pool.from_thread_cache},
                     {"from_central", pool.from_central},
                     {"from_node", pool.from_node}});
  }
  return {{"schema", "nerve.perf_stats/1"},
          {"tasks", {{"submitted", stats.tasks_submitted}, {"completed", stats.tasks_completed}}},
          {"workers", workers},
          {"transfers",
           {{"copies", stats.copies}, {"bytes", stats.bytes_transferred}, {"by_node_pair", transfers}}},
          {"memory",
           {{"host_bytes_reserved", stats.memory.host_bytes_reserved},
            {"host_bytes_in_use", stats.memory.host_bytes_in_use},
            {"staging_bytes_reserved", stats.memory.staging_bytes_reserved},
            {"host_pools", pools}}}};
}

void write_perf_stats(const ContextImpl& context, const std::filesystem::path& path) {
  std::ofstream out(path);
  if (!out)
    throw Error(ErrorCode::invalid_argument, fmt::format("cannot write perf stats to '{}'", path.string()));
  out << stats_to_json(collect_stats(context)).dump(2) << '\n';
  if (!out)
    throw Error(ErrorCode::invalid_argument, fmt::format("failed writing perf stats to '{}'", path.string()));
}

}  // namespace nerve::detail
