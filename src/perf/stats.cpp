#include "perf/stats.hpp"

#include <algorithm>

#include "perf/history_model.hpp"
#include "runtime/context_impl.hpp"
#include "util/json_stream.hpp"
#include "util/text_file.hpp"

namespace nerve::detail {
namespace {

std::uint64_t span_ns(const std::atomic<std::uint64_t>& total, const std::atomic<std::int64_t>& since,
                      std::int64_t now) noexcept {
  const std::int64_t start = since.load(std::memory_order_relaxed);
  const std::uint64_t open = start != 0 && now > start ? static_cast<std::uint64_t>(now - start) : 0;
  return total.load(std::memory_order_relaxed) + open;
}

TaskTimes to_task_times(const TaskEvent& event, std::int64_t epoch) {
  const auto relative = [&](std::int64_t t) { return t == 0 ? 0 : t - epoch; };
  return TaskTimes{event.id,
                   event.name,
                   event.device,
                   event.worker,
                   relative(event.submitted_ns),
                   relative(event.ready_ns),
                   relative(event.data_valid_ns),
                   relative(event.start_ns),
                   relative(event.end_ns),
                   event.bytes_moved,
                   outcome_name(event.outcome)};
}

}  // namespace

ContextStats collect_stats(const ContextImpl& context, bool with_records) {
  ContextStats stats;
  const PerfMonitor& perf = *context.perf;
  const std::int64_t now = monotonic_ns();
  stats.elapsed_ns = now - perf.epoch_ns();
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
    const std::uint64_t active = span_ns(slot.stats.active_ns, slot.stats.active_since, now);
    worker.idle_ns = std::min(active, span_ns(slot.stats.idle_ns, slot.stats.idle_since, now));
    worker.busy_ns = active - worker.idle_ns;
    stats.workers.push_back(worker);
  }

  // Bytes per memory node, in and out.
  std::vector<std::uint64_t> bytes_in(context.device_count(), 0);
  std::vector<std::uint64_t> bytes_out(context.device_count(), 0);
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
        if (from < bytes_out.size()) bytes_out[from] += transfer.bytes;
        if (to < bytes_in.size()) bytes_in[to] += transfer.bytes;
      }
    }
  }
  HostMemoryStats memory = context.host_memory.memory_stats();
  stats.memory.host_pools = std::move(memory.pools);
  stats.memory.host_bytes_reserved = memory.bytes_reserved;
  stats.memory.host_bytes_in_use = memory.bytes_in_use;
  stats.memory.staging_bytes_reserved = memory.staging.bytes_reserved;
  for (const auto& device : context.devices)
    stats.memory.staging_bytes_reserved += device->memory().staging_bytes_reserved();

  const auto elapsed = static_cast<std::uint64_t>(std::max<std::int64_t>(stats.elapsed_ns, 1));
  for (const DeviceInfo& info : context.device_infos()) {
    DeviceStats device;
    device.index = info.index;
    device.name = info.name;
    device.kind = name(info.kind);
    device.memory_node = info.memory_node;
    std::uint64_t capacity = elapsed;
    if (info.index == 0) {
      capacity = elapsed * scheduler.slot_count();
      for (const WorkerStats& worker : stats.workers) {
        device.tasks += worker.tasks_run;
        device.busy_ns += worker.busy_ns;
      }
      device.tasks -= std::min(device.tasks, context.cancelled_unplaced.load(std::memory_order_relaxed));
    } else {
      const DeviceActivity& activity = perf.device(info.index);
      device.tasks = activity.tasks.load(std::memory_order_relaxed);
      device.busy_ns = activity.busy_ns.load(std::memory_order_relaxed);
    }
    device.busy_ns = std::min(device.busy_ns, capacity);
    device.idle_ns = capacity - device.busy_ns;
    device.utilisation = static_cast<double>(device.busy_ns) / static_cast<double>(capacity);
    const auto node = static_cast<std::size_t>(info.memory_node);
    if (node < bytes_in.size()) {
      device.bytes_in = bytes_in[node];
      device.bytes_out = bytes_out[node];
    }
    stats.devices.push_back(device);
  }

  // A task pool's gate is bookkeeping, not a task: neither submitted nor completed by the user. Its
  // counters grow after the thread's, so reading them first never subtracts a gate not yet counted.
  const std::uint64_t gates_completed = context.pool_gates_completed.load(std::memory_order_acquire);
  const std::uint64_t gates_submitted = context.pool_gates_submitted.load(std::memory_order_acquire);
  const std::size_t threads = context.thread_count.load(std::memory_order_acquire);
  for (std::size_t i = 0; i < threads; ++i) {
    const ThreadState* thread = context.thread_list[i].load(std::memory_order_relaxed);
    stats.tasks_submitted += thread->submitted.load(std::memory_order_acquire);
    stats.tasks_completed += thread->completed.load(std::memory_order_acquire);
  }
  stats.tasks_completed -= std::min(stats.tasks_completed, gates_completed);
  stats.tasks_submitted -= std::min(stats.tasks_submitted, gates_submitted);

  stats.tasks_recorded = perf.records_tasks();
  if (stats.tasks_recorded) {
    if (with_records) {
      for (const TaskEvent* event : perf.task_index())
        stats.task_records.push_back(to_task_times(*event, perf.epoch_ns()));
    }
    stats.task_records_dropped = perf.dropped();
  }
  stats.counters = perf.counters();
  if (const HistoryModels* models = perf.models()) {
    stats.models_enabled = true;
    stats.model_directory = models->directory().string();
    for (const ModelRow& row : models->rows()) {
      stats.models.push_back(PerfModelStats{row.kernel, row.device, row.footprint, row.entry.samples,
                                            row.entry.mean_ns, row.entry.stddev_ns(),
                                            row.entry.samples < HistoryModels::calibration_samples,
                                            row.entry.outliers, row.entry.recalibrations});
    }
  }
  return stats;
}

