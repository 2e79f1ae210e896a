#include "perf/monitor.hpp"

#include "perf/counters.hpp"
#include "runtime/context_impl.hpp"

namespace nerve::detail {

PerfMonitor::PerfMonitor(const Config::Perf& config)
    : epoch_ns_(monotonic_ns()),
      records_tasks_(config.records_tasks()),
      max_records_(config.max_task_records),
      config_(config),
      devices_(new DeviceActivity[max_memory_nodes]) {}

PerfMonitor::~PerfMonitor() { stop_counters(); }

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

void PerfMonitor::device_task(ThreadState& thread, const TaskRecord& task, std::int64_t start_ns) {
  const std::int64_t end = monotonic_ns();
  DeviceActivity& activity = devices_[task.device];
  activity.tasks.fetch_add(1, std::memory_order_relaxed);
  activity.busy_ns.fetch_add(static_cast<std::uint64_t>(end - start_ns), std::memory_order_relaxed);
  if (!records_tasks_) return;
  TaskEvent event = begin_event(&task, task.device, -1);
  event.start_ns = start_ns;
  event.end_ns = end;
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

void PerfMonitor::edge(ThreadState& thread, const TaskRecord* from, const TaskRecord* to) {
  TaskLog& log = log_of(thread);
  std::lock_guard lock(log.lock);
  log.edges.push_back(EdgeEvent{from->trace_id, to->trace_id});
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
                   task->bytes_moved.load(std::memory_order_relaxed)};
}

void PerfMonitor::record(ThreadState& thread, TaskEvent&& event) {
  if (taken_.fetch_add(1, std::memory_order_relaxed) >= max_records_) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  TaskLog& log = log_of(thread);
  std::lock_guard lock(log.lock);
  log.tasks.push_back(std::move(event));
}

void PerfMonitor::transfer_finished(unsigned from, unsigned to, std::uint64_t bytes, std::int64_t start_ns) {
  const std::int64_t end = monotonic_ns();
  std::lock_guard lock(transfers_mutex_);
  transfers_.push_back(TransferEvent{from, to, bytes, start_ns, end});
}

template <class Event>
std::vector<Event> PerfMonitor::gather(std::vector<Event> TaskLog::*member) const {
  std::vector<Event> all;
  std::lock_guard lock(logs_mutex_);
  for (const auto& log : logs_) {
    std::lock_guard log_lock(log->lock);
    const std::vector<Event>& events = (*log).*member;
    all.insert(all.end(), events.begin(), events.end());
  }
  return all;
}

std::vector<TaskEvent> PerfMonitor::tasks() const { return gather(&TaskLog::tasks); }
std::vector<EdgeEvent> PerfMonitor::edges() const { return gather(&TaskLog::edges); }

std::vector<TransferEvent> PerfMonitor::transfers() const {
  std::lock_guard lock(transfers_mutex_);
  return transfers_;
}

void PerfMonitor::start_counters() {
  if (config_.enable_counters && sampler_ == nullptr)
    sampler_ = std::make_unique<CounterSampler>(config_.counter_interval);
}

void PerfMonitor::stop_counters() noexcept {
  if (sampler_ != nullptr) sampler_->stop();
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
  TaskEvent event =
      perf.begin_event(task, 0, thread.slot != nullptr ? static_cast<int>(thread.slot->index) : -1);
  context_.execute(task, thread);  // the record may be recycled from here on
  event.end_ns = monotonic_ns();
  perf.record(thread, std::move(event));
}

ThreadState& MonitoredExecutor::create_worker_state(unsigned slot) {
  return context_.create_worker_state(slot);
}

void MonitoredExecutor::on_slot_idle() noexcept { context_.on_slot_idle(); }

}  // namespace nerve::detail
