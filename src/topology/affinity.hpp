// affinity.hpp — how many worker threads to start, which core each one gets, and pinning it there.
//
// Used by the worker pool when a context starts and by nerve-info. All functions are thread safe:
// they read the topology (immutable) and the calling thread's or process's state only.
#pragma once

#include <atomic>
#include <filesystem>
#include <optional>
#include <vector>

#include "nerve/config.hpp"
#include "nerve/topology.hpp"

namespace nerve::topology {

// available_cpu_count() is the number of CPUs in the calling thread's affinity mask (a process
// inherits it from taskset, numactl or its cpuset; call it before binding the thread), capped by the
// CPU bandwidth quota of the process's cgroup (rounded up). Never 0.
unsigned available_cpu_count();
// available_cpu_count(cgroup_dir) does the same with the quota of the cgroup directory `cgroup_dir`
// only (tests point it at fake cgroup files).
unsigned available_cpu_count(const std::filesystem::path& cgroup_dir);

// cgroup_cpu_limit() reads the CPU quota of one cgroup directory: cgroup v2 `cpu.max` ("quota period"
// or "max period"), else cgroup v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us` (-1 = unlimited). The
// quota in CPUs is rounded up (150000/100000 → 2) and at least 1. nullopt when there is no limit or
// the files are missing or unreadable: a quota we cannot parse must not shrink the pool.
std::optional<unsigned> cgroup_cpu_limit(const std::filesystem::path& cgroup_dir);

// The most workers a context runs: parallel.thread_pool_size's upper bound, which `auto` obeys too.
inline constexpr unsigned max_worker_count = 4096;

// default_worker_count() is the pool size for thread_pool_size = 0: available_cpu_count() on the real
// machine, the topology's core count on a synthetic or XML topology; at most max_worker_count.
unsigned default_worker_count(const Topology& topology);

struct WorkerPlacement {
  int core = 0;                    // logical core index in the topology
  int numa_node = 0;               // the core's NUMA node
  int package = 0;                 // the core's package
  std::vector<int> pu_os_indices;  // the core's PUs the worker may run on (OS numbering)
};

// plan_workers() assigns a core to each of `workers` workers.
//   compact: worker i on the i-th usable core in topology order;
//   scatter: round-robin over packages, within a package over its NUMA nodes, then over cores, so
//            consecutive workers land on different packages / nodes;
//   none:    as compact — the core still guides locality decisions, but the worker is not bound.
// With more workers than usable cores the assignment wraps around. On the real machine a core is
// usable when one of its PUs is in the calling thread's affinity mask; on a synthetic topology every
// core is.
std::vector<WorkerPlacement> plan_workers(const Topology& topology, unsigned workers,
                                          ThreadAffinity affinity);
// This overload takes the usable PUs (OS indices) explicitly. When none of the topology's PUs is
// usable, every core is used (binding will then report the problem).
std::vector<WorkerPlacement> plan_workers(const Topology& topology, unsigned workers, ThreadAffinity affinity,
                                          const std::vector<int>& allowed_pus);

// bind_current_thread() pins the calling thread to the placement's PUs and returns true. It returns
// false without doing anything on a synthetic topology, and returns false after logging a warning
// when the operating system refuses; it never throws. The overload with `warned` logs only the first
// failure among all calls sharing that flag (a pool passes one flag for all its workers) and later
// ones at debug level.
bool bind_current_thread(const WorkerPlacement& placement, const Topology& topology);
bool bind_current_thread(const WorkerPlacement& placement, const Topology& topology,
                         std::atomic_flag& warned);

// current_thread_cpus() lists the OS indices of the CPUs the calling thread may run on (ascending);
// empty if the affinity cannot be read.
std::vector<int> current_thread_cpus();
// set_current_thread_cpus() replaces the calling thread's affinity mask; false (errno set) when
// `cpus` is empty or the operating system refuses.
bool set_current_thread_cpus(const std::vector<int>& cpus);

}  // namespace nerve::topology
