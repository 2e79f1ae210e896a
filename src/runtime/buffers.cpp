// buffers.cpp — buffer creation, reference counting, mapping and explicit free.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <string_view>
#include <thread>
#include <type_traits>
#include <unordered_set>
#include <vector>

#include <fmt/format.h>

#include "nerve/error.hpp"

#include "memory/buffer_state.hpp"
#include "runtime/context_impl.hpp"
#include "runtime/pool_state.hpp"
#include "runtime/waitables.hpp"
#include "task/task_graph.hpp"
#include "util/byte_range.hpp"

namespace nerve::detail {

void ContextImpl::register_buffer(BufferState* buffer) {
  std::lock_guard lock(buffers_mutex);
  buffers.insert(buffer);
  // Under the mutex, so the buffer written into is still registered, i.e. alive.
  if (last_created != nullptr) last_created->created_next.store(buffer, std::memory_order_relaxed);
  last_created = buffer;
}

void ContextImpl::unregister_buffer(BufferState* buffer) noexcept {
  std::lock_guard lock(buffers_mutex);
  buffers.erase(buffer);
  if (last_created == buffer) last_created = nullptr;
}

namespace {

// delete_buffer() ends a BufferState made in its context's buffer_slots (buffer_create()).
void delete_buffer(BufferState* buffer) noexcept {
  ContextImpl* context = buffer->context;
  buffer->~BufferState();
  context->buffer_slots.deallocate(buffer);
}

}  // namespace

BufferState* buffer_create(ContextImpl* context, std::size_t bytes, std::size_t element_size,
                           const BufferOptions& options) {
  if (live(context).shut_down)
    throw Error(ErrorCode::invalid_argument, "buffer created in a context that has been destroyed");
  const auto nodes = static_cast<int>(context->topology.numa_nodes().size());
  if (options.numa_node < -1 || options.numa_node >= nodes) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("BufferOptions::numa_node {} is not a NUMA node of this machine (0..{})",
                            options.numa_node, nodes - 1));
  }
  const std::uint64_t id = context->next_buffer_id();
  BufferState* buffer = nullptr;
  void* slot = context->buffer_slots.allocate();
  try {
    buffer = new (slot) BufferState(context, context->host_memory, context->calling_worker_numa(), bytes,
                                    element_size, options, id);
  } catch (const Error& error) {
    context->buffer_slots.deallocate(slot);
    // The host pool's refusal names the node, the size and the limit; which buffer asked is ours to say.
    if (error.code() != ErrorCode::out_of_memory) throw;
    throw Error(ErrorCode::out_of_memory,
                fmt::format("creating {}: {}", describe_buffer(id, options.name, bytes), error.what()));
  } catch (...) {
    context->buffer_slots.deallocate(slot);
    throw;
  }
  context->add_external_reference();
  try {
    context->register_buffer(buffer);
  } catch (...) {
    delete_buffer(buffer);
    context->drop_external_reference();
    throw;
  }
  return buffer;
}

void retain(BufferState* buffer) noexcept { buffer->refs.fetch_add(1, std::memory_order_relaxed); }

namespace {

void destroy(BufferState* buffer) noexcept {
  ContextImpl* context = buffer->context;
  if (context->forked_child()) return;  // its memory (host pool, device) is the parent's to free
  // Unregistered first: a context being destroyed on another thread sweeps the buffers still
  // registered (ContextImpl::shutdown()), all under buffers_mutex.
  context->unregister_buffer(buffer);
  {
    std::lock_guard lock(buffer->tracker.lock());
    buffer->tracker.clear();
  }
  if (context->coherence != nullptr) context->coherence->forget(*buffer);
  delete_buffer(buffer);
  context->drop_external_reference();
}

}  // namespace

