// coherence.hpp — keeping buffer replicas on several memory nodes coherent.
//
// Each buffer remembers, per byte range, on which memory nodes its bytes are valid (a node mask):
// valid on one node after a write (MSI "modified"), on several after reads elsewhere ("shared"),
// invalid everywhere else. Ranges split at access boundaries and merge back when equal, so tasks on
// disjoint slices keep independent state. Storage is per buffer: a replica is the whole buffer, so
// that slices keep their offsets and a later task on another slice finds its place already made.
//
// acquire(task, node), called when a ready task has been placed on a node:
//  - allocates the buffer's replica (the whole buffer) on that node if missing (evicting other
//    replicas on pressure),
//  - for each range the task reads that is not valid there: joins a copy already in flight to that
//    node, or starts one from a valid node (host preferred) — so no byte is ever copied twice to the
//    same node for the same version,
//  - for each range the task writes: waits for any copy still landing there on that node (a
//    HOST_CACHED copy-back nobody else waits for), then makes the node the only valid one (others
//    become invalid; their storage stays until evicted or the buffer dies).
// On the host (node 0) nothing is pinned: the host copy is never evicted. Buffers that never had a
// replica elsewhere cost a host task no lock at all.
// The task is runnable when every copy it waits for has landed: acquire() returns true when that is
// already the case, otherwise DataListener::data_ready(task) is called once, from the copy engine's
// thread. A task therefore never starts before its data is valid where it runs, and never holds a
// worker while it waits.
//
// Replicas in use by a running task or an in-flight copy are pinned. Under memory pressure on a node
// unpinned replicas are evicted least recently used first, STICKY buffers last; ranges whose only
// valid copy is the evicted one are written back to the host first. If nothing more can be evicted
// the allocation fails with OutOfMemory naming the node, the size and what the node holds.
//
// Thread safety: every member may be called from any thread; per-buffer state is guarded by the
// buffer's coherence mutex, per-node eviction lists by their own mutex (never held together with a
// buffer's mutex while another buffer's is taken, so no lock-order cycle exists).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "nerve/detail/runtime_api.hpp"

#include "memory/memory_node.hpp"

namespace nerve::detail {

struct BufferState;
struct TaskRecord;
struct PendingCopy;

using NodeMask = std::uint32_t;
inline constexpr unsigned max_memory_nodes = 32;

// Thrown by acquire() when a node is full of replicas that running or queued tasks still need: the
// task must wait for DataListener::memory_freed(node) and try again.
struct MemoryBusy {};

class DataListener {
 public:
  // data_ready(): every copy `task` waited for has landed (called from a copy engine's thread).
  virtual void data_ready(TaskRecord* task) = 0;
  // memory_freed(): a replica on `node` was unpinned or freed; tasks waiting for memory may retry.
  virtual void memory_freed(unsigned node) noexcept = 0;

 protected:
  ~DataListener() = default;
};

// Told about every copy a task waited for, when it lands (perf recording; any thread).
class TransferObserver {
 public:
  virtual void transfer_finished(unsigned from, unsigned to, std::uint64_t bytes, std::int64_t start_ns) = 0;

 protected:
  ~TransferObserver() = default;
};

struct TransferCounters {
  std::atomic<std::uint64_t> copies{0};
  std::atomic<std::uint64_t> bytes{0};
};

// Per-buffer coherence state (a member of BufferState).
class BufferReplicas {
 public:
  BufferReplicas(std::size_t bytes, std::byte* host);
  std::mutex& mutex() noexcept { return mutex_; }

 private:
  friend class CoherenceEngine;
  // A byte range's state: the nodes holding valid bytes, and the write epoch that made them so (a
  // copy that started before a later write must not mark the range valid when it lands).
  struct Range {
    std::size_t begin;
    std::size_t end;
    NodeMask valid;
    std::uint64_t epoch;
  };
  struct Replica {
    std::byte* data = nullptr;
    std::uint32_t pins = 0;
    std::uint64_t last_use = 0;
  };
  std::size_t split_at(std::size_t position);
  void merge();

  std::mutex mutex_;
  std::size_t bytes_;
  std::vector<Range> ranges_;
  std::vector<Replica> replicas_;     // per memory node, sized on first use; [0] is the host data
  std::vector<PendingCopy*> copies_;  // copies in flight into some node
  std::uint64_t epoch_ = 0;           // incremented by every write claim
  // Whether another node ever held a replica: BufferState::host_only, on the buffer's hot line.
};

class CoherenceEngine {
 public:
  CoherenceEngine(std::vector<MemoryNode*> nodes, DataListener& listener);
  ~CoherenceEngine();

  unsigned node_count() const noexcept { return static_cast<unsigned>(nodes_.size()); }
  MemoryNode& node(unsigned index) const noexcept { return *nodes_[index]; }

