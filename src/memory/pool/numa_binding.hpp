// numa_binding.hpp — memory.numa_policy applied to host blocks.
//
//   local       nothing is bound: a page lands on the NUMA node of the thread that first writes it
//               (Linux's default first-touch policy). The block is attributed to the pool's node.
//   interleave  node 0's pool (interleaved_pool, where buffers without a node of their own come
//               from): hwloc_set_area_membind(HWLOC_MEMBIND_INTERLEAVE) over every node, pages go
//               round-robin. The pool of node k > 0 binds as preferred:k does.
//   preferred:n hwloc_set_area_membind(HWLOC_MEMBIND_BIND) to the pool's node without
//               HWLOC_MEMBIND_STRICT, which Linux implements as MPOL_PREFERRED: that node while it has
//               free memory, then others. Buffers without a node of their own come from node n's pool;
//               the pool of another node k holds buffers asked for on k (BufferOptions::numa_node),
//               so its pages go to k: the policy never overrides a buffer's own node.
//
// Binding happens when a block is obtained, before the pool writes it (a slab's header is its first
// write), so no page has been placed yet. Blocks from jemalloc/tcmalloc may be recycled memory that
// is already placed, so for them the binding also asks to migrate (HWLOC_MEMBIND_MIGRATE).
//
// On synthetic and XML topologies the nodes are not this machine's: nothing is bound (hwloc is never
// asked), but every block still records its intended placement (BlockPlacement). When the operating
// system refuses a binding (no NUMA support, a container's seccomp filter), the block stays where first
// touch puts it, a warning is logged once per binder and the failure is counted in the statistics.
//
// Thread safety: apply() may be called from any thread concurrently.
// Errors: the constructor throws ConfigError (key memory.numa_policy) when preferred:<n> names a node
// the topology lacks, and Error(invalid_argument) when the pool's own node does not exist.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "nerve/config.hpp"
#include "nerve/topology.hpp"

#include "memory/pool/node_allocator.hpp"

namespace nerve::memory {

class NumaBinder {
 public:
  // Under interleave, the pool whose blocks are interleaved (the others bind to their node).
  static constexpr int interleaved_pool = 0;

  NumaBinder(const Topology& topology, NumaPolicy policy, int pool_node, bool migrate_placed_pages);

  // apply() binds [block, block + bytes) per the policy (real machine only) and says what it meant
  // and did. `block` and `bytes` must be page aligned.
  BlockPlacement apply(void* block, std::size_t bytes) noexcept;

  // describe() gives the policy as configured: "local", "interleave", "preferred:1".
  std::string describe() const;
  const NumaPolicy& policy() const noexcept { return policy_; }
  std::uint64_t failures() const noexcept { return failures_.load(std::memory_order_relaxed); }

 private:
  NumaPolicy policy_;
  int pool_node_;
  bool real_machine_;
  bool migrate_;
  bool interleaves_ = false;          // interleave, and this is the interleaved pool
  int node_count_ = 0;                // the topology's NUMA nodes, 0..n-1
  std::vector<int> target_os_nodes_;  // the OS indices to bind to
  std::atomic<std::uint64_t> failures_{0};
  std::atomic_flag warned_ = ATOMIC_FLAG_INIT;
};

// numa_policy_text() gives the memory.numa_policy word for `policy`.
std::string numa_policy_text(const NumaPolicy& policy);

}  // namespace nerve::memory
