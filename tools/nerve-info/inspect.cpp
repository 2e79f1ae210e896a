// inspect(): run a real nerve::Context and record what it did with its workers.
//
// The report must show what the runtime actually does, not what nerve-info thinks it would do, so the
// worker count, cores and `bound` flags come from the context itself. Two things are added on top:
//  - the PUs each slot is bound to, from plan_workers() with the same inputs the scheduler used (the
//    effective configuration and this thread's affinity mask; nerve-info never changes it);
//  - each slot's real affinity mask, read by a probe task running on that slot.
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <utility>

#include <fmt/format.h>

#include "nerve/context.hpp"

#include "backend/registry.hpp"
#include "report.hpp"
#include "runtime/context_impl.hpp"
#include "topology/affinity.hpp"

namespace nerve::info {
namespace {

using namespace std::chrono_literals;

// How long the probe waits for every slot to pick up a task. Idle workers answer within
// microseconds; this bound only matters when a configuration keeps workers from taking the probe
// (a long scheduler.work_stealing_threshold), and then the report says "not observed" instead.
constexpr auto probe_timeout = 2s;

// observe_worker_cpus() runs one task per slot and records, per slot, the CPUs its thread may run on.
// Each task holds its slot until every task has started, so no slot can run two of them and every
// slot runs exactly one (the application thread runs slot 0's inside the pool's wait_all()).
//
// The tasks go out as one TaskPool: its launch queues them all at once, never helping to run one or
// waiting for room. Spawned one by one, they met the submitter's back-pressure (more tasks in flight
// than task_queue.max_in_flight, a queue past task_queue.per_device_queue_depth): the application
// thread ran a probe inside spawn(), which held it until the deadline, and the probes not yet
// spawned never reached their slots ("not observed" after a 2 s stall).
std::vector<std::optional<std::vector<int>>> observe_worker_cpus(Context& context) {
  const unsigned count = context.worker_count();
  struct Probe {
    std::mutex mutex;
    std::condition_variable started;
    unsigned arrived = 0;
    std::vector<std::optional<std::vector<int>>> cpus;
  } probe;
  probe.cpus.resize(count);
  const auto deadline = std::chrono::steady_clock::now() + probe_timeout;
  TaskPool probes(context, count);
  for (unsigned i = 0; i < count; ++i) {
    probes.add([&context, &probe, count, deadline] {
      const int slot = context.current_worker();
      std::vector<int> cpus = topology::current_thread_cpus();
      std::unique_lock lock(probe.mutex);
      if (slot >= 0 && static_cast<unsigned>(slot) < count && !probe.cpus[slot])
        probe.cpus[slot] = std::move(cpus);
      ++probe.arrived;
      probe.started.notify_all();
      probe.started.wait_until(lock, deadline, [&] { return probe.arrived >= count; });
    });
  }
  probes.wait_all();
  return std::move(probe.cpus);
}

std::string not_bound_reason(const WorkerStats& worker, const Config& config, const Topology& topology) {
  if (worker.bound) return {};
  if (worker.application_thread) return "application thread (nerve does not bind it)";
  if (config.parallel.thread_affinity == ThreadAffinity::none) return "parallel.thread_affinity = none";
  if (topology.synthetic())
    return config.topology.xml.empty() ? "synthetic topology" : "XML topology (not this machine)";
  return "binding failed (see the warning on stderr)";
}

std::string cpus(unsigned count) { return fmt::format("{} CPU{}", count, count == 1 ? "" : "s"); }

WorkerPool describe_pool(const Config& config, const Topology& topology, unsigned count) {
  WorkerPool pool;
  pool.count = count;
  pool.affinity = config.parallel.thread_affinity;
  pool.automatic = config.parallel.thread_pool_size == 0;
  pool.allowed_cpus = static_cast<unsigned>(topology::current_thread_cpus().size());
  pool.available_cpus = topology::available_cpu_count();
  const ConfigOrigin& origin = config.origin("parallel.thread_pool_size");
  unsigned basis = count;  // what the automatic count starts from, before the cap
  if (!pool.automatic) {
    pool.reason = fmt::format("parallel.thread_pool_size = {} ({})", config.parallel.thread_pool_size,
                              origin.describe());
  } else if (topology.synthetic()) {
    basis = static_cast<unsigned>(topology.cores().size());
    pool.reason = fmt::format("automatic: the {} cores of the {} topology", topology.cores().size(),
                              config.topology.xml.empty() ? "synthetic" : "XML");
  } else if (pool.available_cpus < pool.allowed_cpus) {
    pool.reason = fmt::format("automatic: the cgroup CPU quota ({}) of the {} this process may run on",
                              cpus(pool.available_cpus), cpus(pool.allowed_cpus));
  } else {
    pool.reason = fmt::format("automatic: the {} this process may run on", cpus(pool.available_cpus));
  }
  if (pool.automatic && count < basis) pool.reason += fmt::format(", at most {} workers", count);
  if (pool.automatic)
    pool.reason += fmt::format(" (parallel.thread_pool_size = auto, {})", origin.describe());
  return pool;
}

// describe_accelerators(): the devices the context opened besides the CPU workers, with how they are
// driven (queues, transfer bound), read before the context shuts down.
std::vector<DeviceInfo> describe_accelerators(const Context& context) {
  std::vector<DeviceInfo> found;
  for (const auto& device : context.impl()->devices) {
    const nerve::DeviceInfo& info = device->info();
    const detail::DeviceCapabilities capabilities = device->capabilities();
    DeviceInfo out;
    out.kind = nerve::name(info.kind);
    out.name = info.name;
    out.count = 1;
    out.index = info.index;
    out.backend = info.backend;
    out.memory_node = static_cast<int>(device->memory().index());
    out.memory_node_name = device->memory().name();
    out.memory_bytes = info.memory_bytes;
    out.compute_units = info.compute_units;
    out.numa_node = info.numa_node;
    out.pci_bus_id = info.pci_bus_id;
    out.unified_memory = capabilities.unified_memory;
    out.shares_host_cores = info.shares_host_cores;
    out.queues = capabilities.queues;
    out.max_pending_transfers = capabilities.max_pending_transfers;
    found.push_back(std::move(out));
  }
  // Their gpu.devices numbers: the backends' enumeration again, selected as the context did (its
  // k-th accelerator is the k-th selected). Left unknown should the two disagree.
  if (!found.empty()) {
    std::vector<nerve::DeviceInfo> infos;
    for (const detail::FoundDevice& device : detail::find_devices(context.topology()))
      infos.push_back(device.info);
    const std::vector<std::size_t> selected = detail::selected_devices(context.config(), infos);
    if (selected.size() == found.size()) {
      for (std::size_t k = 0; k < found.size(); ++k) {
        if (infos[selected[k]].name == found[k].name)
          found[k].gpu_devices_index = static_cast<int>(selected[k]);
      }
    }
  }
  return found;
}

}  // namespace

Report inspect(const Settings& settings, std::string version) {
  Context context(settings);
  const std::vector<std::optional<std::vector<int>>> observed = observe_worker_cpus(context);
  // Join the worker threads: each sets its `bound` flag itself, and only after the join are all the
  // flags final and safe to read.
  std::vector<DeviceInfo> accelerators = describe_accelerators(context);
  // The backends asked for devices while the context was built (not with gpu.devices = none) keep
  // why they found none: say so, instead of a silently empty list.
  std::vector<std::string> backend_notes;
  if (!context.config().gpu.devices.empty()) {
    for (const auto& backend : detail::backends()) {
      if (std::string why = backend->unavailable_reason(); !why.empty())
        backend_notes.push_back(fmt::format("{}: {}", backend->name(), why));
    }
  }
  std::vector<std::string> host_memory;
  for (const MemoryPoolStats& pool : context.stats().memory.host_pools) host_memory.push_back(pool.node);
  context.impl()->shutdown();

  Report report;
  report.host_memory = std::move(host_memory);
  report.version = std::move(version);
  report.config = context.config();
  report.topology = context.topology();
  report.pool = describe_pool(report.config, report.topology, context.worker_count());

  const std::vector<topology::WorkerPlacement> plan =
      topology::plan_workers(report.topology, report.pool.count, report.config.parallel.thread_affinity);
  for (const WorkerStats& stats : context.stats().workers) {
    WorkerInfo worker;
    worker.index = stats.index;
    worker.core = stats.core;
    worker.numa_node = stats.numa_node;
    worker.package = report.topology.cores().at(static_cast<std::size_t>(stats.core)).package;
    // The plan is the scheduler's (same function, same inputs); fall back to the core's PUs should a
    // future scheduler place workers differently.
    worker.planned_pus = stats.index < plan.size() && plan[stats.index].core == stats.core
                             ? plan[stats.index].pu_os_indices
                             : report.topology.cores()[static_cast<std::size_t>(stats.core)].pu_os_indices;
    worker.bound = stats.bound;
    worker.application_thread = stats.application_thread;
    worker.not_bound_reason = not_bound_reason(stats, report.config, report.topology);
    if (stats.index < observed.size()) worker.observed_cpus = observed[stats.index];
    report.workers.push_back(std::move(worker));
  }
  report.accelerators = std::move(accelerators);
  report.backend_notes = std::move(backend_notes);
  report.devices = list_devices(report);
  return report;
}

}  // namespace nerve::info
