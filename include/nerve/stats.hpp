// stats.hpp — what the runtime measured: per worker, per device, per task and per context.
//
// A snapshot: counters are read without stopping the workers, so values taken while tasks run are
// consistent per counter, not across counters. Times are nanoseconds since the context was created
// (steady clock). Context::dump_perf_stats() writes the same snapshot as JSON (docs/PERF_STATS.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nerve/memory.hpp"

namespace nerve {

struct WorkerStats {
  unsigned index = 0;
  int core = 0;  // logical core of the topology the worker is placed on
  int numa_node = 0;
  bool bound = false;               // its thread is pinned to the core's hardware threads
  bool application_thread = false;  // slot 0: run by whichever application thread waits in it
  std::uint64_t tasks_run = 0;
  std::uint64_t steals = 0;  // tasks taken from other workers' or the submitting thread's queues
  std::uint64_t sleeps = 0;  // times it parked after spinning scheduler.spin_us in vain
  // Time the slot was run (slot 0: while application threads waited inside nerve), split into
  // busy (running tasks, finding them) and idle (spinning or sleeping without work).
  std::uint64_t busy_ns = 0;
  std::uint64_t idle_ns = 0;
};

// One device of Context::devices(): index 0 is the CPU workers together.
struct DeviceStats {
  int index = 0;
  std::string name;
  std::string kind;  // "cpu", "test", "opencl", ...
  int memory_node = 0;
  // tasks: tasks that ended there, failed ones included — a call that failed before its kernel ran
  // (a program that does not build, a launch refused) counts, with no busy time (CPU: the workers'
  // tasks_run, less other devices' tasks they only cancelled). docs/PERF_STATS.md.
  std::uint64_t tasks = 0;
  std::uint64_t busy_ns = 0;    // CPU: the workers' busy time added up; a device: time running tasks
  std::uint64_t idle_ns = 0;    // capacity (elapsed × units) minus busy
  double utilisation = 0;       // busy / capacity, in [0, 1]
  std::uint64_t bytes_in = 0;   // copied into its memory node
  std::uint64_t bytes_out = 0;  // copied out of it
};

// Copies between two memory nodes (0 = host; DeviceInfo::memory_node for devices).
struct TransferStats {
  int from_node = 0;
  int to_node = 0;
  std::uint64_t copies = 0;
  std::uint64_t bytes = 0;
};

// Host memory: the pools buffers' host copies come from (one per NUMA node) and pinned staging.
struct MemoryStats {
  std::vector<MemoryPoolStats> host_pools;
  std::size_t host_bytes_reserved = 0;     // taken from the system by the host pools
  std::size_t host_bytes_in_use = 0;       // held by live buffers (whole chunks and blocks)
  std::size_t staging_bytes_reserved = 0;  // pinned staging buffers, free or in use
};

// One task, with perf.record_tasks (or perf.trace). A time is 0 when that step did not happen.
struct TaskTimes {
  std::uint64_t id = 0;  // numbered in submission order, from 1
  std::string name;
  int device = 0;   // where it ran (0 = CPU workers)
  int worker = -1;  // the worker slot (CPU tasks), -1 on a device
  std::int64_t submitted_ns = 0;
  std::int64_t ready_ns = 0;       // its last predecessor finished
  std::int64_t data_valid_ns = 0;  // its data was valid where it runs (copies done)
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  std::uint64_t bytes_moved = 0;  // bytes copied between memory nodes for it (not those of a copy it joined)
  // How it ended: "succeeded", "failed" (its body threw or its kernel failed), "cancelled" (a
  // predecessor failed, or its group was cancelled: it never ran), or "deferred" (its body handed
  // completion to another thread, which had not finished it when it was recorded).
  std::string status = "succeeded";
};

// perf.enable_counters: process-wide counters sampled every perf.counter_interval_ms.
struct CounterSample {
  std::int64_t time_ns = 0;
  std::vector<std::uint64_t> values;  // cumulative, one per CounterStats::names entry
};

struct CounterStats {
  bool enabled = false;
  // "perf_event hardware", "perf_event software" or "getrusage" (what this machine exposed)
  std::string source;
  std::vector<std::string> names;  // e.g. cycles, instructions, cache_misses or task_clock_ns, ...
  std::vector<CounterSample> samples;
};

// perf.models: one history model entry (kernel × device × data footprint).
struct PerfModelStats {
  std::string kernel;
  std::string device;           // "cpu" or "device:<index>"
  std::uint64_t footprint = 0;  // bytes the call accesses
  std::uint64_t samples = 0;
  double mean_ns = 0;
  double stddev_ns = 0;
  bool calibrating = true;           // fewer samples than the model trusts
  std::uint64_t outliers = 0;        // samples clamped to mean ± 3σ
  std::uint64_t recalibrations = 0;  // restarts after the times drifted
};

struct ContextStats {
  std::int64_t elapsed_ns = 0;  // since the context was created
  std::vector<WorkerStats> workers;
  std::vector<DeviceStats> devices;
  std::uint64_t tasks_submitted = 0;
  std::uint64_t tasks_completed = 0;
  std::vector<TransferStats> transfers;  // node pairs with at least one copy
  std::uint64_t bytes_transferred = 0;   // sum over `transfers`
  std::uint64_t copies = 0;
  MemoryStats memory;
  bool tasks_recorded = false;             // perf.record_tasks or perf.trace is on
  std::vector<TaskTimes> task_records;     // finished tasks, by id (submission order)
  std::uint64_t task_records_dropped = 0;  // beyond perf.max_task_records
  CounterStats counters;
  bool models_enabled = false;
  std::string model_directory;
  std::vector<PerfModelStats> models;
};

}  // namespace nerve
