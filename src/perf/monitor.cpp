#include "perf/monitor.hpp"

#include <algorithm>
#include <iterator>
#include <new>
#include <utility>

#include <fmt/format.h>

#include "nerve/error.hpp"

#include "perf/counters.hpp"
#include "perf/decision_log.hpp"
#include "perf/history_model.hpp"
#include "perf/output_path.hpp"
#include "runtime/context_impl.hpp"
#include "task/kernel_task.hpp"
#include "util/log.hpp"

namespace nerve::detail {

PerfMonitor::PerfMonitor(const Config::Perf& config)
    : epoch_ns_(monotonic_ns()),
      records_tasks_(config.records_tasks()),
      max_records_(config.max_task_records),
      config_(config),
      devices_(new DeviceActivity[max_memory_nodes]) {
  if (config.models) {
    // Absolute now: models are saved where they were loaded from, even if the program changed its
    // working directory meanwhile (the bus model's bus.json lives beside them).
    models_ = std::make_unique<HistoryModels>(absolute_path(config.model_dir.empty()
                                                                ? HistoryModels::default_directory()
                                                                : std::filesystem::path(config.model_dir)));
    // A directory the program named must be usable, as perf.trace's file must; the default one
    // (under the user's cache) only warns: a heft context, which turns models on itself, still runs.
    if (const std::string unusable = models_->usable_directory(); !unusable.empty()) {
      if (!config.model_dir.empty())
        throw ConfigError(fmt::format("perf.model_dir: {}", unusable), "perf.model_dir");
      log::warn("performance models will not be saved: {} (set perf.model_dir)", unusable);
    }
    models_->load();
  }
}

PerfMonitor::~PerfMonitor() {
  if (sampler_ != nullptr) sampler_->stop();
}

std::uint64_t footprint_of(const TaskRecord& task) noexcept {
  std::uint64_t footprint = 0;
  for (std::size_t i = 0; i < task.access_count; ++i) footprint += task.accesses[i].size;
  return footprint;
}

void PerfMonitor::model_sample(const TaskRecord& task, int device, std::int64_t ns) {
  const char* kernel = model_name(task);
  if (models_ == nullptr || kernel == nullptr) return;
  models_->add(kernel, model_device(device), footprint_of(task), static_cast<double>(ns));
}

void PerfMonitor::task_submitted(TaskRecord* task) noexcept {
  task->trace_id = next_id_.fetch_add(1, std::memory_order_relaxed) + 1;
  task->submitted_ns = monotonic_ns();
  task->start_ns = 0;
  task->bytes_moved.store(0, std::memory_order_relaxed);
}

void PerfMonitor::task_ready(TaskRecord* task, bool submission) noexcept {
  const std::int64_t now = monotonic_ns();
  if (submission && task->lean) {  // lean tasks skip task_submitted: they are ready at once
    task->trace_id = next_id_.fetch_add(1, std::memory_order_relaxed) + 1;
    task->submitted_ns = now;
    task->start_ns = 0;
    task->bytes_moved.store(0, std::memory_order_relaxed);
  }
  task->ready_ns = now;
  task->data_valid_ns = now;  // dispatch() moves it later when copies were needed
}

void DeviceActivity::add_run(std::int64_t start_ns, std::int64_t end_ns) noexcept {
  std::lock_guard lock(lock_);
  start_ns = std::max(start_ns, forgotten_until_);
  if (end_ns <= start_ns) return;
  // The runs overlapping or touching [start, end): merged into it, their lengths not counted again.
  auto first = std::lower_bound(recent_.begin(), recent_.end(), start_ns,
                                [](const auto& run, std::int64_t at) { return run.second < at; });
  auto last = first;
  std::int64_t added = end_ns - start_ns;
  std::int64_t merged_start = start_ns;
  std::int64_t merged_end = end_ns;
  for (; last != recent_.end() && last->first <= end_ns; ++last) {
    added -= std::max<std::int64_t>(0, std::min(end_ns, last->second) - std::max(start_ns, last->first));
    merged_start = std::min(merged_start, last->first);
    merged_end = std::max(merged_end, last->second);
  }
  busy_ns.fetch_add(static_cast<std::uint64_t>(added), std::memory_order_relaxed);
  if (first != last) {
    *first = {merged_start, merged_end};
    recent_.erase(first + 1, last);
  } else {
    try {
      recent_.insert(first, {merged_start, merged_end});
    } catch (const std::bad_alloc&) {  // counted; later reports may count part of it again
    }
  }
  // Forget what ended long before the latest end.
  const std::int64_t latest = recent_.empty() ? end_ns : std::max(end_ns, recent_.back().second);
  auto keep = recent_.begin();
  while (keep != recent_.end() && keep->second < latest - horizon_ns) ++keep;
  if (keep != recent_.begin()) {
    forgotten_until_ = std::max(forgotten_until_, std::prev(keep)->second);
    recent_.erase(recent_.begin(), keep);
  }
}

void PerfMonitor::device_task(ThreadState& thread, const TaskRecord& task, std::int64_t start_ns,
                              std::int64_t end_ns, std::uint32_t outcome) {
  const std::int64_t end = std::max(end_ns, start_ns);
  DeviceActivity& activity = devices_[task.device];
  activity.tasks.fetch_add(1, std::memory_order_relaxed);
  activity.add_run(start_ns, end);
  if (outcome == status_succeeded)
    model_sample(task, task.device, end - start_ns);  // a failure is no run time
  if (!records_tasks_) return;
  TaskEvent event = begin_event(&task, task.device, -1);
  event.start_ns = start_ns;
  event.end_ns = end;
  event.outcome = outcome;
  record(thread, std::move(event));
}

TaskLog& PerfMonitor::log_of(ThreadState& thread) {
  if (thread.perf_log == nullptr) {
    std::lock_guard lock(logs_mutex_);
    logs_.push_back(std::make_unique<TaskLog>());
    thread.perf_log = logs_.back().get();
  }
  return *thread.perf_log;
}

// Called while the task's edges are being added, with its trackers locked: a failure here must not
// undo a submission that is half in the graph, so an edge that cannot be stored (out of memory) is
// left out of the recording, and the graph itself is not affected.
void PerfMonitor::edge(ThreadState& thread, const TaskRecord* from, const TaskRecord* to) noexcept {
  // Once the bound is taken for good, the task being submitted cannot be recorded: its edges could
  // never be drawn, and kept they grew without limit (16 bytes each, a chain of 20 M tasks: 250 MB
  // for 16 records).
  if (exhausted_.load(std::memory_order_relaxed)) return;
  try {
    TaskLog& log = log_of(thread);
    std::lock_guard lock(log.lock);
    log.edges.push_back(EdgeEvent{from->trace_id, to->trace_id});
  } catch (const std::bad_alloc&) {
  }
}

void PerfMonitor::pool_launched(ThreadState& thread, TaskRecord* gate,
                                std::span<TaskRecord* const> members) noexcept {
  // Numbered apart from the tasks (whose ids run from 1 in submission order, without gaps).
  gate->trace_id = gate_id_bit | (next_gate_id_.fetch_add(1, std::memory_order_relaxed) + 1);
  if (exhausted_.load(std::memory_order_relaxed)) return;  // no member can be recorded (edge())
  try {
    TaskLog& log = log_of(thread);
    std::lock_guard lock(log.lock);
    for (const TaskRecord* member : members) log.pool_members.push_back({gate->trace_id, member->trace_id});
  } catch (const std::bad_alloc&) {
  }
}

const char* outcome_name(std::uint32_t outcome) noexcept {
  switch (outcome) {
    case status_succeeded: return "succeeded";
    case status_failed: return "failed";
    case status_cancelled: return "cancelled";
    default: return "deferred";
  }
}

TaskEvent PerfMonitor::begin_event(const TaskRecord* task, int device, int worker) const {
  return TaskEvent{task->trace_id,
                   task->name != nullptr ? std::string(task->name) : std::string(),
                   device,
                   worker,
                   task->submitted_ns,
                   task->ready_ns,
                   task->data_valid_ns,
                   monotonic_ns(),
                   0,
                   task->bytes_moved.load(std::memory_order_relaxed),
                   status_succeeded};
}

namespace {
// take_one(): one unit of `quota`, if any.
bool take_one(std::atomic<std::uint64_t>& quota) noexcept {
  std::uint64_t left = quota.load(std::memory_order_relaxed);
  while (left != 0) {
    if (quota.compare_exchange_weak(left, left - 1, std::memory_order_relaxed)) return true;
  }
  return false;
}
}  // namespace

bool PerfMonitor::take_quota(TaskLog& log) {
  constexpr std::uint64_t batch = 256;  // records a thread takes from the bound at a time
  if (take_one(log.quota)) return true;
  // Near the bound, batches shrink (a quarter of what is left), so little quota sits unused.
  std::uint64_t taken = taken_.load(std::memory_order_relaxed);
  while (taken < max_records_) {
    const std::uint64_t grant = std::min(batch, std::max<std::uint64_t>(1, (max_records_ - taken) / 4));
    if (taken_.compare_exchange_weak(taken, taken + grant, std::memory_order_relaxed)) {
      log.quota.fetch_add(grant - 1, std::memory_order_relaxed);
      published_.fetch_add(grant, std::memory_order_release);
      return true;
    }
  }
  // The bound is taken: records other threads reserved but have not used are still free, so the
  // bound is exact. Once every grant is published and none is left, none can appear (quota only
  // shrinks now): stop looking.
  if (exhausted_.load(std::memory_order_relaxed)) return false;
  const bool all_published = published_.load(std::memory_order_acquire) >= max_records_;
  std::lock_guard lock(logs_mutex_);
  for (const auto& other : logs_) {
    if (take_one(other->quota)) return true;
  }
  if (all_published) exhausted_.store(true, std::memory_order_relaxed);
  return false;
}

void PerfMonitor::record(ThreadState& thread, TaskEvent&& event) {
  TaskLog& log = log_of(thread);
  if (!take_quota(log)) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    if (decisions_ != nullptr) decisions_->forget(event.id);
    if (exhausted_.load(std::memory_order_relaxed) && !edges_pruned_.load(std::memory_order_relaxed))
      forget_unrecorded_edges();
    return;
  }
  std::lock_guard lock(log.lock);
  log.tasks.push_back(std::move(event));
}

