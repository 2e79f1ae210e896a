#include "perf/trace.hpp"

#include <algorithm>
#include <mutex>
#include <span>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "perf/stats.hpp"
#include "runtime/context_impl.hpp"
#include "util/json_stream.hpp"
#include "util/log.hpp"
#include "util/replace_file.hpp"
#include "util/text_file.hpp"

namespace nerve::detail {
namespace {

constexpr int process_id = 1;
constexpr int device_track_base = 1000;
constexpr int transfer_track_base = 2000;
// A device's or a node pair's lane L > 0 (slices that overlap those of the lanes before) is track
// base + L * lane_stride.
constexpr int lane_stride = 1'000'000;
constexpr std::size_t utilisation_buckets = 100;
constexpr std::size_t max_pool_arrows = 262144;

// Lanes: Perfetto draws the slices of one track only when they nest, but a device runs kernels on
// several queues at once and a node pair has several copies in flight. Each slice goes to the first
// lane of its track whose last slice ended before it starts.
class Lanes {
 public:
  // lane_of() for slices given in order of their start.
  unsigned lane_of(double start, double finish) {
    for (std::size_t lane = 0; lane < ends_.size(); ++lane) {
      if (ends_[lane] <= start) {
        ends_[lane] = finish;
        return static_cast<unsigned>(lane);
      }
    }
    if (ends_.size() == max_lanes) {  // the tids stay ints: the last lane takes the rest, overlapping
      ends_.back() = std::max(ends_.back(), finish);
      return max_lanes - 1;
    }
    ends_.push_back(finish);
    return static_cast<unsigned>(ends_.size() - 1);
  }
  static constexpr unsigned max_lanes = 1000;  // max_lanes * lane_stride fits an int
  unsigned count() const noexcept { return static_cast<unsigned>(ends_.size()); }

 private:
  std::vector<double> ends_;
};

std::string lane_suffix(unsigned lane) { return lane == 0 ? std::string() : fmt::format(" ({})", lane + 1); }

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

// add_busy(): adds the run [begin, finish) to the busy time of the buckets of width `width` it covers.
void add_busy(std::vector<double>& busy, double begin, double finish, double width) {
  if (width <= 0) return;
  const auto first = static_cast<std::size_t>(std::max(0.0, begin / width));
  for (std::size_t b = first; b < busy.size(); ++b) {
    const double lo = static_cast<double>(b) * width;
    const double hi = lo + width;
    if (lo >= finish) break;
    busy[b] += std::max(0.0, std::min(hi, finish) - std::max(lo, begin));
  }
}

// TraceWriter: the trace's events, each written as soon as it is made. What it keeps is small: the
// recorded tasks' order by id (8 bytes a task; the events stay in the monitor's logs), and copies of
// the edges (16 bytes each) and pool memberships (8 bytes each, a list per pool), bounded with the
// records by perf.max_task_records, and of the transfers (32 bytes each).
class TraceWriter {
 public:
  explicit TraceWriter(const ContextImpl& context)
      : context_(context),
        perf_(*context.perf),
        epoch_(perf_.epoch_ns()),
        devices_(context.device_infos()),
        tasks_(perf_.task_index()),
        edges_(perf_.edges()),
        transfers_(perf_.transfers()),
        counters_(perf_.counters()) {
    for (const PoolMemberEvent& entry : perf_.pool_members()) members_of_[entry.gate].push_back(entry.member);
    assign_device_lanes();
    for (const TaskEvent* task : tasks_) end_ = std::max(end_, us(task->end_ns));
    for (const TransferEvent& copy : transfers_) end_ = std::max(end_, us(copy.end_ns));
    // otherData, written before the events, says how many arrows through pools were cut.
    pool_arrows_dropped_ = visit_arrows([](std::uint64_t, std::uint64_t) {});
  }

  nlohmann::json skeleton() const {
    return {{"traceEvents", nlohmann::json::array()},
            {"displayTimeUnit", "ns"},
            {"otherData",
             {{"schema", "nerve.trace/1"},
              {"tasks_dropped", perf_.dropped()},
              {"transfers_dropped", perf_.transfers_dropped()},
              {"pool_arrows_dropped", pool_arrows_dropped_},
              {"counter_source", counters_.enabled ? counters_.source : std::string("off")}}}};
  }