void release(BufferState* buffer) noexcept {
  if (buffer->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  // Every submission happened before the release of the handle it used, which this acquired.
  const auto begun = static_cast<std::int64_t>(buffer->accesses_begun.load(std::memory_order_relaxed));
  const std::int64_t close = BufferState::open_bias + begun;
  if (buffer->accesses_ended.fetch_sub(close, std::memory_order_acq_rel) == close) destroy(buffer);
}

void retire_task_access(BufferState* buffer) noexcept {
  if (buffer->accesses_ended.fetch_add(1, std::memory_order_acq_rel) == -1) destroy(buffer);
}

std::size_t buffer_bytes(const BufferState* buffer) noexcept { return buffer->bytes; }
std::uint64_t buffer_id(const BufferState* buffer) noexcept { return buffer->id; }

void throw_slice_outside(const BufferState* buffer, std::size_t offset, std::size_t count,
                         std::size_t view_offset, std::size_t view_count) {
  // The offset counts from the view's start, which the message says, with where the view lies in the
  // buffer: "[2, 8)" alone read as if offset 3 were outside elements 2 to 8.
  const std::string view = buffer == nullptr
                               ? std::string("an empty buffer handle")
                               : fmt::format("a view of {} elements (elements [{}, {}) of {})", view_count,
                                             view_offset, view_offset + view_count, buffer->describe());
  throw Error(ErrorCode::buffer_misuse,
              fmt::format("slice of {} elements at offset {} (from the view's start) is outside {}", count,
                          offset, view));
}

void buffer_check_range(const BufferState* buffer, std::size_t offset, std::size_t size,
                        const char* operation) {
  buffer->check_usable(operation, offset, size);
  if (offset > buffer->bytes || size > buffer->bytes - offset) {
    throw Error(ErrorCode::buffer_misuse, fmt::format("access to bytes {} is outside {}",
                                                      byte_range(offset, size), buffer->describe()));
  }
}

void buffer_free(BufferState* buffer) {
  BufferLife expected = BufferLife::alive;
  if (!buffer->life.compare_exchange_strong(expected, BufferLife::freed, std::memory_order_acq_rel)) {
    if (expected == BufferLife::freed) {
      throw Error(ErrorCode::buffer_misuse, fmt::format("double free of {}", buffer->describe()));
    }
    buffer->check_usable("free of", 0, buffer->bytes);
  }
  release(buffer);
}

namespace {

// The innermost blocking map of the calling thread waiting for its grant (WaitedMapping).
constinit thread_local WaitedMapping* waited_mapping __attribute__((tls_model("initial-exec"))) = nullptr;

// this_thread_token(): a number no other thread of the process has had, or will have. Not
// std::thread::id: the system hands an exited thread's id to a later thread, which then counted as
// holding the exited one's mappings (and was refused waits that would have ended).
std::uint64_t this_thread_token() noexcept {
  static std::atomic<std::uint64_t> issued{0};  // process-wide, like thread ids themselves
  constinit thread_local std::uint64_t token = 0;
  if (token == 0) token = issued.fetch_add(1, std::memory_order_relaxed) + 1;
  return token;
}

// A host mapping has no closure: its closure bytes hold the token of the thread that mapped it, so
// that a second, conflicting map on that thread is an error instead of a wait for itself.
// A mapping's closure bytes (it has no closure): the mapping thread's token, then whether it is a
// try_map's prefetch, then its index in ContextImpl::held_mappings while listed there (under
// mappings_mutex), so that an unmap takes it out in constant time among any number held.
constexpr std::size_t prefetch_flag_offset = sizeof(std::uint64_t);
constexpr std::size_t held_index_offset = 2 * sizeof(std::uint64_t);
static_assert(held_index_offset + sizeof(std::size_t) <= inline_closure_bytes);

void set_held_index(TaskRecord* mapping, std::size_t index) noexcept {
  std::memcpy(mapping->closure + held_index_offset, &index, sizeof index);
}
std::size_t held_index(const TaskRecord* mapping) noexcept {
  std::size_t index = 0;
  std::memcpy(&index, mapping->closure + held_index_offset, sizeof index);
  return index;
}

void set_mapping_thread(TaskRecord* task, bool prefetch) noexcept {
  const std::uint64_t self = this_thread_token();
  std::memcpy(task->closure, &self, sizeof self);
  task->closure[prefetch_flag_offset] = std::byte{prefetch ? std::uint8_t{1} : std::uint8_t{0}};
}

// map_operation(): how messages name a map in `mode`, with the preposition its range takes.
const char* map_operation(Access mode) noexcept {
  switch (mode) {
    case Access::read: return "a read map of";
    case Access::write: return "a write map of";
    case Access::read_write: return "a read-write map of";
  }
  return "a map of";
}

bool mapped_by_this_thread(const TaskRecord* task) noexcept {
  if (task->kind != TaskKind::host_access) return false;
  std::uint64_t owner = 0;
  std::memcpy(&owner, task->closure, sizeof owner);
  return owner == this_thread_token();
}

// successors_of(): the tasks waiting for `task` (unfinished: its successor stack is open).
template <class Visit>
void for_each_successor(const TaskRecord* task, Visit&& visit) {
  const std::uintptr_t head = task->successors.load(std::memory_order_acquire);
  if (head == closed_successors) return;
  for (const DepNode* node = reinterpret_cast<const DepNode*>(head); node != nullptr; node = node->next)
    visit(node->successor);
}

}  // namespace

bool ContextImpl::is_prefetch_mapping(const TaskRecord* task) noexcept {
  return task->kind == TaskKind::host_access && task->closure[prefetch_flag_offset] != std::byte{0};
}

// A mapping is over (unmapped, or a prefetch whose copies are done): later accesses need not find it
// in the tracker, load its status and drop their reference to it (over many buffers mapped once
// each, as in W4 between its sweeps, those were cold misses in the next submission). The mapping's
// access still holds the buffer here; it may not once finish() has retired it.
void ContextImpl::end_mapping(TaskRecord* task, ThreadState& thread) noexcept {
  const AccessRecord& held = task->accesses[0];
  {
    std::lock_guard lock(held.buffer->tracker.lock());
    held.buffer->tracker.forget(task, held.offset, held.size);
  }
  finish(task, thread, status_succeeded);
}

const WaitedMapping* innermost_waited_mapping() noexcept { return waited_mapping; }

bool ContextImpl::holds_one_of_the_mappings() {
  std::lock_guard lock(mappings_mutex);
  return std::any_of(held_mappings.begin(), held_mappings.end(), mapped_by_this_thread);
}

namespace {

// parked_coroutine_root(): the launched coroutine parked in `co_await` on the group of `task`, if any.
// While `task` is unfinished the group cannot empty, so that coroutine stays parked (and alive). The
// parked bit alone is not enough: it stays set from the group's emptying until the completer has taken
// the continuation, and a task added to the reused group meanwhile is not waited for by it. (In that
// instant a task added to the group can still be taken for awaited: a refusal too many, never a
// missed cycle.)
const TaskRecord* parked_coroutine_root(const TaskRecord& task) noexcept {
  const GroupState* group = task.group;
  if (group == nullptr ||
      (group->pending.load(std::memory_order_acquire) & GroupState::coroutine_parked) == 0 ||
      group->continuation.load(std::memory_order_acquire) == nullptr)
    return nullptr;
  return group->continuation_root.load(std::memory_order_acquire);
}

}  // namespace

bool ContextImpl::may_be_waited_for(const TaskRecord& task,
                                    std::span<const AnnouncedAwait> announced) noexcept {
  if (task.pool != nullptr) return true;  // through its pool's gate
  const std::uintptr_t head = task.successors.load(std::memory_order_acquire);
  return (head != 0 && head != closed_successors) || parked_coroutine_root(task) != nullptr ||
         std::any_of(announced.begin(), announced.end(),
                     [&](const AnnouncedAwait& await) { return await.target == &task; });
}

// Everything reachable from an unfinished task (or mapping) through successor edges waits for it, so
// is unfinished and alive while it is: the walk reads only live records, provided `unfinished` cannot
// finish meanwhile (own_mapping_blocking holds off the mapping's end; a task walks from itself). So
// are the coroutines that wait for such a task: a coroutine whose next stretch (not started: it waits)
// is ordered after it is suspended until that stretch runs, so its Task is unfinished; one parked on
// the task's group stays parked while the task is unfinished; an announced one is between its check
// and its suspension (the caller holds coroutine_awaits_mutex). The walk is bounded (a deadlock
// through a longer chain is not detected, only waited for).
const TaskRecord* ContextImpl::first_waiting_for(const TaskRecord* unfinished,
                                                 const std::function<bool(const TaskRecord*)>& blocked,
                                                 std::span<const AnnouncedAwait> announced,
                                                 bool* through_coroutine,
                                                 std::span<const StuckWait* const> stuck) {
  if (through_coroutine != nullptr) *through_coroutine = false;
  if (blocked(unfinished)) return unfinished;
  // The common case: no allocation.
  if (stuck.empty() && !may_be_waited_for(*unfinished, announced)) return nullptr;
  constexpr std::size_t max_visits = 1 << 16;
  // Each task with whether a coroutine's Task lies on the way to it (for the caller's message).
  std::vector<std::pair<const TaskRecord*, bool>> frontier;
  std::unordered_set<const TaskRecord*> seen{unfinished};
  struct CountVisits {
    const std::unordered_set<const TaskRecord*>& seen;
    std::atomic<std::uint64_t>& total;
    ~CountVisits() { total.fetch_add(seen.size(), std::memory_order_relaxed); }
  } count_visits{seen, unfinished->context->cycle_walk_visits};
  const auto visit = [&](const TaskRecord* task, bool via_coroutine) {
    if (seen.insert(task).second) frontier.emplace_back(task, via_coroutine);
  };
  frontier.emplace_back(unfinished, false);
  while (!frontier.empty() && seen.size() < max_visits) {
    const auto [task, via_coroutine] = frontier.back();
    frontier.pop_back();
    if (blocked(task)) {
      if (through_coroutine != nullptr) *through_coroutine = via_coroutine;
      return task;
    }
    // A coroutine's next stretch: the coroutine waits for what the stretch waits for.
    if (const TaskRecord* root = coroutine_root_of(*task)) {
      if (blocked(root)) {
        if (through_coroutine != nullptr) *through_coroutine = true;
        return task;
      }
      visit(root, true);
    }
    // The coroutines that wait for it other than through its successor edges.
    if (const TaskRecord* parked = parked_coroutine_root(*task)) visit(parked, true);
    for (const AnnouncedAwait& await : announced) {
      if (await.target == task) visit(await.root, true);
    }
    // A thread parked in a wait for it (inside a task, or in a blocking map) holds up what is on its
    // stack: the tasks there and the maps they wait in end only after that wait does.
    for (const StuckWait* wait : stuck) {
      if (!(*wait->blocked)(task)) continue;
      for (const RunningFrame* frame = wait->frames; frame != nullptr; frame = frame->outer) {
        if (!frame->deferred) visit(frame->task, via_coroutine);
      }
      // A cancelled mapping is finished by its grant, which the caller's mappings_mutex holds off only
      // for a mapping of its own context (blocker_among()'s rule): those are skipped.
      for (const WaitedMapping* waited = wait->mappings; waited != nullptr; waited = waited->outer) {
        const TaskRecord* mapping = waited->mapping;
        if (mapping->context == unfinished->context &&
            !mapping->cancel_pending.load(std::memory_order_acquire))
          visit(mapping, via_coroutine);
      }
    }
    // A pool's task has no successors of its own: what is ordered after it waits for its pool's gate,
    // which ends after it (so is unfinished and alive too).
    if (task->pool != nullptr) visit(task->pool->gate, via_coroutine);
    for_each_successor(task,
                       [&, via = via_coroutine](const TaskRecord* successor) { visit(successor, via); });
  }
  return nullptr;
}

// The walk runs under mappings_mutex: a mapping listed in held_mappings has not begun to end
// (buffer_unmap takes it out of the list, under that mutex, before end_mapping finishes it), so it
// and everything waiting for it stay alive while the walk reads them. `blocked` only reads tasks.
// Through the waits parked inside tasks on other threads too (stuck_waits, whose stacks stay as they
// are while listed): a task whose body waits for work that waits for this thread's mapping cannot end
// either (the lock order is list_stuck_wait()'s: the parked waits first, then the mappings).
const TaskRecord* ContextImpl::own_mapping_blocking(const std::function<bool(const TaskRecord*)>& blocked,
                                                    bool targets_ordered) {
  std::lock_guard stuck_lock(stuck_waits_mutex);
  if (!targets_ordered && stuck_waits.empty()) return nullptr;  // no walk could reach them
  std::lock_guard lock(mappings_mutex);
  for (const TaskRecord* mapping : held_mappings) {
    if (mapped_by_this_thread(mapping) &&
        first_waiting_for(mapping, blocked, {}, nullptr, stuck_waits) != nullptr)
      return mapping;
  }
  return nullptr;
}

void ContextImpl::throw_waits_for_own_mapping(const TaskRecord& mapping, std::string_view what,
                                              const char* task) {
  const AccessRecord& held = mapping.accesses[0];
  const std::string waited = task != nullptr ? fmt::format(" for task '{}'", task) : std::string();
  throw Error(ErrorCode::buffer_misuse,
              fmt::format("{}{} would wait forever for the mapping of {} that this thread still holds (unmap "
                          "it first)",
                          what, waited, held.buffer->describe(held.offset, held.size)));
}

namespace {

// The tasks a map of a range waits for (its blockers), sorted; `ordered`: whether any may be ordered
// behind another task (looked at once: a blocker's predecessors only finish meanwhile).
struct TaskSet {
  std::span<const TaskRecord* const> sorted;
  bool ordered;
  bool operator()(const TaskRecord* task) const noexcept {
    return std::binary_search(sorted.begin(), sorted.end(), task, std::less<>());
  }
  bool may_be_ordered() const noexcept { return ordered; }
};

// refuse_endless_map(): throws, as map() does, when a mapping of the range would wait for ever: for
// the task this thread runs or one ordered after it, or (`wait_for_mappings`: a blocking map) for a
// mapping this thread holds; or behind a task this thread suspended to run the caller. The caller
// holds the buffer's tracker lock.
void refuse_endless_map(ContextImpl& context, const BufferState* buffer, std::size_t offset, std::size_t size,
                        Access mode, const std::string& what, bool wait_for_mappings) {
  std::vector<const TaskRecord*> blockers;
  (void)buffer->tracker.first_blocker(offset, size, mode, [&](const TaskRecord* blocker) {
    blockers.push_back(blocker);
    return false;
  });
  // Looked up once per task a walk meets: sorted, since a range may have many readers.
  std::sort(blockers.begin(), blockers.end(), std::less<>());
  const TaskSet blocked{blockers, std::any_of(blockers.begin(), blockers.end(), [](const TaskRecord* task) {
                          return may_be_ordered_now(*task);
                        })};
  if (wait_for_mappings) {
    context.refuse_endless_wait(blocked, what.c_str());
  } else {
    context.refuse_wait_behind_running_task(blocked, what.c_str());
  }
  // Or behind a task this thread suspended to run the caller, which resumes only after it.
  if (const TaskRecord* suspended = ContextImpl::suspended_blocker(blocked, targets_may_be_ordered(blocked)))
      [[unlikely]]
    ContextImpl::throw_waits_behind(suspended, what.c_str());
}

}  // namespace

void refuse_map_behind_running_task(BufferState* buffer, std::size_t offset, std::size_t size, Access mode) {
  if (running_task_record() == nullptr) return;
  std::lock_guard lock(buffer->tracker.lock());
  if (!buffer->tracker.would_wait(offset, size, mode)) return;
  refuse_endless_map(*buffer->context, buffer, offset, size, mode,
                     fmt::format("{} {}", map_operation(mode), buffer->describe(offset, size)), false);
}

Mapping buffer_map(BufferState* buffer, std::size_t offset, std::size_t size, Access mode, bool wait) {
  if (mode != Access::read && mode != Access::write && mode != Access::read_write) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("map of {}: {} is not an Access (read, write or read_write)", buffer->describe(),
                            static_cast<int>(mode)));
  }
  buffer_check_range(buffer, offset, size, map_operation(mode));
  const auto describe_map = [&] {
    return fmt::format("{} {}", map_operation(mode), buffer->describe(offset, size));
  };
  ContextImpl& context = *buffer->context;
  // Room for this mapping in held_mappings first: once granted, recording it must not fail.
  struct RoomInHeldMappings {
    ContextImpl& context;
    explicit RoomInHeldMappings(ContextImpl& owner) : context(owner) {
      std::lock_guard lock(context.mappings_mutex);
      auto& held = context.held_mappings;
      const std::size_t wanted = held.size() + context.mapping_rooms_reserved + 1;
      if (held.capacity() < wanted) held.reserve(std::max(wanted, 2 * held.capacity()));
      ++context.mapping_rooms_reserved;
    }
    ~RoomInHeldMappings() {
      std::lock_guard lock(context.mappings_mutex);
      --context.mapping_rooms_reserved;
    }
    RoomInHeldMappings(const RoomInHeldMappings&) = delete;
    RoomInHeldMappings& operator=(const RoomInHeldMappings&) = delete;
  } room(context);
  ThreadState& thread = context.current_thread();
  TaskRecord* task = context.allocate_record(thread);
  task->kind = TaskKind::host_access;
  task->name = "host mapping";
  // try_map never waits: data that must first come back from a device (written there, or its copy
  // back still in flight) is asked for by a prefetch mapping that ends itself once it is here, and
  // the call returns nothing; a later try_map finds it on the host.
  // Over data a failed task wrote there is nothing to fetch: the mapping is cancelled at once, and
  // the call throws as map() does. (A prefetch registered there was cancelled and, registered with a
  // writing caller's mode, marked the whole range failed while the call returned nothing.) Only
  // finished tasks can have failed, and the registration below returns nothing where one is not.
  bool prefetch = !wait && reads(mode) && context.coherence != nullptr &&
                  !buffer->host_only.load(std::memory_order_acquire) &&
                  context.coherence->valid_bytes(*buffer, offset, size, 0) < size;
  if (prefetch) {
    std::lock_guard lock(buffer->tracker.lock());
    prefetch = !buffer->tracker.reads_failed_data(offset, size);
  }
  set_mapping_thread(task, prefetch);
  // The runtime (until unmap) and the Mapping; a prefetch has no Mapping.
  task->refs.store(prefetch ? 1 : 2, std::memory_order_relaxed);
  open_submission_guard(task);
  std::size_t edges = 0;
  // A prefetch only reads the range, whatever the caller will do with it next: it must not stand for
  // the caller's write (which a later try_map() registers), nor invalidate the device's copy.
  const Access registered = prefetch ? Access::read : mode;
  const AccessSpec spec{buffer, offset, size, registered};
  context.copy_accesses(task, &spec, 1);
  {
    std::lock_guard lock(buffer->tracker.lock());
    const auto discard = [&] {
      retire_task_access(buffer);
      task->access_count = 0;
      task->refs.store(1, std::memory_order_relaxed);
      context.release_task(task);
    };
    // The context's destruction sweeps each buffer under this lock (ContextImpl::shutdown()): a map
    // registered before keeps the data, one after it is refused here.
    if (buffer->life.load(std::memory_order_acquire) != BufferLife::alive) [[unlikely]] {
      discard();
      buffer->check_usable(map_operation(mode), offset, size);
    }
    // A blocking map that would wait forever is refused: for the task this thread runs (which
    // accesses the range itself, or is ordered before a task that does) or one it suspended to run
    // that task, or for a mapping this thread holds, directly or through the tasks it waits for. A try_map
    // that could only ever be busy is refused too: inside a task, behind that task (a loop polling it would
    // never end); behind a mapping this thread holds it is just busy (the thread may unmap and try again).
    const auto refuse_endless = [&](bool wait_for_mappings) {
      try {
        refuse_endless_map(context, buffer, offset, size, mode, describe_map(), wait_for_mappings);
      } catch (...) {
        discard();
        throw;
      }
    };
    if (!wait && buffer->tracker.would_wait(offset, size, mode)) {
      if (running_task_record() != nullptr) refuse_endless(false);
      discard();
      return {nullptr, nullptr};
    }
    // Nor for a copy: a mapping that writes waits for a copy still landing on the host or leaving it
    // (a HOST_CACHED buffer's copy-back, which no task waits for) — busy until it is done. Checked
    // after the writers: a writer's copy-back starts before the writer counts as finished.
    if (!wait && writes(mode) && context.coherence != nullptr &&
        !buffer->host_only.load(std::memory_order_acquire) &&
        context.coherence->copy_in_flight(*buffer, offset, size, 0)) {
      discard();
      return {nullptr, nullptr};
    }
    if (wait &&
        (context.held_mapping_count.load(std::memory_order_acquire) != 0 ||
         running_task_record() != nullptr) &&
        buffer->tracker.would_wait(offset, size, mode)) {
      refuse_endless(true);
    }
    try {  // the allocations registration needs, before it (see register_dependencies())
      buffer->tracker.split_for(offset, size);
      reserve_dep_nodes(task, buffer->tracker.reserve_for(offset, size, registered, 1, free_dep_nodes(task)));
    } catch (...) {
      discard();
      throw;
    }
    context.note_reads_of_gates(task);
    buffer->tracker.register_access(task, offset, size, registered, [&](Predecessor predecessor) {
      if (predecessor.task != task && add_edge(predecessor.task, task, predecessor.consumes)) ++edges;
    });
  }
  if (close_submission_guard(task, edges)) context.make_ready(task, thread, true);
  if (prefetch) return {nullptr, nullptr};  // the record may be gone already: ended when granted
  {
    // Listed while it waits: the tasks the wait runs must not wait for what is ordered after it
    // (ContextImpl::suspended_blocker).
    WaitedMapping waited{task, waited_mapping};
    struct Unlist {
      ThreadState& thread;
      WaitedMapping& waited;
      ~Unlist() {
        waited_mapping = waited.outer;
        --thread.map_waits;
      }
    } unlist{thread, waited};
    waited_mapping = &waited;
    ++thread.map_waits;
    ListedMapWait granted{{task}, {}, {}};
    if (!context.scheduler.wait(thread, granted)) {
      // Given up in a cycle of waits: its grant ends the mapping, which holds the runtime's reference.
      const std::string what = describe_map();
      context.release_task(task);  // the Mapping's reference
      granted.throw_hopeless(what.c_str());
    }
  }
  if (task->load_status() == status_cancelled) {
    std::exception_ptr error = cancellation_error(task, describe_map());
    context.release_task(task);  // the Mapping's reference; the runtime's went with the cancellation
    std::rethrow_exception(error);
  }
  {
    std::lock_guard lock(context.mappings_mutex);
    set_held_index(task, context.held_mappings.size());
    context.held_mappings.push_back(task);  // into the room reserved above: no allocation
    context.held_mapping_count.store(context.held_mappings.size(), std::memory_order_release);
  }
  return {task, buffer->host + offset};
}

