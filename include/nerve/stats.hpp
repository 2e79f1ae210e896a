// stats.hpp — what the runtime measured: per worker and per context.
//
// A snapshot: counters are read without stopping the workers, so values taken while tasks run are
// consistent per counter, not across counters.
#pragma once

#include <cstdint>
#include <vector>

#include "nerve/memory.hpp"

namespace nerve {

struct WorkerStats {
  unsigned index = 0;
  int core = 0;  // logical core of the topology the worker is placed on
  int numa_node = 0;
  bool bound = false;               // its thread is pinned to the core's hardware threads
  bool application_thread = false;  // slot 0: run by the application thread while it waits
  std::uint64_t tasks_run = 0;
  std::uint64_t steals = 0;  // tasks taken from another worker's queues
  std::uint64_t sleeps = 0;  // times it parked after spinning scheduler.spin_us in vain
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

struct ContextStats {
  std::vector<WorkerStats> workers;
  std::uint64_t tasks_submitted = 0;
  std::uint64_t tasks_completed = 0;
  std::vector<TransferStats> transfers;  // node pairs with at least one copy
  std::uint64_t bytes_transferred = 0;   // sum over `transfers`
  std::uint64_t copies = 0;
  MemoryStats memory;
};

}  // namespace nerve