  // acquire()/release() bracket a task's use of its accesses on `node` (see the file comment).
  // acquire() throws MemoryBusy when the node is full of replicas other tasks still need (retry
  // after memory_freed), and OutOfMemory when the task's data can never fit there.
  bool acquire(TaskRecord* task, unsigned node);
  // host_holds_all(): no buffer the task touches has ever had a replica off the host.
  static bool host_holds_all(const TaskRecord& task) noexcept;
  // replica_footprint(): the bytes `task` needs on a device node. A replica is the whole buffer,
  // however small the slice the task touches (valid ranges are per byte range, storage is not), and
  // a buffer counts once however many of its accesses name it. A task whose footprint is above a
  // node's limit can never run there: acquire() fails it with OutOfMemory, and placement avoids it.
  static std::size_t replica_footprint(const TaskRecord& task);
  void release(TaskRecord* task, unsigned node) noexcept;
  // replica(): where `buffer`'s bytes are on `node` (valid after acquire; nullptr if none).
  std::byte* replica(BufferState& buffer, unsigned node) noexcept;
  // valid_bytes(): how many of [offset, offset+size) are valid on `node` (placement decisions).
  std::size_t valid_bytes(BufferState& buffer, std::size_t offset, std::size_t size, unsigned node);
  // copy_in_flight(): a copy into or out of `node` over [offset, offset+size) has not landed — what a
  // writer there waits for first (a try_map that writes returns nothing instead).
  bool copy_in_flight(BufferState& buffer, std::size_t offset, std::size_t size, unsigned node);
  // forget(): free a dying buffer's device replicas.
  void forget(BufferState& buffer) noexcept;

  // set_transfer_observer(): before any copy; also makes each task count the bytes copied for it.
  void set_transfer_observer(TransferObserver* observer) noexcept { observer_ = observer; }

  // counters(from, to): copies and bytes moved from node `from` to node `to`.
  const TransferCounters& counters(unsigned from, unsigned to) const noexcept {
    return transfers_[from * max_memory_nodes + to];
  }

 private:
  struct NodeResidents {
    std::mutex mutex;
    std::vector<BufferState*> buffers;  // buffers with a replica on the node
    // Held while a task pins its replicas on the node (phase 1 of acquire): no task sees another's
    // pins half taken, which it would count as memory that frees up when that task ends — while
    // that task, failing to pin the rest, waits too.
    std::mutex pinning;
    std::vector<BufferState*> evicted;  // under `pinning`: released once it is let go (may destroy)
  };
  // What a node holds, as an allocation that found no room sees it: the replicas listed there, their
  // bytes, and whether those of other buffers than the task's are in use by a task or idle.
  struct NodeCensus {
    std::size_t replicas = 0;
    std::size_t bytes = 0;
    bool held_by_others = false;
    bool idle_others = false;
  };
  NodeCensus take_census(unsigned node, const TaskRecord& task);
  void pin_replica(BufferState& buffer, unsigned node, const TaskRecord& task);
  std::byte* allocate_evicting(unsigned node, std::size_t bytes, const BufferState& requester,
                               const TaskRecord& task);
  std::size_t evict(unsigned node, std::size_t wanted, const TaskRecord& task);
  bool evict_replica(BufferState& buffer, unsigned node);
  static bool in_use_on(const BufferReplicas& state, unsigned node) noexcept;
  void write_back_exclusive(BufferState& buffer, unsigned node);
  void fetch_range(BufferState& buffer, unsigned node, std::size_t begin, std::size_t end, TaskRecord* waiter,
                   std::vector<PendingCopy*>& started);
  void wait_for_copies_touching(BufferState& buffer, unsigned node, std::size_t begin, std::size_t end,
                                TaskRecord* writer);
  void claim_for_write(BufferState& buffer, unsigned node, std::size_t begin, std::size_t end);
  // queue_copy(): `copy` joins the buffer's copies in flight, and starts (goes into `started`) unless
  // an earlier copy still lands on bytes it writes: then it starts when the last such one lands.
  static void queue_copy(BufferReplicas& state, PendingCopy* copy, std::vector<PendingCopy*>& started);
  // reserve_queue_copy() makes every allocation queue_copy(copy) would make, so that it then cannot
  // throw; throws std::bad_alloc having changed nothing.
  static void reserve_queue_copy(BufferReplicas& state, const PendingCopy& copy,
                                 std::vector<PendingCopy*>& started);
  void start_copies(std::vector<PendingCopy*>& started);

 public:
  void copy_finished(PendingCopy& copy, bool ok, const std::string& error) noexcept;

 private:
  unsigned choose_source(NodeMask valid, unsigned destination) const noexcept;
  std::uint64_t tick() noexcept { return clock_.fetch_add(1, std::memory_order_relaxed); }

  std::vector<MemoryNode*> nodes_;
  DataListener& listener_;
  std::unique_ptr<NodeResidents[]> residents_;
  std::unique_ptr<TransferCounters[]> transfers_;
  std::atomic<std::uint64_t> clock_{1};
  TransferObserver* observer_ = nullptr;
};

}  // namespace nerve::detail