void PerfMonitor::forget_unrecorded_edges() noexcept {
  std::lock_guard lock(logs_mutex_);
  if (edges_pruned_.load(std::memory_order_relaxed)) return;
  // Every record the bound granted must be in a log first: one granted but not yet appended would
  // lose its edges. Appended records are never removed, so the ids read below are all of them.
  std::uint64_t appended = 0;
  for (const auto& log : logs_) {
    std::lock_guard log_lock(log->lock);
    appended += log->tasks.size();
  }
  if (appended < max_records_) return;
  // Out of memory part way, what was let go was useless anyway, and a later drop tries again.
  try {
    std::vector<std::uint64_t> recorded;
    recorded.reserve(appended);
    for (const auto& log : logs_) {
      std::lock_guard log_lock(log->lock);
      for (const TaskEvent& task : log->tasks) recorded.push_back(task.id);
    }
    std::sort(recorded.begin(), recorded.end());
    const auto is_recorded = [&](std::uint64_t id) {
      return std::binary_search(recorded.begin(), recorded.end(), id);
    };
    // A pool's gate stands for its recorded members: an edge through it is drawn if one is left.
    std::vector<std::uint64_t> drawn_gates;
    for (const auto& log : logs_) {
      std::lock_guard log_lock(log->lock);
      std::erase_if(log->pool_members,
                    [&](const PoolMemberEvent& entry) { return !is_recorded(entry.member); });
      log->pool_members.shrink_to_fit();
      for (const PoolMemberEvent& entry : log->pool_members) drawn_gates.push_back(entry.gate);
    }
    std::sort(drawn_gates.begin(), drawn_gates.end());
    const auto drawn = [&](std::uint64_t id) {
      return (id & gate_id_bit) != 0 ? std::binary_search(drawn_gates.begin(), drawn_gates.end(), id)
                                     : is_recorded(id);
    };
    for (const auto& log : logs_) {
      std::lock_guard log_lock(log->lock);
      std::erase_if(log->edges, [&](const EdgeEvent& edge) { return !drawn(edge.from) || !drawn(edge.to); });
      log->edges.shrink_to_fit();
    }
    edges_pruned_.store(true, std::memory_order_relaxed);
  } catch (const std::bad_alloc&) {
  }
}

