// host_memory_node.hpp — memory node 0: host RAM, served by one pool per NUMA node.
//
// Buffer data (every buffer's host copy) comes from the pool of a NUMA node: the buffer's
// BufferOptions::numa_node when given, the node memory.numa_policy prefers, else the NUMA node of the
// worker that creates it (node 0 from application threads). The pools (memory/pool/) serve small
// buffers from size classes through per-thread caches and large ones from cached blocks, so creating
// and dropping buffers in a loop makes no system call once warm; memory.allocator decides where their
// blocks come from and memory.numa_policy where they are bound. memory.host_limit caps the bytes all
// pools together reserve: beyond it, creating a buffer fails with Error(out_of_memory) naming the
// node, the size, the limit and what is held. Pinned staging memory for device transfers is one more
// pool, made on first use; large buffers are page-locked in place instead (host_pinning.hpp).
//
// Thread safety: every member may be called from any thread.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "nerve/config.hpp"
#include "nerve/memory.hpp"
#include "nerve/topology.hpp"

#include "memory/host_pinning.hpp"
#include "memory/memory_node.hpp"
#include "memory/pool/pool.hpp"
#include "memory/pool/staging_pool.hpp"

namespace nerve::detail {

// Where a buffer's host bytes came from, to give them back.
struct HostBlock {
  std::byte* data = nullptr;
  int pool = 0;  // the NUMA node whose pool holds them
};

struct HostMemoryStats {
  std::vector<MemoryPoolStats> pools;  // one per NUMA node
  memory::StagingPoolStats staging;    // all zero until a transfer has used staging memory
  std::size_t bytes_reserved = 0;      // sum over the pools (staging excluded)
  std::size_t bytes_in_use = 0;
};

class HostMemoryNode final : public MemoryNode {
 public:
  // Throws ConfigError for an allocator library that cannot be loaded (memory.allocator) or a
  // preferred NUMA node the topology lacks (memory.numa_policy).
  HostMemoryNode(const Config& config, const Topology& topology);
  ~HostMemoryNode() override;

  // allocate_buffer() returns `bytes` (> 0) for a buffer's host copy, 64-byte aligned (page aligned
  // from 64 KiB on), from the pool of `numa_node` (-1: the policy's or the calling worker's node,
  // `worker_numa`). Throws Error(out_of_memory) when the pools cannot provide it.
  HostBlock allocate_buffer(std::size_t bytes, int numa_node, int worker_numa);
  void free_buffer(const HostBlock& block, std::size_t bytes) noexcept;

  // staging() is the pool of page-locked buffers for device transfers.
  memory::StagingPool& staging();
  // pinning(): large buffers' host copies, page-locked for DMA on their first device transfer.
  HostPinning& pinning() noexcept { return pinning_; }

  // compact() returns free pool memory to the system (and the calling thread's cached chunks);
  // gives the bytes returned.
  std::size_t compact() override;
  HostMemoryStats memory_stats() const;

 protected:
  std::byte* allocate_storage(std::size_t bytes) override;
  void free_storage(std::byte* data, std::size_t bytes) noexcept override;
  void start_copy(MemoryNode& from, const std::byte* source, MemoryNode& to, std::byte* destination,
                  std::size_t bytes, CopyCompletion& completion) override;

 private:
  int pool_for(int numa_node, int worker_numa) const noexcept;

  NumaPolicy policy_;
  HostPinning pinning_;
  std::vector<std::unique_ptr<memory::NodePool>> pools_;  // by NUMA node
  mutable std::mutex staging_mutex_;
  std::unique_ptr<memory::StagingPool> staging_;  // made on first use
};

}  // namespace nerve::detail
