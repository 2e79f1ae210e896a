// task_graph.hpp — edges between task records and the release of successors.
//
// add_edge(predecessor, successor, consumes) makes `successor` wait for `predecessor`; it is safe
// against the predecessor finishing concurrently: if the predecessor's successor stack is already
// closed, no edge is added (and a failed predecessor cancels a consuming successor right away).
// Edges are added under the successor's submission guard, which close_submission_guard() lifts.
// A failure propagates only along consuming edges (the successor reads the failed task's output,
// or it was declared with `after`).
// close_and_release() is called once by the thread finishing a task; it closes the successor stack
// and calls `ready(successor)`, in submission order, for each successor whose last predecessor this was.
// Memory ordering: everything a task did before close_and_release() happens-before its successors run.
#pragma once

#include <cstdint>
#include <exception>
#include <vector>

#include "task/task_record.hpp"

namespace nerve::detail {

// retain/release on a record (the exported detail::retain/release forward here).
inline void retain_record(TaskRecord* record) noexcept {
  record->refs.fetch_add(1, std::memory_order_relaxed);
}
// Returns true if this was the last reference (the caller recycles the record).
inline bool release_record(TaskRecord* record) noexcept {
  return record->refs.fetch_sub(1, std::memory_order_acq_rel) == 1;
}

// mark_cancelled_by() records that `successor` must be cancelled because of `cause`.
inline void mark_cancelled_by(TaskRecord* successor, const std::exception_ptr& cause) noexcept {
  if (!successor->cancel_pending.exchange(true, std::memory_order_acq_rel)) {
    successor->error = cause;
    successor->cancel_cause = TaskRecord::CancelCause::dependency;
  }
}

// The exception a dependent of `failed` is cancelled with: the failed task's own exception, or the
// cause it was itself cancelled with.
inline std::exception_ptr failure_cause(const TaskRecord* failed) noexcept { return failed->error; }

// cancel_pool_consumer(): cancel_consumer() for a pool's gate (runtime/pool_state.cpp). A gate that
// failed (a member failed) cancels every consumer; one whose members were only cancelled cancels
// those that read what a cancelled member was to write, each with that member's cause — by the
// ranges the gate noted they read of its data as they registered (note_gate_reads), so not for a
// part another task wrote over in between.
void cancel_pool_consumer(const TaskRecord* gate, TaskRecord* successor) noexcept;

// cancel_consumer(): `successor` reads what `failed` (failed or cancelled) wrote; it is cancelled
// with the original cause. Only failures come here: the branch costs a successful task nothing.
inline void cancel_consumer(const TaskRecord* failed, TaskRecord* successor) noexcept {
  if (failed->kind == TaskKind::pool_gate) [[unlikely]] {
    cancel_pool_consumer(failed, successor);
    return;
  }
  mark_cancelled_by(successor, failure_cause(failed));
}

DepNode* allocate_dep_node(TaskRecord* successor);
// reserve_dep_nodes() makes room for `edges` more edges into `successor`: afterwards that many
// add_edge() calls allocate nothing. Throws std::bad_alloc, leaving the task unchanged.
void reserve_dep_nodes(TaskRecord* successor, std::size_t edges);
// free_dep_nodes(): how many more edges into `successor` need no allocation.
inline std::size_t free_dep_nodes(const TaskRecord* successor) noexcept {
  std::size_t free = inline_dep_count - successor->dep_used;
  if (const DepOverflow* chunk = successor->dep_overflow) free += chunk->capacity - chunk->used;
  return free;
}

// The submission guard. While edges into a task are being added, its count holds a bias that no
// predecessor's decrement can bring to zero; add_edge() does not touch the count (it says whether it
// added an edge), and close_submission_guard() settles the bias and the edges added with one atomic
// subtraction: one locked instruction per task instead of one per edge plus the guard's own.
inline constexpr std::int32_t submission_guard = std::int32_t{1} << 30;
inline void open_submission_guard(TaskRecord* task) noexcept {
  task->pending.store(submission_guard, std::memory_order_relaxed);
}
// close_submission_guard(): true when every predecessor the `edges` edges wait for has already
// finished (the caller makes the task ready).
inline bool close_submission_guard(TaskRecord* task, std::size_t edges) noexcept {
  const std::int32_t settle = submission_guard - static_cast<std::int32_t>(edges);
  return task->pending.fetch_sub(settle, std::memory_order_acq_rel) == settle;
}

// add_edge() returns false when the predecessor had already finished (no edge: nothing to wait for).
// The successor must hold its submission guard.
inline bool add_edge(TaskRecord* predecessor, TaskRecord* successor, bool consumes) {
  DepNode* node = allocate_dep_node(successor);
  node->successor = successor;
  node->consumes = consumes;
  std::uintptr_t head = predecessor->successors.load(std::memory_order_acquire);
  while (true) {
    if (head == closed_successors) {
      const std::uint32_t status = predecessor->load_status();
      if (consumes && (status == status_failed || status == status_cancelled))
        cancel_consumer(predecessor, successor);
      return false;
    }
    node->next = reinterpret_cast<DepNode*>(head);
    if (predecessor->successors.compare_exchange_weak(head, reinterpret_cast<std::uintptr_t>(node),
                                                      std::memory_order_release, std::memory_order_acquire)) {
      return true;
    }
  }
}

template <class Ready>
void close_and_release(TaskRecord* task, bool failed, Ready&& ready) {
  const std::uintptr_t head = task->successors.exchange(closed_successors, std::memory_order_acq_rel);
  const DepNode* node = reinterpret_cast<const DepNode*>(head);
  if (node == nullptr) return;
  const auto release = [&](TaskRecord* successor, bool consumes) {
    if (failed && consumes) cancel_consumer(task, successor);
    if (successor->pending.fetch_sub(1, std::memory_order_acq_rel) == 1) ready(successor);
  };
  // The stack holds the newest edge first. Every edge is read before any successor is released —
  // until this thread's decrement a successor cannot run, so its node stays valid — and they are
  // released oldest first: in submission order, which eager's shared queue then serves first come,
  // first served. Each successor's record is asked for as its edge is found, so the misses overlap.
  // The nodes are only read, never relinked.
  struct Edge {
    TaskRecord* successor;
    bool consumes;
  };
  constexpr std::size_t inline_edges = 32;
  Edge edges[inline_edges];
  std::size_t count = 0;
  for (; node != nullptr && count < inline_edges; node = node->next) {
    prefetch_record(node->successor);
    edges[count++] = Edge{node->successor, node->consumes};
  }
  if (node != nullptr) {  // a wide fan-out: the older edges go to the heap
    std::vector<Edge> older;
    try {
      older.reserve(inline_edges * 4);
      for (const DepNode* rest = node; rest != nullptr; rest = rest->next) {
        prefetch_record(rest->successor);
        older.push_back(Edge{rest->successor, rest->consumes});
      }
    } catch (...) {  // out of memory: the older ones in the stack's order, before the newer ones
      older.clear();
      for (; node != nullptr;) {
        const Edge edge{node->successor, node->consumes};
        node = node->next;  // read before its successor may run and recycle the node
        release(edge.successor, edge.consumes);
      }
    }
    for (auto it = older.rbegin(); it != older.rend(); ++it) release(it->successor, it->consumes);
  }
  while (count > 0) {
    --count;
    release(edges[count].successor, edges[count].consumes);
  }
}

}  // namespace nerve::detail
