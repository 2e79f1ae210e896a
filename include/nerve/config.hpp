// config.hpp — the runtime's configuration: one YAML file, NERVE_* environment overrides, API settings.
//
// Precedence, lowest to highest: built-in default < YAML file < environment < API (Settings::set).
// The YAML file is the one given by Settings::config_file(), else the one named by NERVE_CONFIG.
// An environment override for key `section.key` is NERVE_<SECTION>_<KEY> in upper case, e.g.
// NERVE_PARALLEL_THREAD_POOL_SIZE=2 for parallel.thread_pool_size.
//
// Every key is validated when the configuration is loaded: an unknown key (with a did-you-mean
// suggestion), a value of the wrong type and a value out of range are ConfigErrors naming the key and,
// for file values, the file and line. Keys that belong to features this build does not implement yet
// are rejected with a message saying so — never silently accepted. docs/CONFIG.md documents every key.
//
// Thread safety: a Config is an immutable value once loaded; Settings is a plain value type.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "nerve/export.hpp"

namespace nerve {

enum class SchedulerPolicy {
  eager,                    // one shared ready queue; idle workers take the oldest ready task
  locality_aware_stealing,  // tasks placed near their data; thieves try victims by topology distance
  heft,  // each ready kernel call goes to the device with the earliest expected finish time
         // (device free + missing data over the measured bus + modelled run time); CPU workers
         // then schedule as under locality_aware_stealing
};

enum class ThreadAffinity {
  none,     // workers are not bound
  compact,  // worker i on the i-th core in topology order (fills a package before the next)
  scatter,  // workers spread round-robin over packages / NUMA nodes
};

enum class NumaAffinity {
  strict,     // a task whose data lives on NUMA node k runs only on workers of node k
  preferred,  // such a task is queued on node k, but other nodes' workers may steal it
  none,       // data location is ignored when placing tasks
};

enum class QueueType {
  lock_free_mpsc,  // per-device lock-free multi-producer single-consumer queues
  mutex,           // per-device queues guarded by a mutex (a simple reference implementation)
};

// Where a memory node's big blocks come from (memory.allocator).
enum class MemoryAllocator {
  system,    // mmap/munmap, page-aligned
  jemalloc,  // libjemalloc.so.2, loaded at run time
  tcmalloc,  // libtcmalloc_minimal.so.4 (or libtcmalloc.so.4), loaded at run time
};

// Where host pool memory is placed among NUMA nodes (memory.numa_policy).
struct NumaPolicy {
  enum class Kind {
    local,       // no binding: the first thread that writes a page gets it on its node (first touch)
    interleave,  // pages spread round-robin over every NUMA node
    preferred,   // pages on `node` while it has memory, elsewhere after that
  };
  Kind kind = Kind::local;
  int node = 0;  // Kind::preferred: a logical NUMA node index, checked against the topology by the pool

  friend bool operator==(const NumaPolicy&, const NumaPolicy&) = default;
};

// How ranks of a distributed run talk (distributed.communication_backend).
enum class CommunicationBackend {
  none,  // one process: a distributed::Runtime is a world of one rank
  mpi,   // MPI (Open MPI), launched by mpirun or nerve-run; only in builds with NERVE_WITH_MPI
};

// Compression of distributed payloads (distributed.compression).
enum class Compression {
  none,
  zstd,  // Zstandard level 1, for payloads of at least Distributed::compression_threshold bytes
};

// One host of a distributed run (distributed.nodes): what nerve-run writes into the MPI hostfile.
struct DistributedNode {
  std::string host;
  unsigned slots = 1;  // ranks it may run

  friend bool operator==(const DistributedNode&, const DistributedNode&) = default;
};

enum class ConfigSource { default_value, file, environment, api };

// Where a configuration value came from, for nerve-info and error messages.
struct ConfigOrigin {
  ConfigSource source = ConfigSource::default_value;
  std::string file;      // for ConfigSource::file
  int line = 0;          // for ConfigSource::file, 1-based
  std::string variable;  // for ConfigSource::environment: the variable's name