  void write_events(JsonArrayWriter& events) const {
    write_tracks(events);
    write_tasks(events);
    write_arrows(events);
    write_transfers(events);
    write_utilisation(events);
    write_counters(events);
  }

 private:
  double us(std::int64_t t) const { return static_cast<double>(t - epoch_) / 1000.0; }

  // assign_device_lanes(): each device task's lane (Lanes), and how many lanes each device needs.
  void assign_device_lanes() {
    std::vector<const TaskEvent*> by_start;
    for (const TaskEvent* task : tasks_) {
      if (task->device != 0) by_start.push_back(task);
    }
    std::stable_sort(by_start.begin(), by_start.end(),
                     [](const TaskEvent* a, const TaskEvent* b) { return a->start_ns < b->start_ns; });
    for (const TaskEvent* task : by_start) {
      Lanes& lanes = device_lanes_[task->device];
      device_lane_of_[task] = lanes.lane_of(us(task->start_ns), us(task->end_ns));
    }
  }

  int task_track(const TaskEvent& task) const {
    if (task.device == 0) return 1 + task.worker;
    const auto lane = device_lane_of_.find(&task);
    return device_track_base + task.device +
           (lane != device_lane_of_.end() ? static_cast<int>(lane->second) : 0) * lane_stride;
  }

  const TaskEvent* task(std::uint64_t id) const {
    const auto at = std::lower_bound(tasks_.begin(), tasks_.end(), id,
                                     [](const TaskEvent* task, std::uint64_t key) { return task->id < key; });
    return at != tasks_.end() && (*at)->id == id ? *at : nullptr;
  }

  // ends_of(): the tasks an edge's end stands for: a pool's gate its members, a task itself.
  std::span<const std::uint64_t> ends_of(const std::uint64_t& id) const {
    const auto pool = members_of_.find(id);
    return pool != members_of_.end() ? std::span<const std::uint64_t>(pool->second)
                                     : std::span<const std::uint64_t>(&id, 1);
  }

  static void add_all(JsonArrayWriter& events, const nlohmann::json& list) {
    for (const auto& event : list) events.add(event);
  }

  void write_tracks(JsonArrayWriter& events) const {
    events.add({{"ph", "M"},
                {"name", "process_name"},
                {"pid", process_id},
                {"args", {{"name", fmt::format("nerve context {}", context_.id)}}}});
    for (unsigned i = 0; i < context_.scheduler.slot_count(); ++i) {
      const std::string name = i == 0 ? "worker 0 (application thread)" : fmt::format("worker {}", i);
      add_all(events, track_name(1 + static_cast<int>(i), name, static_cast<int>(i)));
    }
    for (const DeviceInfo& device : devices_) {
      if (device.index == 0) continue;
      const auto lanes = device_lanes_.find(device.index);
      const unsigned count = lanes != device_lanes_.end() ? std::max(1u, lanes->second.count()) : 1;
      for (unsigned lane = 0; lane < count; ++lane) {
        add_all(events,
                track_name(device_track_base + device.index + static_cast<int>(lane) * lane_stride,
                           fmt::format("device {} queue: {}{}", device.index, device.name, lane_suffix(lane)),
                           device_track_base + device.index));
      }
    }
  }

  void write_tasks(JsonArrayWriter& events) const {
    for (const TaskEvent* task : tasks_) {
      const double start = us(task->start_ns);
      const double finish = us(task->end_ns);
      nlohmann::json args = {{"id", task->id}, {"device", task->device}};
      if (task->submitted_ns != 0) args["submitted_us"] = us(task->submitted_ns);
      if (task->ready_ns != 0) args["ready_us"] = us(task->ready_ns);
      if (task->data_valid_ns != 0) args["data_valid_us"] = us(task->data_valid_ns);
      args["bytes_moved"] = task->bytes_moved;  // 0 included: docs/TRACING.md lists it on every slice
      args["status"] = outcome_name(task->outcome);
      if (context_.decisions != nullptr) {  // scheduler.policy heft: why it ran where it did
        if (auto placement = context_.decisions->annotation(task->id))
          args["placement"] = std::move(*placement);
      }
      events.add({{"ph", "X"},
                  {"cat", "task"},
                  {"name", task->name.empty() ? std::string("task") : task->name},
                  {"ts", start},
                  {"dur", std::max(0.0, finish - start)},
                  {"pid", process_id},
                  {"tid", task_track(*task)},
                  {"args", std::move(args)}});
    }
  }