std::size_t PerfMonitor::stored_edges() const {
  std::lock_guard lock(logs_mutex_);
  std::size_t stored = 0;
  for (const auto& log : logs_) {
    std::lock_guard log_lock(log->lock);
    stored += log->edges.size() + log->pool_members.size();
  }
  return stored;
}

void PerfMonitor::transfer_finished(unsigned from, unsigned to, std::uint64_t bytes, std::int64_t start_ns) {
  const std::int64_t end = monotonic_ns();
  std::lock_guard lock(transfers_mutex_);
  // Bounded as the task records are (perf.max_task_records): one event per copy grew without end
  // on a long run. The totals per pair of nodes are the coherence engine's counters, not these.
  if (transfers_.size() >= max_records_) {
    ++transfers_dropped_;
    return;
  }
  try {
    transfers_.push_back(TransferEvent{from, to, bytes, start_ns, end});
  } catch (const std::bad_alloc&) {  // the copy is done; only its slice is left out
    ++transfers_dropped_;
  }
}

std::uint64_t PerfMonitor::transfers_dropped() const {
  std::lock_guard lock(transfers_mutex_);
  return transfers_dropped_;
}

template <class Event>
std::vector<Event> PerfMonitor::gather(std::deque<Event> TaskLog::*member) const {
  std::vector<Event> all;
  std::lock_guard lock(logs_mutex_);
  for (const auto& log : logs_) {
    std::lock_guard log_lock(log->lock);
    const std::deque<Event>& events = (*log).*member;
    all.insert(all.end(), events.begin(), events.end());
  }
  return all;
}