nlohmann::json task_record_json(const TaskTimes& task) {
  return {{"id", task.id},
          {"name", task.name},
          {"device", task.device},
          {"worker", task.worker},
          {"submitted_ns", task.submitted_ns},
          {"ready_ns", task.ready_ns},
          {"data_valid_ns", task.data_valid_ns},
          {"start_ns", task.start_ns},
          {"end_ns", task.end_ns},
          {"bytes_moved", task.bytes_moved},
          {"status", task.status}};
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
                       {"sleeps", worker.sleeps},
                       {"busy_ns", worker.busy_ns},
                       {"idle_ns", worker.idle_ns}});
  }
  nlohmann::json devices = nlohmann::json::array();
  for (const DeviceStats& device : stats.devices) {
    devices.push_back({{"index", device.index},
                       {"name", device.name},
                       {"kind", device.kind},
                       {"memory_node", device.memory_node},
                       {"tasks", device.tasks},
                       {"busy_ns", device.busy_ns},
                       {"idle_ns", device.idle_ns},
                       {"utilisation", device.utilisation},
                       {"bytes_in", device.bytes_in},
                       {"bytes_out", device.bytes_out}});
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
                     {"bytes_charged", pool.bytes_charged},
                     {"bytes_in_use", pool.bytes_in_use},
                     {"allocations", pool.allocations},
                     {"from_thread_cache", pool.from_thread_cache},
                     {"from_central", pool.from_central},
                     {"from_node", pool.from_node},
                     {"huge_page_bytes", pool.huge_page_bytes}});
  }
  nlohmann::json tasks = {{"submitted", stats.tasks_submitted},
                          {"completed", stats.tasks_completed},
                          {"recorded", stats.tasks_recorded}};
  if (stats.tasks_recorded) {
    nlohmann::json records = nlohmann::json::array();
    for (const TaskTimes& task : stats.task_records) records.push_back(task_record_json(task));
    tasks["records"] = std::move(records);
    tasks["records_dropped"] = stats.task_records_dropped;
  }
  nlohmann::json counters = {{"enabled", stats.counters.enabled}};
  if (stats.counters.enabled) {
    counters["source"] = stats.counters.source;
    counters["names"] = stats.counters.names;
    nlohmann::json samples = nlohmann::json::array();
    for (const CounterSample& sample : stats.counters.samples)
      samples.push_back({{"time_ns", sample.time_ns}, {"values", sample.values}});
    counters["samples"] = std::move(samples);
  }
  nlohmann::json models = {{"enabled", stats.models_enabled}};
  if (stats.models_enabled) {
    models["directory"] = stats.model_directory;
    nlohmann::json entries = nlohmann::json::array();
    for (const PerfModelStats& model : stats.models) {
      entries.push_back({{"kernel", model.kernel},
                         {"device", model.device},
                         {"footprint", model.footprint},
                         {"samples", model.samples},
                         {"mean_ns", model.mean_ns},
                         {"stddev_ns", model.stddev_ns},
                         {"calibrating", model.calibrating},
                         {"outliers", model.outliers},
                         {"recalibrations", model.recalibrations}});
    }
    models["entries"] = std::move(entries);
  }
  return {{"schema", "nerve.perf_stats/1"},
          {"elapsed_ns", stats.elapsed_ns},
          {"tasks", std::move(tasks)},
          {"workers", std::move(workers)},
          {"devices", std::move(devices)},
          {"transfers",
           {{"copies", stats.copies}, {"bytes", stats.bytes_transferred}, {"by_node_pair", transfers}}},
          {"counters", std::move(counters)},
          {"models", std::move(models)},
          {"memory",
           {{"host_bytes_reserved", stats.memory.host_bytes_reserved},
            {"host_bytes_in_use", stats.memory.host_bytes_in_use},
            {"staging_bytes_reserved", stats.memory.staging_bytes_reserved},
            {"host_pools", pools}}}};
}

void write_perf_stats(const ContextImpl& context, const std::filesystem::path& path) {
  // The records are written one at a time, from the monitor's logs: built as one document with the
  // rest, each took ~2 KB at the peak (a node per value, a map per record, then the text).
  const ContextStats stats = collect_stats(context, false);
  const nlohmann::json skeleton = stats_to_json(stats);
  const PerfMonitor& perf = *context.perf;
  const std::vector<const TaskEvent*> index =
      stats.tasks_recorded ? perf.task_index() : std::vector<const TaskEvent*>();
  const StreamedArray records{"/tasks/records", [&](JsonArrayWriter& writer) {
                                for (const TaskEvent* event : index)
                                  writer.add(task_record_json(to_task_times(*event, perf.epoch_ns())));
                              }};
  write_text_file(
      path,
      [&](std::ostream& out) {
        write_json(out, skeleton, 2, std::span(&records, 1));
        out << '\n';
      },
      "perf stats");
}

}  // namespace nerve::detail
