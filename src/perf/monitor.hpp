// monitor.hpp — what the runtime records about its own work: device activity (always), and with
// perf.record_tasks / perf.trace one record per task, per copy and per dependency edge.
//
// Zero cost when off: ContextImpl::recorder is null and the task path tests it once (make_ready);
// execution times come from MonitoredExecutor, which the scheduler is given *instead of* the
// context only when recording, so executing a task carries no test at all.
//
// Threads: each thread appends to its own TaskLog under the log's spin lock (uncontended except
// while a snapshot copies it); copies and device activity may be reported from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "nerve/config.hpp"
#include "nerve/stats.hpp"

#include "memory/coherence.hpp"
#include "sched/heft.hpp"
#include "sched/scheduler.hpp"
#include "util/monotonic_clock.hpp"
#include "util/spin_lock.hpp"

namespace nerve::detail {

struct ContextImpl;
class CounterSampler;
class HistoryModels;

struct TaskEvent {
  std::uint64_t id;
  std::string name;
  int device;
  int worker;
  std::int64_t submitted_ns, ready_ns, data_valid_ns, start_ns, end_ns;  // absolute monotonic_ns
  std::uint64_t bytes_moved;
  std::uint32_t outcome = 0;  // status_succeeded, _failed, _cancelled; status_running: deferred
};

// outcome_name(): "succeeded", "failed", "cancelled", or "deferred" (any other status): how the
// records (TaskTimes::status) and the trace name a TaskEvent's outcome.
const char* outcome_name(std::uint32_t outcome) noexcept;

struct EdgeEvent {
  std::uint64_t from;  // predecessor's id
  std::uint64_t to;
};

// A task pool's member: the pool's gate (bookkeeping, never drawn) stands for its members in edges,
// so an edge into the gate is drawn into each member and one out of it from each member.
struct PoolMemberEvent {
  std::uint64_t gate;
  std::uint64_t member;
};

struct TransferEvent {
  unsigned from_node, to_node;
  std::uint64_t bytes;
  std::int64_t start_ns, end_ns;
};

// One thread's records.
struct TaskLog {
  SpinLock lock;
  std::deque<TaskEvent> tasks;  // chunked: growing never copies what is recorded
  std::deque<EdgeEvent> edges;
  std::deque<PoolMemberEvent> pool_members;
  // Records this thread may still add (taken from the global bound in batches). Atomic: a thread
  // that finds the bound taken uses another thread's unused quota before dropping a record.
  std::atomic<std::uint64_t> quota{0};
};

// Per device (by index; 0 = CPU workers, unused): tasks run and time spent running them.
// A device's busy time is the union of its tasks' runs: tasks running at once on its several queues
// count once (summed, a device looked busy 100 % of the time it was 65 %). Runs are reported as
// completions are seen, which on several queues (and with PoCL's callbacks) is not in the order of
// their starts or ends: the recent runs are kept, merged, so that a late report counts only the part
// no other run covered. Runs that ended more than `horizon_ns` before the latest end are dropped
// from the list (a report later than that counts only from there on).
struct DeviceActivity {
  static constexpr std::int64_t horizon_ns = 1'000'000'000;
  std::atomic<std::uint64_t> tasks{0};
  std::atomic<std::uint64_t> busy_ns{0};
  void add_run(std::int64_t start_ns, std::int64_t end_ns) noexcept;

 private:
  SpinLock lock_;
  std::vector<std::pair<std::int64_t, std::int64_t>> recent_;  // disjoint, by start; guarded by lock_
  std::int64_t forgotten_until_ = 0;                           // runs before this are no longer listed
};

class DecisionLog;

class PerfMonitor final : public TransferObserver {
 public:
  explicit PerfMonitor(const Config::Perf& config);
  ~PerfMonitor();
  PerfMonitor(const PerfMonitor&) = delete;
  PerfMonitor& operator=(const PerfMonitor&) = delete;

