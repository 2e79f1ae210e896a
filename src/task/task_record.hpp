// task_record.hpp — the runtime's representation of one task.
//
// Records come from a RecordAllocator (per-thread caches over slabs): creating a task allocates no
// heap memory unless its closure, accesses or predecessor count exceed the inline space.
//
// Lifetime: `refs` counts owners — the runtime until the task has finished and released its
// successors, each Task handle, and each dependency-tracker entry naming the task. The record is
// recycled when refs reaches zero.
//
// Graph: `successors` is a lock-free stack of DepNodes (each node lives in the *successor's* record)
// closed by exchanging in `closed_successors` when the task finishes; `pending` counts unfinished
// predecessors, plus the submission guard's bias while edges are still being added (task_graph.hpp).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <new>

#include "nerve/detail/runtime_api.hpp"

#include "sched/ready_queue.hpp"
#include "util/cpu.hpp"

namespace nerve::detail {

struct PoolState;
struct KernelState;

enum class TaskKind : std::uint8_t {
  function,     // runs a closure on a worker
  host_access,  // a Buffer mapping: "runs" on the mapping thread from map() to unmap()
  pool_gate,    // a TaskPool: releases the pool's tasks when ready, finishes when they all have
};

// status word: low byte = TaskStatus value, plus flag bits.
inline constexpr std::uint32_t status_mask = 0xff;
inline constexpr std::uint32_t status_waiters_bit = 0x100;  // a thread is blocked waiting for this task
inline constexpr std::uint32_t status_pending = 0;
inline constexpr std::uint32_t status_ready = 1;
inline constexpr std::uint32_t status_running = 2;
inline constexpr std::uint32_t status_succeeded = 3;
inline constexpr std::uint32_t status_failed = 4;
inline constexpr std::uint32_t status_cancelled = 5;
// A blocking map's pending mapping whose map gave up (ContextImpl::abandon_mapping): its phase, so
// that its grant, which would set status_running, ends it instead.
inline constexpr std::uint8_t mapping_abandoned = 6;

struct DepNode {
  TaskRecord* successor;
  DepNode* next;
  bool consumes;  // the successor reads the predecessor's result: a failure cancels it
};

inline constexpr std::uintptr_t closed_successors = 1;  // the successor stack of a finished task

struct AccessRecord {
  BufferState* buffer;
  std::size_t offset;
  std::size_t size;
  Access mode;
};

inline constexpr std::size_t inline_closure_bytes = 64;
inline constexpr std::size_t inline_access_count = 3;
inline constexpr std::size_t inline_dep_count = 4;

// Extra DepNodes for tasks with many predecessors (heap, rare): a header followed by `capacity` nodes.
// Submission reserves one chunk large enough for every edge the task can get before it registers
// them (reserve_dep_nodes()), so a bad_alloc comes before the task is in the graph, never halfway.
struct DepOverflow {
  DepOverflow* next;
  std::uint32_t used;
  std::uint32_t capacity;