  // describe() gives "default", "file.yaml:12", "env NERVE_X" or "api".
  NERVE_API std::string describe() const;
};

// Settings are the API-level overrides a program passes when it creates a context.
class NERVE_API Settings {
 public:
  Settings() = default;

  // set() records `key = value` (value in the same text form as YAML/environment values); blanks
  // around the key are ignored. Keys and values are validated when the context is created, not here.
  Settings& set(std::string key, std::string value);

  // config_file() selects the YAML file; it takes precedence over NERVE_CONFIG. `named_by` says
  // where the name came from, for the messages about the file ("--config" for a tool's option).
  Settings& config_file(std::filesystem::path path, std::string named_by = "Settings::config_file");

  // use_environment(false) ignores NERVE_* variables (tests use this to stay hermetic).
  Settings& use_environment(bool enabled);

  const std::vector<std::pair<std::string, std::string>>& values() const { return values_; }
  const std::optional<std::filesystem::path>& file() const { return file_; }
  const std::string& file_named_by() const { return file_named_by_; }
  bool environment_enabled() const { return use_environment_; }

 private:
  std::vector<std::pair<std::string, std::string>> values_;
  std::optional<std::filesystem::path> file_;
  std::string file_named_by_;
  bool use_environment_ = true;
};

// Config is the effective, validated configuration.
struct NERVE_API Config {
  struct Parallel {
    unsigned thread_pool_size = 0;  // 0 = automatic: the process's allowed CPUs and cgroup quota
    ThreadAffinity thread_affinity = ThreadAffinity::compact;
    // parallel.deterministic_mode: parallel_reduce (and parallel_for) with grain 0 split ranges
    // independently of the worker count, so reductions give the same bits on every run and count.
    bool deterministic_mode = false;
  } parallel;

  struct Scheduler {
    SchedulerPolicy policy = SchedulerPolicy::locality_aware_stealing;
    std::chrono::microseconds spin{50};  // scheduler.spin_us: idle spinning before sleeping
    // How long a worker's own queues must stay empty before it starts stealing (0 = at once).
    std::chrono::microseconds work_stealing_threshold{0};
    bool topology_awareness = true;  // victims ordered by topology distance (else random)
    NumaAffinity numa_affinity = NumaAffinity::preferred;
    // scheduler.gpu_stream_priorities: high-priority streams reserved per CUDA device for tasks with
    // TaskOptions::priority > 0. An entry with device -1 applies to every device without its own.
    struct GpuStreamPriority {
      int device = -1;  // the CUDA device ordinal (cudaSetDevice numbering); -1: every device
      unsigned high_priority_streams = 0;
    };
    std::vector<GpuStreamPriority> gpu_stream_priorities;
    // high_priority_streams_for(): the reservation for CUDA device `ordinal` (0 when none).
    unsigned high_priority_streams_for(int ordinal) const noexcept {
      unsigned all = 0;
      for (const GpuStreamPriority& each : gpu_stream_priorities) {
        if (each.device == ordinal) return each.high_priority_streams;
        if (each.device == -1) all = each.high_priority_streams;
      }
      return all;
    }
  } scheduler;

  struct TaskQueue {
    QueueType type = QueueType::lock_free_mpsc;
    std::uint32_t per_device_queue_depth = 1024;  // ready tasks queued per device; full = back-pressure
    std::uint32_t max_in_flight = 1u << 18;       // submitted, unfinished tasks; beyond it submit helps
  } task_queue;

  struct Memory {
    MemoryAllocator allocator = MemoryAllocator::system;
    // Bytes of free chunks each thread may keep per pool (0 = no per-thread cache).
    std::size_t per_thread_pool_size = std::size_t{1} << 20;
    // true: threads share one central free list per size class; false: each thread keeps its own.
    bool global_pool = true;
    NumaPolicy numa_policy;
    // Bytes each host NUMA node's pool may reserve for buffers (0 = no limit); beyond it creating a
    // buffer fails with ErrorCode::out_of_memory.
    std::size_t host_node_limit = 0;
    // Host blocks of two huge pages (4 MiB) and more are advised to use transparent huge pages:
    // fewer TLB misses and page faults for big buffers.
    bool huge_pages = true;
  } memory;