  std::int64_t epoch_ns() const noexcept { return epoch_ns_; }
  bool records_tasks() const noexcept { return records_tasks_; }
  DeviceActivity& device(int index) noexcept { return devices_[index]; }
  const DeviceActivity& device(int index) const noexcept { return devices_[index]; }

  // device_task(): `task` ran on its device from start_ns until end_ns (always; records it when
  // recording). Called before the task finishes, from the device's thread, in the order the device
  // saw their completions (the busy time is the union of the runs whatever that order: see
  // DeviceActivity).
  void device_task(ThreadState& thread, const TaskRecord& task, std::int64_t start_ns, std::int64_t end_ns,
                   std::uint32_t outcome);

  // --- recording (only called when records_tasks())
  // task_submitted(): numbers a task that may have predecessors (before its edges are added).
  void task_submitted(TaskRecord* task) noexcept;
  // task_ready(): its last predecessor finished (or it had none); numbers lean tasks.
  void task_ready(TaskRecord* task, bool submission) noexcept;
  // edge(): records that `to` waits for `from`; under memory exhaustion the edge is left out, and so
  // it is once no task can be recorded any more (max_task_records is taken): `to`, submitted now,
  // will not be.
  void edge(ThreadState& thread, const TaskRecord* from, const TaskRecord* to) noexcept;
  // pool_launched(): a task pool's gate (numbered now, in an id space of its own) and its members;
  // under memory exhaustion, or once no task can be recorded any more, the members are left out
  // (their arrows with them).
  void pool_launched(ThreadState& thread, TaskRecord* gate, std::span<TaskRecord* const> members) noexcept;
  // record(): append a finished task's event to `thread`'s log (unless max_task_records is reached:
  // then its heft decision, kept for its trace slice, goes too).
  void record(ThreadState& thread, TaskEvent&& event);
  // keep_decisions_in(): heft's decisions kept for the trace (set once, before any task runs).
  void keep_decisions_in(DecisionLog* decisions) noexcept { decisions_ = decisions; }
  TaskEvent begin_event(const TaskRecord* task, int device, int worker) const;

  // TransferObserver (from copy engines' threads)
  void transfer_finished(unsigned from, unsigned to, std::uint64_t bytes, std::int64_t start_ns) override;

  // --- reading (any thread, any time)
  std::vector<TaskEvent> tasks() const;
  // task_index(): the recorded tasks by id, in place: a record is never moved nor changed once
  // appended (the logs are deques that only grow at the back), so the pointers stay valid for the
  // monitor's life — 8 bytes a record where tasks() copies them whole.
  std::vector<const TaskEvent*> task_index() const;
  std::vector<EdgeEvent> edges() const;
  std::vector<PoolMemberEvent> pool_members() const;
  // stored_edges(): the edges and pool memberships the logs hold (what edges() and pool_members()
  // would copy), for tests of their bound.
  std::size_t stored_edges() const;
  std::vector<TransferEvent> transfers() const;
  std::uint64_t dropped() const noexcept { return dropped_.load(std::memory_order_relaxed); }
  // transfers_dropped(): copies between memory nodes past perf.max_task_records, not kept as events.
  std::uint64_t transfers_dropped() const;
  CounterStats counters() const;

  // start_counters(): the perf.enable_counters sampling thread. finish(): at shutdown, stop it and
  // save the performance models.
  void start_counters();
  void finish() noexcept;
  // models(): perf.models, else null.
  HistoryModels* models() const noexcept { return models_.get(); }
  // model_sample(): `task` ran on `device` for `ns` (kernel calls only).
  void model_sample(const TaskRecord& task, int device, std::int64_t ns);
  // cpu_run_finished(): `run` (on this thread) ended with `outcome`; called by finish() while the
  // record is intact. Failed runs are no sample of a kernel's time.
  void cpu_run_finished(ThreadState& thread, MonitoredRun& run, std::uint32_t outcome);