  // visit_arrows(): `arrow` for each (predecessor, successor) pair the edges join. A task pool's
  // gate stands for its members: an edge into it joins each member, one out of it each member. All
  // pairs through pools together are capped: N tasks each ordered before a pool of N gave N² arrows
  // (a pool of 1,000: 195 MB of trace). Returns how many the cap cut.
  template <class Arrow>
  std::uint64_t visit_arrows(Arrow&& arrow) const {
    std::size_t pool_arrows_left = max_pool_arrows;
    std::uint64_t dropped = 0;
    for (const EdgeEvent& edge : edges_) {
      const auto sources = ends_of(edge.from), targets = ends_of(edge.to);
      if (sources.size() == 1 && targets.size() == 1) {
        arrow(sources[0], targets[0]);
        continue;
      }
      const std::size_t wanted = sources.size() * targets.size();
      const std::size_t drawn = std::min(wanted, pool_arrows_left);
      dropped += wanted - drawn;
      pool_arrows_left -= drawn;
      for (std::size_t i = 0; i < drawn; ++i) arrow(sources[i / targets.size()], targets[i % targets.size()]);
    }
    return dropped;
  }

  // Flow arrows: from the predecessor's slice to the successor's (both must have been recorded).
  void write_arrows(JsonArrayWriter& events) const {
    std::uint64_t flow = 0;
    // One end of arrow `flow`, at the start of `at`'s slice ("s" leaves it, "f" enters it).
    const auto end_at = [&](const char* phase, const TaskEvent& at) {
      nlohmann::json end = {{"ph", phase},          {"cat", "dependency"},   {"name", "dependency"},
                            {"id", flow},           {"ts", us(at.start_ns)}, {"pid", process_id},
                            {"tid", task_track(at)}};
      if (phase[0] == 'f') end["bp"] = "e";  // bound to the enclosing slice
      events.add(end);
    };
    const auto arrow = [&](std::uint64_t from_id, std::uint64_t to_id) {
      const TaskEvent* from = task(from_id);
      const TaskEvent* to = task(to_id);
      if (from == nullptr || to == nullptr) return;
      ++flow;
      end_at("s", *from);
      end_at("f", *to);
    };
    visit_arrows(arrow);
  }

  // Transfer engines: one track per (source, destination) memory node pair, with a lane per copy in
  // flight at once (Lanes).
  void write_transfers(JsonArrayWriter& events) const {
    std::vector<const TransferEvent*> by_start;
    for (const TransferEvent& copy : transfers_) by_start.push_back(&copy);
    std::stable_sort(by_start.begin(), by_start.end(), [](const TransferEvent* a, const TransferEvent* b) {
      return a->start_ns < b->start_ns;
    });
    std::unordered_map<int, Lanes> lanes_of;  // by the pair's first track
    std::vector<int> transfer_tracks;
    for (const TransferEvent* each : by_start) {
      const TransferEvent& copy = *each;
      const int pair =
          transfer_track_base + static_cast<int>(copy.from_node * max_memory_nodes + copy.to_node);
      const unsigned lane = lanes_of[pair].lane_of(us(copy.start_ns), us(copy.end_ns));
      const int track = pair + static_cast<int>(lane) * lane_stride;
      if (std::find(transfer_tracks.begin(), transfer_tracks.end(), track) == transfer_tracks.end()) {
        transfer_tracks.push_back(track);
        add_all(events, track_name(track,
                                   fmt::format("transfers node {} -> node {}{}", copy.from_node, copy.to_node,
                                               lane_suffix(lane)),
                                   pair));
      }
      events.add(
          {{"ph", "X"},
           {"cat", "transfer"},
           {"name", fmt::format("copy {} B", copy.bytes)},
           {"ts", us(copy.start_ns)},
           {"dur", std::max(0.0, us(copy.end_ns) - us(copy.start_ns))},
           {"pid", process_id},
           {"tid", track},
           {"args", {{"bytes", copy.bytes}, {"from_node", copy.from_node}, {"to_node", copy.to_node}}}});
    }
  }

