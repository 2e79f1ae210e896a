#include "perf/trace.hpp"

#include <algorithm>
#include <mutex>
#include <set>
#include <span>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "perf/stats.hpp"
#include "runtime/context_impl.hpp"
#include "util/json_text.hpp"
#include "util/log.hpp"
#include "util/replace_file.hpp"
#include "util/text_file.hpp"

namespace nerve::detail {
namespace {

constexpr int process_id = 1;
constexpr int device_track_base = 1000;
constexpr int transfer_track_base = 2000;
constexpr std::size_t utilisation_buckets = 100;
constexpr std::size_t max_pool_arrows = 262144;

int task_track(const TaskEvent& task) {
  return task.device == 0 ? 1 + task.worker : device_track_base + task.device;
}

nlohmann::json track_name(int track, const std::string& name, int sort_index) {
  return nlohmann::json::array({{{"ph", "M"},
                                 {"name", "thread_name"},
                                 {"pid", process_id},
                                 {"tid", track},
                                 {"args", {{"name", name}}}},
                                {{"ph", "M"},
                                 {"name", "thread_sort_index"},
                                 {"pid", process_id},
                                 {"tid", track},
                                 {"args", {{"sort_index", sort_index}}}}});
}

// Busy fraction per bucket of [0, end) for the intervals of one device (divided by its units).
std::vector<double> utilisation(const std::vector<std::pair<double, double>>& intervals, double end,
                                unsigned units) {
  std::vector<double> busy(utilisation_buckets, 0.0);
  const double width = end / utilisation_buckets;
  if (width <= 0) return busy;
  for (const auto& [begin, finish] : intervals) {
    auto first = static_cast<std::size_t>(std::max(0.0, begin / width));
    for (std::size_t b = first; b < utilisation_buckets; ++b) {
      const double lo = static_cast<double>(b) * width;
      const double hi = lo + width;
      if (lo >= finish) break;
      busy[b] += std::max(0.0, std::min(hi, finish) - std::max(lo, begin));
    }
  }
  for (double& value : busy) value = std::min(1.0, value / (width * std::max(1u, units)));
  return busy;
}

}  // namespace

nlohmann::json trace_to_json(const ContextImpl& context) {
  const PerfMonitor& perf = *context.perf;
  const std::int64_t epoch = perf.epoch_ns();
  const auto us = [&](std::int64_t t) { return static_cast<double>(t - epoch) / 1000.0; };
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"ph", "M"},
                    {"name", "process_name"},
                    {"pid", process_id},
                    {"args", {{"name", fmt::format("nerve context {}", context.id)}}}});

  const std::vector<DeviceInfo> devices = context.device_infos();
  for (unsigned i = 0; i < context.scheduler.slot_count(); ++i) {
    const std::string name = i == 0 ? "worker 0 (application thread)" : fmt::format("worker {}", i);
    for (auto& event : track_name(1 + static_cast<int>(i), name, static_cast<int>(i)))
      events.push_back(event);
  }
  for (const DeviceInfo& device : devices) {
    if (device.index == 0) continue;
    for (auto& event : track_name(device_track_base + device.index,
                                  fmt::format("device {} queue: {}", device.index, device.name),
                                  device_track_base + device.index)) {
      events.push_back(event);
    }
  }

  const std::vector<TaskEvent> tasks = perf.tasks();
  std::unordered_map<std::uint64_t, const TaskEvent*> by_id;
  double end = 0;
  std::vector<std::vector<std::pair<double, double>>> busy(devices.size());
  for (const TaskEvent& task : tasks) {
    by_id.emplace(task.id, &task);
    const double start = us(task.start_ns);
    const double finish = us(task.end_ns);
    end = std::max(end, finish);
    if (static_cast<std::size_t>(task.device) < busy.size())
      busy[static_cast<std::size_t>(task.device)].emplace_back(start, finish);
    nlohmann::json args = {{"id", task.id}, {"device", task.device}};
    if (task.submitted_ns != 0) args["submitted_us"] = us(task.submitted_ns);
    if (task.ready_ns != 0) args["ready_us"] = us(task.ready_ns);
    if (task.data_valid_ns != 0) args["data_valid_us"] = us(task.data_valid_ns);
    args["bytes_moved"] = task.bytes_moved;  // 0 included: docs/TRACING.md lists it on every slice
    args["status"] = outcome_name(task.outcome);
    if (context.decisions != nullptr) {  // scheduler.policy heft: why it ran where it did
      if (auto placement = context.decisions->annotation(task.id)) args["placement"] = std::move(*placement);
    }
    events.push_back({{"ph", "X"},
                      {"cat", "task"},
                      {"name", task.name.empty() ? std::string("task") : task.name},
                      {"ts", start},
                      {"dur", std::max(0.0, finish - start)},
                      {"pid", process_id},
                      {"tid", task_track(task)},
                      {"args", std::move(args)}});
  }

  // Flow arrows: from the predecessor's slice to the successor's (both must have been recorded). A
  // task pool's gate stands for its members: an edge into it is drawn into each member, one out of it
  // from each member.
  std::unordered_map<std::uint64_t, std::vector<std::uint64_t>> members_of;
  for (const PoolMemberEvent& entry : perf.pool_members()) members_of[entry.gate].push_back(entry.member);
  const auto ends_of = [&](const std::uint64_t& id) -> std::span<const std::uint64_t> {
    const auto pool = members_of.find(id);
    return pool != members_of.end() ? std::span<const std::uint64_t>(pool->second)
                                    : std::span<const std::uint64_t>(&id, 1);
  };
  std::uint64_t flow = 0;
  const auto arrow = [&](std::uint64_t from_id, std::uint64_t to_id) {
    const auto from = by_id.find(from_id);
    const auto to = by_id.find(to_id);
    if (from == by_id.end() || to == by_id.end()) return;
    ++flow;
    events.push_back({{"ph", "s"},
                      {"cat", "dependency"},
                      {"name", "dependency"},
                      {"id", flow},
                      {"ts", us(from->second->start_ns)},
                      {"pid", process_id},
                      {"tid", task_track(*from->second)}});
    events.push_back({{"ph", "f"},
                      {"bp", "e"},
                      {"cat", "dependency"},
                      {"name", "dependency"},
                      {"id", flow},
                      {"ts", us(to->second->start_ns)},
                      {"pid", process_id},
                      {"tid", task_track(*to->second)}});
  };
  // All arrows drawn through pools together are capped too: N tasks each ordered before a pool of N
  // gave N² arrows (a pool of 1,000: 195 MB of trace). What is cut is counted in otherData.
  std::size_t pool_arrows_left = max_pool_arrows;
  std::uint64_t pool_arrows_dropped = 0;
  for (const EdgeEvent& edge : perf.edges()) {
    const auto sources = ends_of(edge.from), targets = ends_of(edge.to);
    if (sources.size() == 1 && targets.size() == 1) {
      arrow(sources[0], targets[0]);
      continue;
    }
    const std::size_t wanted = sources.size() * targets.size();
    const std::size_t drawn = std::min(wanted, pool_arrows_left);
    pool_arrows_dropped += wanted - drawn;
    pool_arrows_left -= drawn;
    for (std::size_t i = 0; i < drawn; ++i) arrow(sources[i / targets.size()], targets[i % targets.size()]);
  }

  // Transfer engines: one track per (source, destination) memory node pair.
  std::vector<int> transfer_tracks;
  for (const TransferEvent& copy : perf.transfers()) {
    const int track =
        transfer_track_base + static_cast<int>(copy.from_node * max_memory_nodes + copy.to_node);
    if (std::find(transfer_tracks.begin(), transfer_tracks.end(), track) == transfer_tracks.end()) {
      transfer_tracks.push_back(track);
      for (auto& event : track_name(
               track, fmt::format("transfers node {} -> node {}", copy.from_node, copy.to_node), track))
        events.push_back(event);
    }
    end = std::max(end, us(copy.end_ns));
    events.push_back(
        {{"ph", "X"},
         {"cat", "transfer"},
         {"name", fmt::format("copy {} B", copy.bytes)},
         {"ts", us(copy.start_ns)},
         {"dur", std::max(0.0, us(copy.end_ns) - us(copy.start_ns))},
         {"pid", process_id},
         {"tid", track},
         {"args", {{"bytes", copy.bytes}, {"from_node", copy.from_node}, {"to_node", copy.to_node}}}});
  }

  // Utilisation counters per device over the recorded span.
  for (const DeviceInfo& device : devices) {
    const unsigned units = device.index == 0 ? context.scheduler.slot_count() : 1;
    const std::vector<double> values = utilisation(busy[static_cast<std::size_t>(device.index)], end, units);
    const double width = end / utilisation_buckets;
    for (std::size_t b = 0; b < values.size() && width > 0; ++b) {
      events.push_back({{"ph", "C"},
                        {"name", fmt::format("utilisation device {}", device.index)},
                        {"ts", static_cast<double>(b) * width},
                        {"pid", process_id},
                        {"args", {{"busy", values[b]}}}});
    }
  }

  // Sampled counters: the increase over each interval.
  const CounterStats counters = perf.counters();
  for (std::size_t i = 1; i < counters.samples.size(); ++i) {
    nlohmann::json args = nlohmann::json::object();
    for (std::size_t k = 0; k < counters.names.size(); ++k) {
      args[counters.names[k]] = counters.samples[i].values[k] - counters.samples[i - 1].values[k];
    }
    events.push_back({{"ph", "C"},
                      {"name", fmt::format("counters ({})", counters.source)},
                      {"ts", static_cast<double>(counters.samples[i].time_ns) / 1000.0},
                      {"pid", process_id},
                      {"args", std::move(args)}});
  }

  return {{"traceEvents", std::move(events)},
          {"displayTimeUnit", "ns"},
          {"otherData",
           {{"schema", "nerve.trace/1"},
            {"tasks_dropped", perf.dropped()},
            {"pool_arrows_dropped", pool_arrows_dropped},
            {"counter_source", counters.enabled ? counters.source : std::string("off")}}}};
}