  static constexpr std::size_t default_capacity = 16;
  DepNode* nodes() noexcept { return reinterpret_cast<DepNode*>(this + 1); }
  static DepOverflow* make(DepOverflow* next, std::size_t capacity);  // throws std::bad_alloc
  static void destroy_chain(DepOverflow* chunk) noexcept;
};
static_assert(sizeof(DepOverflow) % alignof(DepNode) == 0);

struct alignas(64) TaskRecord : QueueLink {
  // --- line 0: everything scheduling and execution touch
  std::atomic<std::int32_t> pending{0};
  std::atomic<std::int32_t> refs{0};
  std::atomic<std::uintptr_t> successors{0};
  std::atomic<std::uint32_t> status{status_pending};  // terminal status (or pending) + waiters bit
  std::atomic<std::uint8_t> phase{status_pending};    // pending/ready/running, for reporting only
  TaskKind kind = TaskKind::function;
  bool closure_on_heap = false;
  bool compute_intensive = false;           // place round-robin rather than on the submitter's deque
  std::atomic<bool> cancel_pending{false};  // a predecessor failed: do not run, cancel
  // Nothing can observe it: no accesses, no `after`, no handle, not in a pool. It then needs no
  // submission guard, no status exchange, no successor list and no atomic reference count.
  // lean_pristine: made by the fork-join fast path, which writes no cold field but `name`.
  std::uint8_t lean = 0;
  std::uint16_t access_count = 0;
  std::int32_t priority = 0;  // TaskOptions::priority (0: the deques; else the priority queue)
  const ClosureOps* ops = nullptr;
  GroupState* group = nullptr;
  PoolState* pool = nullptr;  // the pool a pool_gate (or a pool member) belongs to
  // --- line 1: the closure, constructed by the submitter and called by the worker
  alignas(64) std::byte closure[inline_closure_bytes];
  // --- cold: line 2 is read where the task runs and rarely written
  ContextImpl* context = nullptr;
  AccessRecord* accesses = inline_accesses;
  DepOverflow* dep_overflow = nullptr;
  const char* name = nullptr;
  const KernelState* kernel = nullptr;                  // a Kernel call (nullptr: a plain closure)
  std::shared_ptr<const KernelState> kernel_keepalive;  // its name outlives the closure (messages)
  std::atomic<std::int32_t> fetches{0};                 // copies its data still waits for (coherence)
  // Its failure in wait_all()'s report (ContextImpl::record_root_error): kept, its entry's ticket
  // with ContextImpl::kept_root_error set; only counted, that report's generation; 0: none. Guarded by
  // the context's root_error_lock.
  std::uint32_t root_error_note = 0;
  // --- line 3: the task's failure, and the times recording stamps
  std::exception_ptr error;  // the task's own failure, or the cause of its cancellation
  // Recording (perf.record_tasks / perf.trace) only; stale otherwise.
  std::uint64_t trace_id = 0;                 // numbered at submission
  std::int64_t submitted_ns = 0;              // monotonic_ns()
  std::int64_t ready_ns = 0;                  // last predecessor finished
  std::int64_t data_valid_ns = 0;             // copies done (= ready_ns without devices)
  std::int64_t start_ns = 0;                  // a device began it (asynchronous backends)
  std::atomic<std::uint64_t> bytes_moved{0};  // copied for it (with a TransferObserver)
  // --- lines 4-6: the graph and the data. Nodes are taken from the last (allocate_dep_node()), so
  // a task with one predecessor and one access writes line 5 alone past line 0: deps[last], the
  // count and the first access share it.
  DepNode deps[inline_dep_count];
  std::uint8_t dep_used = 0;
  // Why cancel_pending was set, when not on request: `dependency` — through a consuming edge
  // (mark_cancelled_by; with `error` null the predecessor had itself been cancelled on request, so
  // the message must not say this task was); `data` — a copy of its input failed
  // (CoherenceEngine::copy_finished): it then fails with that error, as no predecessor's doing.
  enum class CancelCause : std::uint8_t { requested, dependency, data };
  CancelCause cancel_cause = CancelCause::requested;
  // Written while the task is submitted, by its submitter, and read once it is published; one byte
  // (the record has none to spare). stream_launcher: a C kernel in the launcher form
  // (SubmitInfo::stream_launcher), which CUDA devices may run, and with stream_only the CPU workers may
  // not. ordered_from_outside: a group member with a predecessor outside its group, or one that is so
  // itself: a walk from a task outside the group may reach it (may_be_ordered()).
  static constexpr std::uint8_t stream_launcher_flag = 1;
  static constexpr std::uint8_t stream_only_flag = 2;
  static constexpr std::uint8_t ordered_from_outside_flag = 4;
  std::uint8_t submission_flags = 0;
  std::int16_t device = -1;       // where it runs: -1 or 0 = CPU workers, 1.. = a device (set at placement)
  std::int16_t device_hint = -1;  // TaskOptions::device
  AccessRecord inline_accesses[inline_access_count];

  // Records are constructed once, in their slab, and recycled. release_resources() (when the
  // record is freed) drops what the task held and puts every field past line 0 back to its initial
  // value, writing only those that differ; reuse() (when it is allocated again) resets line 0. A
  // task that leaves those lines as they were (a plain closure) then only reads them, so they stay
  // cached by the submitting and the running core alike instead of moving between them every task.
  void reuse() noexcept;
  void release_resources() noexcept;