 private:
  TaskLog& log_of(ThreadState& thread);
  // take_quota(): one record from `log`'s quota, else from the bound, else from another thread's.
  bool take_quota(TaskLog& log);
  // forget_unrecorded_edges(): once no task can be recorded any more, lets go of the edges and pool
  // memberships that no trace can draw (an end not recorded), so that they take no more memory than
  // the records do. Waits for nothing: while a record the bound granted is not yet appended, it
  // leaves everything, and a later drop tries again.
  void forget_unrecorded_edges() noexcept;
  // gather(): every thread's events of one kind, copied under their logs' locks.
  template <class Event>
  std::vector<Event> gather(std::deque<Event> TaskLog::*member) const;

  const std::int64_t epoch_ns_;
  const bool records_tasks_;
  const std::uint64_t max_records_;
  const Config::Perf config_;
  std::unique_ptr<DeviceActivity[]> devices_;
  std::atomic<std::uint64_t> next_id_{0};
  static constexpr std::uint64_t gate_id_bit = std::uint64_t{1} << 63;  // pool gates' ids
  std::atomic<std::uint64_t> next_gate_id_{0};
  std::atomic<std::uint64_t> taken_{0};
  std::atomic<std::uint64_t> dropped_{0};
  std::atomic<std::uint64_t> published_{0};  // of taken_, the records added to a thread's quota
  std::atomic<bool> exhausted_{false};       // the bound is taken and no thread holds unused quota
  std::atomic<bool> edges_pruned_{false};    // forget_unrecorded_edges() has done its work
  mutable std::mutex logs_mutex_;
  std::vector<std::unique_ptr<TaskLog>> logs_;
  mutable std::mutex transfers_mutex_;
  std::vector<TransferEvent> transfers_;  // at most max_records_; the copies beyond are counted
  std::uint64_t transfers_dropped_ = 0;
  std::unique_ptr<CounterSampler> sampler_;
  std::unique_ptr<HistoryModels> models_;
  DecisionLog* decisions_ = nullptr;
};

// scheduler.policy heft: the CPU workers free up by a task's prediction once it has run — before its
// successors are placed (PerfMonitor::cpu_run_finished(), from finish()), else when its run's frame
// ends (a body that deferred its completion to another thread).
struct HeftCredit {
  HeftPlacer* placer = nullptr;
  HeftAssignment assignment{};

  HeftCredit() = default;
  HeftCredit(const HeftCredit&) = delete;
  HeftCredit& operator=(const HeftCredit&) = delete;
  ~HeftCredit() { give_back(); }
  void give_back() {
    if (assignment.device < 0) return;
    placer->done(assignment);
    assignment.device = -1;
  }
};

// A CPU task MonitoredExecutor is running: PerfMonitor::cpu_run_finished() ends it from finish(),
// before the task's completion is published, so whoever waits for the task then sees its sample
// and its record, and a successor's ready time is never before the task's end.
struct MonitoredRun {
  const TaskRecord* task;
  bool modelled;  // a kernel call while perf.models is on: learn its run time
  bool recorded;  // perf.record_tasks: `event` is filed
  HeftCredit heft{};
  bool finished = false;
  // The coroutine's end in this stretch, when its record must say so although the stretch task
  // itself succeeds (the coroutine's Task carries the outcome, reported once): status_failed, an
  // exception escaped it; status_cancelled, its group was cancelled before it started and it never
  // ran. 0: the stretch's own outcome.
  std::uint32_t coroutine_outcome = 0;
  std::int64_t start_ns = 0;
  TaskEvent event{};
};

// footprint_of(): the bytes a task accesses (its performance models' size key).
std::uint64_t footprint_of(const TaskRecord& task) noexcept;

// The scheduler's executor while recording: times each task around ContextImpl::execute.
class MonitoredExecutor final : public TaskExecutor {
 public:
  explicit MonitoredExecutor(ContextImpl& context) : context_(context) {}
  void execute(TaskRecord* task, ThreadState& thread) override;
  ThreadState& create_worker_state(unsigned slot) override;
  void on_slot_idle() noexcept override;
  bool may_help(ThreadState& thread) override;
  bool forked_inside_a_task() noexcept override;

 private:
  ContextImpl& context_;
};

}  // namespace nerve::detail
