#include "runtime/context_impl.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include <unistd.h>

#include <fmt/format.h>

#include "nerve/error.hpp"

#include "backend/registry.hpp"
#include "config/diagnostics.hpp"
#include "config/enum_names.hpp"
#include "memory/buffer_state.hpp"
#include "perf/output_path.hpp"
#include "perf/trace.hpp"
#include "runtime/pool_state.hpp"
#include "runtime/thread_exit.hpp"
#include "util/log.hpp"

namespace nerve::detail {
namespace {

// Context ids key the per-thread lookup cache; they are never reused, so a cache entry left over
// from a destroyed context can never be mistaken for a live one.
std::uint64_t new_context_id() noexcept {
  static std::atomic<std::uint64_t> last{0};
  return last.fetch_add(1, std::memory_order_relaxed) + 1;
}

// The monitor refuses a perf.model_dir it cannot use: the error says where the value was set.
std::unique_ptr<PerfMonitor> make_perf_monitor(const Config& config) {
  try {
    return std::make_unique<PerfMonitor>(config.perf);
  } catch (const ConfigError& error) {
    config::rethrow_with_origin(config, error);
  }
}

}  // namespace

constinit thread_local ThreadCacheEntry thread_cache __attribute__((tls_model("initial-exec")));

ContextImpl::ContextImpl(const Settings& settings)
    : config(Config::load(settings)),
      topology(Topology::discover(config)),
      host_memory(config, topology),
      buffer_slots(sizeof(BufferState), alignof(BufferState)),
      perf(make_perf_monitor(config)),
      monitored_executor(*this),
      scheduler(config, topology,
                config.perf.times_tasks() ? static_cast<TaskExecutor&>(monitored_executor) : *this),
      id(new_context_id()) {
  log::debug("context {}: {} worker slots on {}", id, scheduler.slot_count(), topology.description());
  watch_forks_inside_tasks();  // before any task runs, so before a fork inside one
  inline_spawn_record.context = this;
  inline_spawn_record.refs.store(1, std::memory_order_relaxed);  // never released
  inline_spawn_record.phase.store(status_running, std::memory_order_relaxed);
  if (config.perf.records_tasks()) recorder = perf.get();
  times_tasks = config.perf.times_tasks();
  ProvisionalClaims output_claims(id);  // given back if the construction fails after them
  if (!config.perf.trace.empty()) {
    ClaimedPath claimed = output_claims.claim(config.perf.trace, "perf.trace");
    trace_path = claimed.path.string();
    trace_taken_by = std::move(claimed.taken_by);
    // The trace is written when the context ends: a path that cannot be written is said now, not
    // after the whole run. Probed by opening for appending (changing nothing), removed if it was new.
    std::error_code ignored;
    try {
      refuse_unwritable_kind(trace_path, "perf.trace");
    } catch (const ConfigError& error) {
      config::rethrow_with_origin(config, error);
    }
    const bool existed = std::filesystem::exists(trace_path, ignored);
    errno = 0;
    if (!std::ofstream(trace_path, std::ios::app)) {
      config::rethrow_with_origin(config,
                                  ConfigError(fmt::format("perf.trace: cannot write '{}': {}", trace_path,
                                                          errno != 0 ? std::strerror(errno) : "open failed"),
                                              "perf.trace"));
    }
    // A dangling link made its target: that goes, not the link (it was replaced by a plain file).
    if (!existed) std::filesystem::remove(std::filesystem::canonical(trace_path, ignored), ignored);
  }
  if (config.scheduler.policy != SchedulerPolicy::heft && !config.perf.decision_log.empty()) {
    // Documented (no file under another policy), but a file the user asked for and never gets is
    // said at start, as strict NUMA affinity under eager is.
    log::warn(
        "perf.decision_log '{}' has no effect under scheduler.policy {}: only heft makes placement "
        "decisions to log (no file is written)",
        config.perf.decision_log, config::to_string(config.scheduler.policy));
  }
  // The decisions kept for the trace's slices: only with a trace (nothing else reads them).
  if (config.scheduler.policy == SchedulerPolicy::heft &&
      (!config.perf.decision_log.empty() || !config.perf.trace.empty())) {
    try {
      std::filesystem::path log_path;
      if (!config.perf.decision_log.empty()) {
        ClaimedPath claimed = output_claims.claim(config.perf.decision_log, "perf.decision_log");
        if (!claimed.taken_by.empty()) {
          log::warn("perf.decision_log: '{}' is {} in this process; context {} writes its own to '{}'",
                    config.perf.decision_log, claimed.taken_by, id, claimed.path.string());
        }
        log_path = std::move(claimed.path);
      }
      decisions = std::make_unique<DecisionLog>(log_path, !config.perf.trace.empty());
      if (!config.perf.trace.empty()) perf->keep_decisions_in(decisions.get());
    } catch (const ConfigError& error) {
      config::rethrow_with_origin(config, error);  // a file that cannot be made: say where it was set
    }
  }
  scheduler.start();  // on failure, it joined the workers it had started
  try {
    for (auto& device : discover_devices(config, topology, 1, &backends_without_devices))
      add_device(std::move(device));
    // heft's bus model, measured (or loaded) now rather than at the first placement: that may happen
    // on a device's completion thread, which calibration copies would then wait for.
    if (bus != nullptr) {
      try {
        bus->ensure_calibrated(memory_nodes());
      } catch (const std::exception& error) {
        log::warn("bus calibration failed ({}); heft predicts transfers as free", error.what());
      }
    }
    // Its first sample marks the end of construction: workers and devices up, the bus measured.
    perf->start_counters();
  } catch (...) {
    // A device that cannot be opened (or a gpu.devices that selects nothing), or a thread the system
    // refuses, fails the context: the workers already running must stop before the members they use
    // are destroyed.
    scheduler.stop();
    for (auto& device : devices) device->stop();
    for (auto& device : devices) device->memory().drain();
    throw;
  }
  enter_context_directory(id, *this);  // from now on exiting threads hand their states back
  output_claims.keep();
}

ContextImpl::~ContextImpl() {
  // Every thread state's record cache goes back with the slabs; nothing to return individually.
}

void ContextImpl::drop_external_reference() noexcept {
  if (external_references.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
}

void ContextImpl::detach_pool(PoolState* pool) {
  std::lock_guard lock(detached_pools_mutex);
  detached_pools.push_back(pool);
}

void ContextImpl::free_detached_pools() noexcept {
  std::vector<PoolState*> done;
  {
    std::lock_guard lock(detached_pools_mutex);
    auto ended = std::stable_partition(detached_pools.begin(), detached_pools.end(),
                                       [](const PoolState* pool) { return !pool->gate->finished(); });
    done.assign(ended, detached_pools.end());
    detached_pools.erase(ended, detached_pools.end());
  }
  for (PoolState* pool : done) free_pool(pool);
}

void ContextImpl::release_owner() noexcept {
  // A child of fork() has none of the parent's threads: there are no workers to stop or join (that
  // crashed the child), and locks they held stay held. The context is left as it is; its memory
  // goes with the process.
  if (forked_child()) {
    log::warn(
        "context {} was created by process {}: its forked child {} leaves it as it is (nerve/context.hpp: "
        "fork)",
        id, creator_pid, getpid());
    return;
  }
  // Waiting for every task from inside one of them would wait for itself (on a worker it would
  // also join its own thread), and the shards cannot close while this task still counts in them.
  if (const ThreadState* caller = registered_thread(); caller != nullptr && caller->nesting > 0) {
    log::error(
        "a Context is destroyed inside one of its own tasks, which its destruction would wait "
        "for; the program cannot continue (destroy it outside its tasks)");
    std::abort();
  }
  leave_context_directory(id);  // before the workers stop: their exits hand nothing back
  shutdown();
  free_detached_pools();  // every task has ended: their gates are done
  // Every task has ended, so no thread changes its `owned_references` again, and the tasks' ends
  // ordered those changes before this. A shard whose groups outlive the Context keeps its central
  // reference until the last of them goes.
  std::int64_t emptied = 0;
  {
    std::lock_guard lock(threads_mutex);
    reference_shards_closed = true;
    for (const std::unique_ptr<ThreadState>& state : thread_storage) {
      const std::int64_t owned = state->owned_references.exchange(0, std::memory_order_relaxed);
      const std::int64_t change = owned - shard_open_bias;
      if (state->shared_references.fetch_add(change, std::memory_order_acq_rel) + change == 0) ++emptied;
    }
  }
  // The object's own reference is still counted, so these never delete the context.
  external_references.fetch_sub(emptied, std::memory_order_acq_rel);
  drop_external_reference();
}

// counts_owned(): `state` is the calling thread's and it runs a task body that the Context's
// destruction will wait for — not one that deferred its completion, which may be finished (and the
// context shut down) while the body still runs.
static bool counts_owned(const ThreadState& state) noexcept {
  return state.nesting > 0 && state.deferred_bodies == 0;
}

ThreadState* ContextImpl::retain_sharded() noexcept {
  ThreadState* state = nullptr;
  try {
    state = &current_thread();
  } catch (...) {  // no thread state could be made: count centrally
  }
  if (state != nullptr) {
    if (counts_owned(*state)) {  // the shards are open until the task ends
      state->owned_references.store(state->owned_references.load(std::memory_order_relaxed) + 1,
                                    std::memory_order_relaxed);
      return state;
    }
    // Below the bias means closed (or registered after closing): only a group made from a Context
    // being destroyed could see it, and it must not count in a shard that has let go, not even for
    // a moment (a release seeing that count would never give the shard's reference back).
    std::int64_t shared = state->shared_references.load(std::memory_order_relaxed);
    while (shared >= shard_open_bias / 2) {
      if (state->shared_references.compare_exchange_weak(shared, shared + 1, std::memory_order_relaxed))
        return state;
    }
  }
  add_external_reference();
  return nullptr;
}

void ContextImpl::release_sharded(ThreadState* shard) noexcept {
  if (shard == nullptr) return drop_external_reference();
  if (thread_cache.context_id == id && thread_cache.state == shard && counts_owned(*shard)) {
    shard->owned_references.store(shard->owned_references.load(std::memory_order_relaxed) - 1,
                                  std::memory_order_relaxed);
    return;
  }
  if (shard->shared_references.fetch_sub(1, std::memory_order_acq_rel) == 1) drop_external_reference();
}

// A mapping this thread made that pending tasks wait for: the destruction would wait for ever, and a
// destructor can neither do that nor leave the tasks behind with the runtime gone — unless the
// mapping's Mapped<T> is in another thread's hands, which will unmap it: that thread gets a while.
void ContextImpl::refuse_endless_destruction() noexcept {
  const auto deadline = Clock::now() + std::chrono::seconds(2);
  while (true) {
    try {
      refuse_own_mapping_wait(waits_for_all, "destroying the Context (it waits for every task)");
      return;
    } catch (const std::exception& error) {
      if (Clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      log::error("{}; the program cannot continue", error.what());
      std::abort();
    }
  }
}

void ContextImpl::settle_device_memory() noexcept {
  // A pass in which no node started anything since the pass before saw each node idle, with nothing
  // started on it in between: so at the end of that earlier pass every node was idle together, and
  // with no task left nothing starts a copy again. (A single pass is not enough: a copy ending on a
  // node waited for later may start one on a node already passed.)
  // The counts only grow, so an unchanged sum is every count unchanged.
  std::uint64_t before = 0;
  for (bool settled = false; !settled;) {
    std::uint64_t now = 0;
    for (auto& device : devices) now += device->memory().wait_idle();
    settled = now == before;
    before = now;
  }
}

void ContextImpl::shutdown() noexcept {
  if (shut_down) return;
  refuse_endless_destruction();
  // Work that comes to wait for such a mapping during the wait ends it with buffer_misuse: the same
  // check, then the wait again.
  while (true) {
    try {
      wait_for_all_tasks();
      break;
    } catch (const Error& refused) {
      if (refused.code() != ErrorCode::buffer_misuse) break;  // not a wait for a mapping: none to end
      refuse_endless_destruction();
    } catch (...) {
      break;
    }
  }
  try {
    report_root_errors();
  } catch (const std::exception& error) {
    log::warn("context destroyed with an unreported task failure: {}", error.what());
  } catch (...) {
    log::warn("context destroyed with an unreported task failure");
  }
  // From here on submissions are refused. One another thread made through a TaskGroup while the wait
  // above ended may still be in flight: it is cancelled when picked (execute()), and this second
  // wait sees it end, so no task body runs once the buffers are freed below.
  shut_down.store(true, std::memory_order_seq_cst);
  try {
    wait_for_all_tasks();
  } catch (...) {  // a wait for a mapping: refused above already
  }
  scheduler.stop();
  for (auto& device : devices) device->stop();
  settle_device_memory();
  for (auto& device : devices) device->memory().drain();
  perf->finish();
  if (decisions != nullptr) decisions->flush();
  if (!config.perf.trace.empty()) write_trace();

  // Buffers still alive: report, free their data, and make later use of their handles an error. Under
  // buffers_mutex throughout: a handle dropped on another thread meanwhile destroys its buffer only
  // after unregistering it (destroy(), buffers.cpp), so each buffer is either swept here whole or
  // gone before — never both at once (that was a use after free and a double free of its data).
  std::lock_guard buffers_lock(buffers_mutex);
  // A mapping still held keeps its buffer's data until it is unmapped (its pointer stays valid, and
  // unmap() then reports the misuse): freeing it under the program would be a silent use after free.
  // So does one being made on another thread right now (registered before its buffer is swept: a
  // map after it is refused, buffer_map()).
  std::size_t held = 0;
  {
    std::lock_guard lock(mappings_mutex);
    held = held_mappings.size();
  }
  if (held != 0) {
    log::warn(
        "context destroyed with {} buffer mapping(s) still held; their data stays until they are "
        "unmapped, and unmap() reports buffer_misuse",
        held);
  }
  if (!buffers.empty()) {
    std::size_t bytes = 0;
    for (const BufferState* buffer : buffers) bytes += buffer->bytes;
    log::warn(
        "context destroyed with {} buffer(s) still alive ({} bytes); their data is freed now (a mapped one's "
        "when it is unmapped)",
        buffers.size(), bytes);
  }
  for (BufferState* buffer : buffers) {
    std::lock_guard lock(buffer->tracker.lock());
    buffer->life.store(BufferLife::context_gone, std::memory_order_release);
    // Every task has ended: what the tracker still waits for is a mapping, held or being granted.
    const bool mapped = buffer->tracker.would_wait(0, buffer->bytes, Access::read_write);
    buffer->tracker.clear();
    if (mapped) continue;
    buffer->host_storage.release();
    buffer->host = nullptr;
  }
}

ThreadState& ContextImpl::register_current_thread() {
  ThreadState* state = nullptr;
  bool new_to_this_thread = false;
  {
    std::lock_guard lock(threads_mutex);
    auto [it, inserted] = threads_by_id.try_emplace(std::this_thread::get_id(), nullptr);
    if (inserted && !released_states.empty()) {  // an exited thread's, handed back under this mutex
      it->second = released_states.back();
      released_states.pop_back();
    } else if (inserted) {
      it->second = make_thread_state(it);
    }
    state = it->second;
    new_to_this_thread = inserted;
  }
  // Outside threads_mutex: the hand-back list may consult the context directory, whose mutex comes
  // first. Where it cannot be noted, the state stays tied to this thread's id.
  if (new_to_this_thread) {
    state->stack =
        current_stack_bounds(wait_stack_reserve);  // a state handed back by an exited thread had its stack
    state->tid.store(static_cast<int>(::gettid()), std::memory_order_relaxed);
    static_cast<void>(hand_back_at_exit(id, state));
  }
  thread_cache = {id, state};
  return *state;
}

ThreadState* ContextImpl::make_thread_state(
    std::unordered_map<std::thread::id, ThreadState*>::iterator entry) {
  const std::size_t index = thread_count.load(std::memory_order_relaxed);
  if (index == max_threads) {
    threads_by_id.erase(entry);
    throw Error(ErrorCode::invalid_argument,
                fmt::format("more than {} application threads are using this nerve context at once",
                            max_application_threads));
  }
  // Every allocation comes first: a bad_alloc there leaves the thread unregistered, not registered
  // with no state (a later call would dereference it).
  std::unique_ptr<ThreadState> owned;
  try {
    owned = std::make_unique<ThreadState>();
    if (thread_storage.size() == thread_storage.capacity())
      thread_storage.reserve(2 * thread_storage.size() + 8);
    released_states.reserve(thread_storage.capacity());  // take_back_thread_state() cannot fail
    records.register_cache(owned->records);
  } catch (...) {
    threads_by_id.erase(entry);
    throw;
  }
  ThreadState* state = owned.get();
  thread_storage.push_back(std::move(owned));  // the room is reserved: cannot throw
  state->context = this;
  if (!reference_shards_closed) {  // the shard's own reference (release_owner() closes it)
    state->shared_references.store(shard_open_bias, std::memory_order_relaxed);
    add_external_reference();
  }
  state->random_state ^= static_cast<std::uint64_t>(index + 1) * 0x9E3779B97F4A7C15ull;
  thread_list[index].store(state, std::memory_order_relaxed);
  thread_count.store(index + 1, std::memory_order_release);
  return state;
}

void ContextImpl::take_back_thread_state(ThreadState* state) noexcept {
  std::lock_guard lock(threads_mutex);
  const auto it = threads_by_id.find(std::this_thread::get_id());
  if (it == threads_by_id.end() || it->second != state) return;
  threads_by_id.erase(it);
  released_states.push_back(state);  // room reserved when the state was made
}

const ThreadState* ContextImpl::registered_thread() noexcept {
  if (thread_cache.context_id == id) return thread_cache.state;
  std::lock_guard lock(threads_mutex);
  const auto it = threads_by_id.find(std::this_thread::get_id());
  return it != threads_by_id.end() ? it->second : nullptr;
}

ThreadState& ContextImpl::create_worker_state(unsigned /*slot*/) { return current_thread(); }

}  // namespace nerve::detail