  // A closure too large or too aligned for line 1 lives on the heap; line 1 then holds its address and
  // the alignment it was allocated with, which the matching operator delete must be given.
  struct HeapClosure {
    void* address;
    std::align_val_t alignment;
  };
  // allocate_heap_closure() throws std::bad_alloc, leaving the record as it was.
  void* allocate_heap_closure(std::size_t size, std::size_t align) {
    const std::align_val_t alignment{std::max(align, alignof(std::max_align_t))};
    void* address = ::operator new(size, alignment);
    ::new (static_cast<void*>(closure)) HeapClosure{address, alignment};
    closure_on_heap = true;
    return address;
  }
  // free_heap_closure() gives a heap closure's storage back (nothing for an inline closure); the
  // closure itself must have been destroyed.
  void free_heap_closure() noexcept {
    if (!closure_on_heap) return;
    const HeapClosure heap = *std::launder(reinterpret_cast<HeapClosure*>(closure));
    ::operator delete(heap.address, heap.alignment);
    closure_on_heap = false;
  }
  void* closure_storage() noexcept {
    return closure_on_heap ? std::launder(reinterpret_cast<HeapClosure*>(closure))->address
                           : static_cast<void*>(closure);
  }
  bool stream_launcher() const noexcept { return (submission_flags & stream_launcher_flag) != 0; }
  bool stream_only() const noexcept { return (submission_flags & stream_only_flag) != 0; }
  bool ordered_from_outside() const noexcept { return (submission_flags & ordered_from_outside_flag) != 0; }
  std::uint32_t load_status() const noexcept { return status.load(std::memory_order_acquire) & status_mask; }
  bool finished() const noexcept { return load_status() >= status_succeeded; }
};

// release_gate_outcome() frees what a pool's gate keeps in its (otherwise unused) closure bytes for
// the pool's dependents (runtime/pool_state.cpp): they may consult it as long as the record lives.
void release_gate_outcome(TaskRecord* gate) noexcept;

static_assert(sizeof(QueueLink) == 8);
// A new field must be restored by release_resources() (or reset by reuse()): records are recycled,
// never constructed again. Update this size with it.
static_assert(sizeof(TaskRecord) == 448, "a TaskRecord field was added: restore it in release_resources()");

// prefetch_record() asks for the lines of a record that submitting, releasing and running it touch:
// line 0, the closure, the cold line (kernel, accesses), the dependency nodes and the accesses (not line 3,
// which only failures and recording use). A successor was submitted long before its last
// predecessor finishes, so in a large graph its record is out of cache; fetched one line at a time
// as each field is first read, releasing a successor was a chain of misses (W4: 40 % of the time
// on one thread).
inline void prefetch_record(const TaskRecord* record) noexcept {
  const auto* bytes = reinterpret_cast<const char*>(record);
  static_assert(sizeof(TaskRecord) == 7 * cache_line_size);
  for (const std::size_t line : {0, 1, 2, 4, 5, 6}) prefetch_for_write(bytes + line * cache_line_size);
}

// prefetch_task_header() asks, for writing, for the lines that running a task of the fork-join
// fast path touches: the header and the inline closure.
inline void prefetch_task_header(const TaskRecord* record) noexcept {
  const auto* bytes = reinterpret_cast<const char*>(record);
  prefetch_for_write(bytes);
  prefetch_for_write(bytes + cache_line_size);
}

namespace record_fields {
template <class T, class U>
void restore(T& field, U initial) noexcept {
  if (field != initial) field = initial;
}
template <class T, class U>
void restore(std::atomic<T>& field, U initial) noexcept {
  if (field.load(std::memory_order_relaxed) != initial) field.store(initial, std::memory_order_relaxed);
}
}  // namespace record_fields

inline constexpr std::uint8_t lean_plain = 1;
inline constexpr std::uint8_t lean_pristine = 2;

inline void TaskRecord::reuse() noexcept {
  pending.store(0, std::memory_order_relaxed);
  refs.store(0, std::memory_order_relaxed);
  successors.store(0, std::memory_order_relaxed);
  status.store(status_pending, std::memory_order_relaxed);
  phase.store(status_pending, std::memory_order_relaxed);
  kind = TaskKind::function;
  closure_on_heap = false;
  compute_intensive = false;
  cancel_pending.store(false, std::memory_order_relaxed);
  lean = 0;
  access_count = 0;
  priority = 0;
  ops = nullptr;
  group = nullptr;
  pool = nullptr;
}

// Keep in step with the fields' initializers above (`context` is set by every allocation).
inline void TaskRecord::release_resources() noexcept {
  using record_fields::restore;
  // The heap parts are freed here, whichever path gives the record back (finished, discarded).
  if (kind == TaskKind::pool_gate) [[unlikely]]
    release_gate_outcome(this);
  if (accesses != inline_accesses) {
    delete[] accesses;
    accesses = inline_accesses;
  }
  if (dep_overflow != nullptr) {
    DepOverflow::destroy_chain(dep_overflow);
    dep_overflow = nullptr;
  }
  restore(name, nullptr);
  restore(kernel, nullptr);
  if (kernel_keepalive) kernel_keepalive.reset();
  restore(cancel_cause, CancelCause::requested);
  restore(submission_flags, 0);
  restore(dep_used, 0);
  restore(device, -1);
  restore(device_hint, -1);
  restore(fetches, 0);
  if (error) error = nullptr;
  restore(trace_id, 0u);
  restore(submitted_ns, 0);
  restore(ready_ns, 0);
  restore(data_valid_ns, 0);
  restore(start_ns, 0);
  restore(bytes_moved, 0u);
  restore(root_error_note, 0u);
}

}  // namespace nerve::detail
