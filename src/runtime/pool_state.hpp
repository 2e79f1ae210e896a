// pool_state.hpp — a TaskPool: mutually independent tasks launched together.
//
// Members never register with the dependency trackers. At launch a single "gate" record registers
// the union of the members' accesses (per buffer: the covering range, the combined mode); when the
// gate's predecessors are done it releases every member, and it finishes when the last member does
// — failed if any member failed, so tasks that read the pool's output are cancelled.
//
// Thread safety: add() is called by one thread at a time (the pool's filler); launch() by any
// number at once (wait_all() launches); member_finished() by workers.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <vector>

#include "nerve/detail/runtime_api.hpp"

#include "task/task_record.hpp"

namespace nerve::detail {

struct ContextImpl;
struct ThreadState;

struct PoolState {
  explicit PoolState(ContextImpl& owner) : context(owner) {}

  // make_room() readies `members` for one more (may throw bad_alloc); add() then cannot fail, so a
  // task whose accesses are already registered is never lost between the two.
  void make_room();
  void add(TaskRecord* member) noexcept;
  void launch();
  void release_members(ThreadState& thread);
  void member_finished(TaskRecord* member, ThreadState& thread);
  void discard() noexcept;  // destroy members of a pool that was never launched
  void mark_cancelled(TaskRecord* member) noexcept;

  ContextImpl& context;
  std::vector<TaskRecord*> members;
  std::atomic<std::int64_t> remaining{0};
  TaskRecord* gate = nullptr;
  // The members to release, copied at launch (release_members() runs on a worker and must not
  // allocate; the last member may finish the pool while it iterates, so it iterates its own copy).
  std::unique_ptr<TaskRecord*[]> release_list;
  // Set once launch() has registered the gate; launch() runs once even when wait_all() calls it
  // from several threads at once.
  std::atomic<bool> launched{false};
  std::mutex launch_mutex;
  KeptFailure first_error;
};

// free_pool(): releases a pool whose tasks have all ended (a launched one's gate is done), or
// discards the tasks of one never launched; then deletes it and drops its context reference.
void free_pool(PoolState* pool) noexcept;

}  // namespace nerve::detail