  // Utilisation counters per device over the recorded span: the busy fraction of each of 100 equal
  // steps (divided by the device's units).
  void write_utilisation(JsonArrayWriter& events) const {
    const double width = end_ / utilisation_buckets;
    std::vector<std::vector<double>> busy(devices_.size(), std::vector<double>(utilisation_buckets, 0.0));
    for (const TaskEvent* task : tasks_) {
      if (static_cast<std::size_t>(task->device) < busy.size())
        add_busy(busy[static_cast<std::size_t>(task->device)], us(task->start_ns), us(task->end_ns), width);
    }
    for (const DeviceInfo& device : devices_) {
      const unsigned units = device.index == 0 ? context_.scheduler.slot_count() : 1;
      std::vector<double>& values = busy[static_cast<std::size_t>(device.index)];
      for (double& value : values) value = std::min(1.0, value / (width * std::max(1u, units)));
      for (std::size_t b = 0; b < values.size() && width > 0; ++b) {
        events.add({{"ph", "C"},
                    {"name", fmt::format("utilisation device {}", device.index)},
                    {"ts", static_cast<double>(b) * width},
                    {"pid", process_id},
                    {"args", {{"busy", values[b]}}}});
      }
    }
  }

  // Sampled counters: the increase over each interval.
  void write_counters(JsonArrayWriter& events) const {
    for (std::size_t i = 1; i < counters_.samples.size(); ++i) {
      nlohmann::json args = nlohmann::json::object();
      for (std::size_t k = 0; k < counters_.names.size(); ++k) {
        args[counters_.names[k]] = counters_.samples[i].values[k] - counters_.samples[i - 1].values[k];
      }
      events.add({{"ph", "C"},
                  {"name", fmt::format("counters ({})", counters_.source)},
                  {"ts", static_cast<double>(counters_.samples[i].time_ns) / 1000.0},
                  {"pid", process_id},
                  {"args", std::move(args)}});
    }
  }

  const ContextImpl& context_;
  const PerfMonitor& perf_;
  const std::int64_t epoch_;
  const std::vector<DeviceInfo> devices_;
  const std::vector<const TaskEvent*> tasks_;  // by id
  const std::vector<EdgeEvent> edges_;
  const std::vector<TransferEvent> transfers_;
  const CounterStats counters_;
  std::unordered_map<std::uint64_t, std::vector<std::uint64_t>> members_of_;
  std::unordered_map<int, Lanes> device_lanes_;                    // by device
  std::unordered_map<const TaskEvent*, unsigned> device_lane_of_;  // device tasks only
  double end_ = 0;
  std::uint64_t pool_arrows_dropped_ = 0;
};

}  // namespace

void write_trace_file(const ContextImpl& context, const std::filesystem::path& path) {
  const TraceWriter trace(context);
  const nlohmann::json skeleton = trace.skeleton();
  const StreamedArray events{"/traceEvents", [&](JsonArrayWriter& writer) { trace.write_events(writer); }};
  const auto write = [&](std::ostream& out) {
    write_json(out, skeleton, -1, std::span(&events, 1));
    out << '\n';
  };
  // A regular file (or a new one) is replaced whole, through a temporary renamed over it: a process
  // stopped while writing (Ctrl-C), or a write that fails (a full disk), leaves the previous trace,
  // not an empty or half file. A device, a FIFO or a link (one that leads nowhere: the context
  // resolved the others) is written in place, and so is a file whose directory does not let a
  // temporary be made beside it or renamed over it.
  std::error_code error;
  const auto status = std::filesystem::symlink_status(path, error);
  if (error || !std::filesystem::exists(status) || std::filesystem::is_regular_file(status)) {
    try {
      replace_file(path, write);
      return;
    } catch (const ReplaceRefused&) {  // written in place below
    }
  }
  write_text_file(path, write, "the trace");
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
