#include "memory/pool/numa_binding.hpp"

#include <cerrno>
#include <cstring>
#include <mutex>

#include <fmt/format.h>
#include <hwloc.h>

#include "nerve/error.hpp"

#include "util/log.hpp"

namespace nerve::memory {
namespace {

// real_machine_topology() is this machine's hwloc topology, loaded once per process on first use
// and kept (membind calls need it; the Topology value does not carry hwloc's handle). Null when hwloc
// cannot load it.
hwloc_topology_t real_machine_topology() {
  static hwloc_topology_t topology = [] {
    hwloc_topology_t loaded = nullptr;
    if (hwloc_topology_init(&loaded) != 0) return static_cast<hwloc_topology_t>(nullptr);
    if (hwloc_topology_load(loaded) != 0) {
      hwloc_topology_destroy(loaded);
      return static_cast<hwloc_topology_t>(nullptr);
    }
    return loaded;
  }();
  return topology;
}

}  // namespace

int BlockPlacement::intended_node(const void* address) const noexcept {
  if (policy != NumaPolicy::Kind::interleave || interleave_nodes <= 0) return node;
  const auto page = reinterpret_cast<std::uintptr_t>(address) / page_size();
  return static_cast<int>(page % static_cast<std::uintptr_t>(interleave_nodes));
}

std::string numa_policy_text(const NumaPolicy& policy) {
  switch (policy.kind) {
    case NumaPolicy::Kind::local: return "local";
    case NumaPolicy::Kind::interleave: return "interleave";
    case NumaPolicy::Kind::preferred: return fmt::format("preferred:{}", policy.node);
  }
  return "?";
}

NumaBinder::NumaBinder(const Topology& topology, NumaPolicy policy, int pool_node, bool migrate_placed_pages)
    : policy_(policy),
      pool_node_(pool_node),
      real_machine_(!topology.synthetic()),
      migrate_(migrate_placed_pages) {
  const auto& nodes = topology.numa_nodes();
  const int count = static_cast<int>(nodes.size());
  if (pool_node < 0 || pool_node >= count) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("memory pool: NUMA node {} does not exist on {} (nodes 0..{})", pool_node,
                            topology.description(), count - 1));
  }
  if (policy.kind == NumaPolicy::Kind::preferred && (policy.node < 0 || policy.node >= count)) {
    throw ConfigError(fmt::format("memory.numa_policy: preferred:{} names NUMA node {}, but {} has {} NUMA "
                                  "node{} (0..{})",
                                  policy.node, policy.node, topology.description(), count,
                                  count == 1 ? "" : "s", count - 1),
                      "memory.numa_policy");
  }
  node_count_ = count;
  interleaves_ = policy.kind == NumaPolicy::Kind::interleave && pool_node == interleaved_pool;
  if (interleaves_) {
    for (const NumaNode& node : nodes) target_os_nodes_.push_back(node.os_index);
  } else if (policy.kind != NumaPolicy::Kind::local) {
    // The pool of node k holds what was asked for on node k (BufferOptions::numa_node): its pages go
    // there. The policy's own node is the pool buffers without a node come from (HostMemoryNode).
    target_os_nodes_.push_back(nodes[static_cast<std::size_t>(pool_node)].os_index);
  }
}

std::string NumaBinder::describe() const { return numa_policy_text(policy_); }

BlockPlacement NumaBinder::apply(void* block, std::size_t bytes) noexcept {
  BlockPlacement placement;
  placement.policy = policy_.kind;
  placement.node = pool_node_;
  if (policy_.kind == NumaPolicy::Kind::local) return placement;
  if (interleaves_) {
    placement.node = -1;
    placement.interleave_nodes = node_count_;  // no allocation: apply() is noexcept
  } else {
    placement.policy = NumaPolicy::Kind::preferred;  // bound to its node, as preferred:<node> binds
  }
  if (!real_machine_) return placement;  // never bind on a machine we are only simulating

  hwloc_topology_t topology = real_machine_topology();
  int result = -1;
  int error = ENOSYS;
  if (topology != nullptr) {
    hwloc_bitmap_t nodeset = hwloc_bitmap_alloc();
    if (nodeset != nullptr) {
      for (int os_index : target_os_nodes_) hwloc_bitmap_set(nodeset, static_cast<unsigned>(os_index));
      const hwloc_membind_policy_t how = interleaves_ ? HWLOC_MEMBIND_INTERLEAVE : HWLOC_MEMBIND_BIND;
      const int flags = HWLOC_MEMBIND_BYNODESET | (migrate_ ? HWLOC_MEMBIND_MIGRATE : 0);
      errno = 0;
      result = hwloc_set_area_membind(topology, block, bytes, nodeset, how, flags);
      error = errno;
      hwloc_bitmap_free(nodeset);
    }
  }
  if (result == 0) {
    placement.bound = true;
    return placement;
  }
  failures_.fetch_add(1, std::memory_order_relaxed);
  if (!warned_.test_and_set(std::memory_order_relaxed)) {
    log::warn(
        "memory.numa_policy {}: the operating system refused to bind pool memory ({}); it stays where "
        "first touch puts it",
        describe(), std::strerror(error));
  }
  return placement;
}

}  // namespace nerve::memory