namespace {

// free_data_of_context_gone(): ends `mapping` of a buffer whose context has been destroyed, and frees
// the buffer's data when no other mapping still reads it: the destruction kept the data for the
// mappings alone (ContextImpl::shutdown()), not for the handles, which can no longer reach it. Freed
// before the mapping ends: its access may be all that keeps the buffer alive (its handles may be gone).
void free_data_of_context_gone(ContextImpl& context, TaskRecord* mapping) {
  BufferState* buffer = mapping->accesses[0].buffer;
  bool still_mapped = false;
  {
    std::lock_guard lock(context.mappings_mutex);
    // A map still waiting for its grant (or granted and not yet listed) is not among held_mappings
    // but will use the data: while any map of the context is in progress, the data stays (until
    // that mapping's unmap, or the last handle).
    still_mapped = context.mapping_rooms_reserved != 0 ||
                   std::any_of(context.held_mappings.begin(), context.held_mappings.end(),
                               [&](const TaskRecord* held) { return held->accesses[0].buffer == buffer; });
  }
  if (!still_mapped && !context.forked_child()) {
    std::lock_guard lock(buffer->tracker.lock());
    buffer->host_storage.release();
    buffer->host = nullptr;
  }
  context.end_mapping(mapping, context.current_thread());
}

}  // namespace