std::vector<TaskEvent> PerfMonitor::tasks() const { return gather(&TaskLog::tasks); }

std::vector<const TaskEvent*> PerfMonitor::task_index() const {
  std::vector<const TaskEvent*> index;
  {
    std::lock_guard lock(logs_mutex_);
    for (const auto& log : logs_) {
      std::lock_guard log_lock(log->lock);
      for (const TaskEvent& task : log->tasks) index.push_back(&task);
    }
  }
  std::sort(index.begin(), index.end(), [](const TaskEvent* a, const TaskEvent* b) { return a->id < b->id; });
  return index;
}
std::vector<EdgeEvent> PerfMonitor::edges() const { return gather(&TaskLog::edges); }
std::vector<PoolMemberEvent> PerfMonitor::pool_members() const { return gather(&TaskLog::pool_members); }

std::vector<TransferEvent> PerfMonitor::transfers() const {
  std::lock_guard lock(transfers_mutex_);
  return transfers_;
}

void PerfMonitor::start_counters() {
  if (config_.enable_counters && sampler_ == nullptr)
    sampler_ = std::make_unique<CounterSampler>(config_.counter_interval);
}

void PerfMonitor::finish() noexcept {
  if (sampler_ != nullptr) sampler_->stop();
  if (models_ != nullptr) models_->save();
}

CounterStats PerfMonitor::counters() const {
  if (sampler_ == nullptr) return {};
  CounterStats stats = sampler_->snapshot();
  for (CounterSample& sample : stats.samples) sample.time_ns -= epoch_ns_;
  return stats;
}

// --- MonitoredExecutor

void MonitoredExecutor::execute(TaskRecord* task, ThreadState& thread) {
  PerfMonitor& perf = *context_.perf;
  const bool modelled = model_name(*task) != nullptr;
  // A task the CPU workers may not run (a kernel without a CPU body, or one sent to a device) reaches
  // one only to be cancelled before it was placed anywhere (place_with_data): no CPU run to record
  // (docs/PERF_STATS.md).
  MonitoredRun run{task, perf.models() != nullptr && modelled,
                   perf.records_tasks() && context_.cpu_may_run(*task)};
  if (HeftPlacer* placer = context_.heft.get(); placer != nullptr && modelled) {
    run.heft.placer = placer;
    run.heft.assignment = placer->take(task);
  }
  if (run.recorded)
    run.event = perf.begin_event(task, 0, thread.slot != nullptr ? static_cast<int>(thread.slot->index) : -1);
  run.start_ns = run.recorded ? run.event.start_ns : monotonic_ns();
  // Innermost first: a task that helps while it waits runs others here before its own finish().
  struct Enter {
    ThreadState& thread;
    MonitoredRun* outer;
    ~Enter() { thread.perf_run = outer; }
  } enter{thread, std::exchange(thread.perf_run, &run)};
  context_.execute(task, thread);
  // Not finished here: its body deferred its completion to another thread. Recorded as deferred.
  if (!run.finished && run.recorded) {
    run.event.end_ns = monotonic_ns();
    run.event.outcome = status_running;
    perf.record(thread, std::move(run.event));
  }
}

void PerfMonitor::cpu_run_finished(ThreadState& thread, MonitoredRun& run, std::uint32_t outcome) {
  const std::int64_t end = monotonic_ns();
  run.finished = true;
  run.heft.give_back();
  if (run.modelled && outcome == status_succeeded)
    models_->add(model_name(*run.task), model_device(0), footprint_of(*run.task),
                 static_cast<double>(end - run.start_ns));
  if (!run.recorded) return;
  run.event.end_ns = end;
  run.event.outcome =
      run.coroutine_outcome != 0 && outcome == status_succeeded ? run.coroutine_outcome : outcome;
  record(thread, std::move(run.event));
}

ThreadState& MonitoredExecutor::create_worker_state(unsigned slot) {
  return context_.create_worker_state(slot);
}

void MonitoredExecutor::on_slot_idle() noexcept { context_.on_slot_idle(); }
bool MonitoredExecutor::may_help(ThreadState& thread) { return context_.may_help(thread); }
bool MonitoredExecutor::forked_inside_a_task() noexcept { return context_.forked_inside_a_task(); }

}  // namespace nerve::detail
