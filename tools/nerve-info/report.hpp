// report.hpp — what nerve-info reports: the machine, the workers, the effective configuration and the
// devices, gathered once (inspect()) and then rendered as text (print_*.cpp) or JSON (json_report.cpp).
//
// Gathering and rendering are separate so that the text and the JSON output always describe the same
// run, and so that the renderers are plain functions of a value (no runtime is alive while printing).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "nerve/config.hpp"
#include "nerve/topology.hpp"

namespace nerve::info {

// One CPU worker slot of the context nerve-info created.
struct WorkerInfo {
  unsigned index = 0;
  int core = 0;  // logical core of the topology
  int numa_node = 0;
  int package = 0;
  std::vector<int> planned_pus;     // the core's PUs (OS numbering) the slot's thread is bound to
  bool bound = false;               // the runtime pinned the slot's thread to planned_pus
  bool application_thread = false;  // slot 0: run by the application thread while it waits
  std::string not_bound_reason;     // empty when bound
  // The CPUs the slot's thread may run on, read by a task that ran on it; nullopt when no probe task
  // reached the slot in time.
  std::optional<std::vector<int>> observed_cpus;
};

// How many workers there are and why.
struct WorkerPool {
  unsigned count = 0;
  bool automatic = false;       // parallel.thread_pool_size = auto
  std::string reason;           // e.g. "automatic: the 2 CPUs this process may run on"
  unsigned allowed_cpus = 0;    // CPUs in the process's affinity mask (real machine)
  unsigned available_cpus = 0;  // allowed_cpus capped by the cgroup CPU quota
  ThreadAffinity affinity = ThreadAffinity::compact;
};

// A device nerve can run tasks on: the CPU workers, then the accelerators the context opened
// (gpu.devices selects them), in list_devices() (devices.cpp).
struct DeviceInfo {
  std::string kind;    // "cpu", "opencl", "cuda", "test" (a plugin's simulated device), ...
  std::string name;    // what the text output shows, e.g. "CPU workers", "pthread-haswell"
  unsigned count = 0;  // CPU workers: how many; an accelerator: 1
  // Accelerators only (index 0, memory node 0 for the CPU workers):
  int index = 0;  // the device's number in the context (TaskOptions::device)
  // Its number among the accelerators the backends found, the one gpu.devices takes (0 = the first
  // accelerator); -1 when unknown.
  int gpu_devices_index = -1;
  std::string backend;  // "opencl", a plugin's name
  int memory_node = 0;  // the memory node its replicas live in
  // That node's name, as error messages and bus.json name it: the device's name, unless another
  // device of the context has the same one.
  std::string memory_node_name;
  std::uint64_t memory_bytes = 0;
  unsigned compute_units = 0;
  int numa_node = -1;      // the host NUMA node it hangs on (hwloc), -1 when unknown
  std::string pci_bus_id;  // where on PCI, when the driver says
  bool unified_memory = false;
  bool shares_host_cores = false;  // it computes on the CPU workers' cores (an OpenCL CPU device)
  unsigned queues = 0;             // gpu.stream_count as opened
  unsigned max_pending_transfers = 0;
};

struct Report {
  std::string version;  // nerve's version (the CMake project version)
  Config config;
  Topology topology;
  WorkerPool pool;
  std::vector<WorkerInfo> workers;
  std::vector<DeviceInfo> accelerators;  // what the context opened (inspect())
  std::vector<DeviceInfo> devices;
  // Backends that found no device, and why ("cuda: cudart 13.0 (driver none): no device (...)").
  std::vector<std::string> backend_notes;
  // Each host NUMA node's pool as it describes itself: allocator, numa_policy, huge pages.
  std::vector<std::string> host_memory;
};

// inspect() creates a nerve::Context from `settings`, probes its workers and shuts it down again.
// Throws ConfigError for an invalid configuration (as Context does), Error for anything else.
Report inspect(const Settings& settings, std::string version);

// list_devices() is the one place that enumerates devices; the text and JSON outputs both use it.
std::vector<DeviceInfo> list_devices(const Report& report);

// Text sections, each ending with a newline.
std::string print_machine(const Topology& topology);
std::string print_workers(const Report& report);
std::string print_config(const Config& config);
std::string print_devices(const std::vector<DeviceInfo>& devices);
std::string print_host_memory(const std::vector<std::string>& pools);
// calibrate_bus() measures the bus between every pair of memory nodes of a context made from
// `settings`, saves it to perf.model_dir/bus.json (heft reads it) and renders the matrix.
// `save_error` receives why the file could not be written (empty: saved).
std::string calibrate_bus(const Settings& settings, bool json, std::string& save_error);

// report_to_json() gives the document described in docs/NERVE_INFO.md.
nlohmann::ordered_json report_to_json(const Report& report);

// Shared formatting helpers (format.cpp).
std::string format_bytes(std::uint64_t bytes);       // "48 KiB", "1.2 MiB", "7.6 GiB"
std::string format_cpu_list(std::vector<int> cpus);  // "0-3,8,10-11"
std::string affinity_name(ThreadAffinity affinity);
// printable() is `text` with what a terminal would not show as it is written visibly, so that a value
// can neither break a table's rows nor send the terminal a control sequence: a newline, tab and
// carriage return as \n, \t, \r; the other control characters and DEL as \x1b (their byte), the C1
// controls as \u0085; a byte that is not part of a UTF-8 character as \xff; and a backslash as \\,
// so that each escape reads one way. For the text output's values from users (configuration values,
// file names, device names); the JSON output has its own escapes.
std::string printable(std::string_view text);

}  // namespace nerve::info