void buffer_unmap(Mapping mapping) {
  TaskRecord* task = mapping.record;
  ContextImpl& context = *task->context;
  {
    std::lock_guard lock(context.mappings_mutex);
    // Out in constant time: the last one takes its place (the list's order means nothing).
    auto& held = context.held_mappings;
    if (const std::size_t index = held_index(task); index < held.size() && held[index] == task) {
      held[index] = held.back();
      set_held_index(held[index], index);
      held.pop_back();
    }
    context.held_mapping_count.store(context.held_mappings.size(), std::memory_order_release);
  }
  // Described before the mapping ends: the mapping may hold the buffer's last reference.
  std::string context_gone;
  if (context.shut_down) [[unlikely]] {
    const AccessRecord& held = task->accesses[0];
    context_gone = fmt::format("unmap of {}: the buffer's context has been destroyed (the mapping was ended)",
                               held.buffer->describe(held.offset, held.size));
  }
  // Ending the mapping may release the buffer, and with it the runtime (when the Context object
  // and every handle went first): hold the runtime until the mapping's record is given back.
  context.add_external_reference();
  if (!context_gone.empty()) [[unlikely]] {
    free_data_of_context_gone(context, task);
  } else {
    context.end_mapping(task, context.current_thread());
  }
  context.release_task(task);  // the Mapping's reference
  context.drop_external_reference();
  if (!context_gone.empty()) throw Error(ErrorCode::buffer_misuse, context_gone);
}

BufferLabel buffer_label(const BufferState* buffer) noexcept {
  return {buffer->id, buffer->bytes, buffer->name};
}

void throw_unmap_without_map(const BufferLabel& label, std::size_t first, std::size_t end) {
  if (label.id == 0) throw Error(ErrorCode::buffer_misuse, "unmap of a buffer mapping that was never mapped");
  throw Error(
      ErrorCode::buffer_misuse,
      fmt::format("unmap of elements [{}, {}) of {}, which are not mapped (unmapped already, or moved from)",
                  first, end, describe_buffer(label)));
}

}  // namespace nerve::detail