  // Accelerator devices (docs/BACKENDS.md): which are used, and how each is driven.
  struct Gpu {
    // gpu.devices: {"all"}, or device indices ("0") and name fragments / backend names ("pthread",
    // "opencl") selecting among the devices the backends find; empty = none.
    std::vector<std::string> devices{"all"};
    unsigned stream_count = 4;            // queues (streams) per device
    unsigned max_pending_transfers = 32;  // copies in flight per device; more wait their turn
    bool peer_access = true;              // device-to-device copies direct when the driver can
    bool unified_memory = false;          // CUDA buffers in managed memory (cudaMallocManaged)
    bool async_prefetch = true;           // managed buffers prefetched to the device ahead of each task
    bool cache_hints = true;              // managed buffers given cudaMemAdvise hints per access mode
    // Host copies of buffers of 1 MiB and more page-locked (cudaHostRegister) on their first transfer
    // to or from a CUDA device, so copies are DMA'd in place instead of through staging memory.
    bool pin_host_buffers = true;
  } gpu;

  // Performance monitoring (see docs/PERF_STATS.md and docs/TRACING.md).
  struct Perf {
    // perf.trace: write a Chrome trace-event timeline to this path when the context is destroyed
    // ("" = off; NERVE_TRACE=path is an alias). Implies record_tasks.
    std::string trace;
    bool record_tasks = false;  // perf.record_tasks: keep one record per task for dump_perf_stats
    std::uint64_t max_task_records = std::uint64_t{1} << 20;  // records kept at most (then counted only)
    bool enable_counters = false;  // perf.enable_counters: sample perf_event / rusage counters
    std::chrono::milliseconds counter_interval{100};  // perf.counter_interval_ms
    // perf.models: learn run times per (kernel, device, footprint), kept in model_dir between runs.
    bool models = false;
    std::string model_dir;  // perf.model_dir ("" = $XDG_CACHE_HOME or ~/.cache, /nerve/perfmodels)
    // perf.decision_log: JSON lines, one per placement decision of scheduler.policy heft ("" = off).
    std::string decision_log;
    bool records_tasks() const noexcept { return record_tasks || !trace.empty(); }
    bool times_tasks() const noexcept { return records_tasks() || models; }
  } perf;

  struct Distributed {
    CommunicationBackend communication_backend = CommunicationBackend::none;
    std::vector<DistributedNode> nodes;  // empty: mpirun's own default (the local host)
    // The longest an outgoing message waits in a batch (distributed.batch_size) before it is sent.
    std::chrono::microseconds sync_interval{1000};
    std::uint32_t batch_size = 1;  // small messages to one rank sent as one (1 = no batching)
    Compression compression = Compression::none;
    std::size_t compression_threshold = 4096;  // bytes; smaller payloads travel uncompressed
  } distributed;

  struct TopologySource {
    std::string synthetic;  // hwloc synthetic description, e.g. "pack:2 numa:2 core:4 pu:1"
    std::string xml;        // path of an hwloc XML export
  } topology;

  // One entry per known key, in documentation order: the key, its effective value as text and where
  // it came from.
  struct Entry {
    std::string key;
    std::string value;
    ConfigOrigin origin;
  };
  std::vector<Entry> entries;

  // origin() gives where `key`'s value came from; throws ConfigError for an unknown key.
  const ConfigOrigin& origin(std::string_view key) const;

  // load() builds the effective configuration from defaults, the YAML file, the environment and
  // `settings`. `environment` is the process environment by default; tests pass their own.
  static Config load(const Settings& settings);
  static Config load(const Settings& settings, const std::map<std::string, std::string>& environment);
};

// known_config_keys() lists every key this build accepts, in documentation order.
NERVE_API std::vector<std::string> known_config_keys();

}  // namespace nerve