void write_trace_file(const ContextImpl& context, const std::filesystem::path& path) {
  const std::string text = json_text(trace_to_json(context)) + '\n';
  // A regular file (or a new one) is replaced whole, through a temporary renamed over it: a process
  // stopped while writing (Ctrl-C) leaves the previous trace, not an empty or half file. A device,
  // a FIFO or a link (one that leads nowhere: the context resolved the others) is written in place,
  // and so is a file whose directory does not let a temporary be made beside it.
  std::error_code error;
  const auto status = std::filesystem::symlink_status(path, error);
  if (error || !std::filesystem::exists(status) || std::filesystem::is_regular_file(status)) {
    try {
      replace_file(path, text);
      return;
    } catch (const std::exception&) {  // no temporary possible there: written in place below
    }
  }
  write_text_file(path, text, "the trace");
}

void ContextImpl::write_trace() noexcept {
  try {
    write_trace_file(*this, trace_path);
    if (!trace_taken_by.empty()) {
      log::warn("perf.trace: '{}' is {} in this process; context {} wrote its own to '{}'", config.perf.trace,
                trace_taken_by, id, trace_path);
    } else {
      log::debug("trace written to {}", trace_path);
    }
  } catch (const std::exception& error) {
    log::warn("perf.trace: {}", error.what());
  }
}

}  // namespace nerve::detail
