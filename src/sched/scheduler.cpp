#include "sched/scheduler.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include <unistd.h>

#include <fmt/format.h>

#include "topology/affinity.hpp"
#include "util/log.hpp"
#include "util/start_thread.hpp"

namespace nerve::detail {
namespace {

// Waitable for the worker threads' main loop: "the scheduler is stopping".
struct StopSignal {
  static constexpr bool expensive = false;
  const std::atomic<bool>& stopping;
  bool done() const noexcept { return stopping.load(std::memory_order_acquire); }
  void before_park() noexcept {}
  void after_park() noexcept {}
  const void* address() const noexcept { return &stopping; }
};

TaskRecord* as_task(QueueLink* link) noexcept { return static_cast<TaskRecord*>(link); }

unsigned slot_count_for(const Config& config, const Topology& topology) {
  return config.parallel.thread_pool_size != 0 ? config.parallel.thread_pool_size
                                               : topology::default_worker_count(topology);
}

}  // namespace

Scheduler::Scheduler(const Config& config, const Topology& topology, TaskExecutor& executor)
    : executor_(executor),
      policy_(config.scheduler.policy),
      numa_affinity_(config.scheduler.numa_affinity),
      topology_awareness_(config.scheduler.topology_awareness),
      numa_placement_(config.scheduler.numa_affinity != NumaAffinity::none &&
                      topology.numa_nodes().size() > 1),
      spin_(config.scheduler.spin),
      steal_threshold_(config.scheduler.work_stealing_threshold),
      topology_(topology),
      placements_(topology::plan_workers(topology, slot_count_for(config, topology),
                                         config.parallel.thread_affinity)),
      bind_threads_(config.parallel.thread_affinity != ThreadAffinity::none && !topology.synthetic()),
      shared_(QueueType::mutex, config.task_queue.per_device_queue_depth) {
  const auto count = static_cast<unsigned>(placements_.size());
  const auto& placements = placements_;
  slots_by_node_.resize(std::max<std::size_t>(1, topology.numa_nodes().size()));
  for (unsigned i = 0; i < count; ++i) {
    slots_.push_back(
        std::make_unique<WorkerSlot>(i, config.task_queue.type, config.task_queue.per_device_queue_depth));
    WorkerSlot& slot = *slots_.back();
    slot.core = placements[i].core;
    slot.numa_node = std::max(0, placements[i].numa_node);
    if (serves_its_node(i))
      slots_by_node_[static_cast<std::size_t>(slot.numa_node) % slots_by_node_.size()].push_back(i);
  }
  // The combination is contradictory on any machine (CONFIG.md promises the warning without condition).
  if (numa_affinity_ == NumaAffinity::strict && policy_ == SchedulerPolicy::eager) {
    log::warn(
        "scheduler.numa_affinity strict has no effect under scheduler.policy eager (first come, "
        "first served); use locality_aware_stealing or heft to keep tasks on their data's node");
  }
  if (numa_placement_ && numa_affinity_ == NumaAffinity::strict && policy_ != SchedulerPolicy::eager) {
    slot_node_queue_.assign(slots_.size(), nullptr);
    for (const auto& serving : slots_by_node_) {
      node_prioritized_.push_back(std::make_unique<PriorityQueue>());
      // A slot that serves no node (the application thread's, with workers elsewhere) gets none.
      for (unsigned index : serving) slot_node_queue_[index] = node_prioritized_.back().get();
    }
  }
  if (numa_placement_ && numa_affinity_ == NumaAffinity::strict) {
    for (std::size_t node = 0; node < slots_by_node_.size(); ++node) {
      if (!slots_by_node_[node].empty()) continue;
      // A node without cores (memory only: HBM, CXL) cannot have a worker, whatever the pool size.
      const bool memory_only =
          node < topology.numa_nodes().size() && topology.numa_nodes()[node].cores.empty();
      log::warn(
          "scheduler.numa_affinity strict: NUMA node {} has no worker ({}); tasks whose data lives "
          "there run on any worker",
          node,
          memory_only ? std::string("it has no cores: memory only")
                      : fmt::format("parallel.thread_pool_size {}", count));
    }
  }
  queue_depth_ = slots_[0]->inbox.capacity();
  compute_victims();
}

Scheduler::~Scheduler() { stop(); }

// Victim order per slot. Under locality_aware_stealing with topology awareness: by core distance,
// ties rotated by the thief's index so that equidistant thieves do not all start at one victim.
// Otherwise a per-slot random permutation (the thief also starts at a random point each round).
void Scheduler::compute_victims() {
  const bool by_distance = policy_ != SchedulerPolicy::eager && topology_awareness_;  // heft too
  std::mt19937 random(12345);
  for (auto& slot : slots_) {
    std::vector<unsigned> victims;
    for (auto& other : slots_) {
      if (other.get() == slot.get()) continue;
      if (numa_affinity_ == NumaAffinity::strict && numa_placement_ && policy_ != SchedulerPolicy::eager &&
          other->numa_node != slot->numa_node)
        continue;
      victims.push_back(other->index);
    }
    if (by_distance) {
      const unsigned n = slot_count();
      std::stable_sort(victims.begin(), victims.end(), [&](unsigned a, unsigned b) {
        const int da = topology_.distance(slot->core, slots_[a]->core);
        const int db = topology_.distance(slot->core, slots_[b]->core);
        if (da != db) return da < db;
        return (a + n - slot->index) % n < (b + n - slot->index) % n;
      });
    } else {
      std::shuffle(victims.begin(), victims.end(), random);
    }
    slot->victims = std::move(victims);
  }
}

void Scheduler::start() {
  if (started_) return;
  started_ = true;
  for (unsigned i = 1; i < slot_count(); ++i) {
    try {
      slots_[i]->thread = start_thread(
          fmt::format("worker thread {} of {} ({} worker slots with the calling thread's: a smaller "
                      "parallel.thread_pool_size needs fewer)",
                      i, slot_count() - 1, slot_count()),
          [this, i] { worker_main(i); });
    } catch (...) {
      // The workers already running use the context: they are joined before the caller unwinds it.
      stop();
      throw;
    }
  }
  // Return only once every worker is bound and listening: statistics, binding checks and the first
  // submissions then see the pool as configured.
  while (workers_ready_.load(std::memory_order_acquire) != slot_count() - 1) std::this_thread::yield();
}

void Scheduler::stop() {
  if (!started_) return;
  stopping_.store(true, std::memory_order_seq_cst);
  for (auto& slot : slots_) wake_slot(*slot);
  waiters_.wake(&stopping_);
  for (auto& slot : slots_) {
    if (slot->thread.joinable()) slot->thread.join();
  }
  started_ = false;
}

void Scheduler::worker_main(unsigned index) {
  WorkerSlot& slot = *slots_[index];
  ThreadState& thread = executor_.create_worker_state(index);
  thread.slot = &slot;
  thread.is_worker_thread = true;
  slot.occupant.store(&thread, std::memory_order_release);
  if (bind_threads_) slot.bound = topology::bind_current_thread(placements_[index], topology_, bind_warned_);
  workers_ready_.fetch_add(1, std::memory_order_release);
  StopSignal stop{stopping_};
  run_until(thread, stop, Clock::time_point::max());
  slot.occupant.store(nullptr, std::memory_order_release);
}

void Scheduler::abandon_forked_child() noexcept {
  // Straight to stderr: the logger's lock may have been held by a thread of the parent at the fork.
  // Nothing is flushed: the stdio buffers hold the parent's unwritten output too, which would be
  // written twice (a child forked in a task body is to _exit, which flushes nothing either).
  std::array<char, 512> text{};
  const int length = std::snprintf(
      text.data(), text.size(),
      "[nerve] error: process %d was forked inside a task body and now waits in its parent's runtime "
      "(the body returned, or used a context of the parent), where no thread of the parent runs: it "
      "would wait for ever, and exits with status 1. A child forked in a task body must exec or _exit "
      "before the body returns (nerve/context.hpp: fork)\n",
      static_cast<int>(getpid()));
  if (length > 0) {
    [[maybe_unused]] const ssize_t written = ::write(
        STDERR_FILENO, text.data(), std::min<std::size_t>(static_cast<std::size_t>(length), text.size() - 1));
  }
  std::_Exit(EXIT_FAILURE);
}

std::uint64_t Scheduler::tasks_begun() const noexcept {
  std::uint64_t begun = 0;
  for (const auto& slot : slots_) begun += slot->stats.tasks_run.load(std::memory_order_relaxed);
  return begun;
}

bool Scheduler::slot_threads_all_blocked() const noexcept {
  for (const auto& slot : slots_) {
    const ThreadState* occupant = slot->occupant.load(std::memory_order_acquire);
    if (occupant == nullptr) return false;
    const int tid = occupant->tid.load(std::memory_order_relaxed);
    // The state is the third field of /proc/self/task/<tid>/stat, after "(name)", which may hold
    // blanks and parentheses: read after the last ')'. R: running or runnable.
    std::array<char, 512> line{};
    const std::string path = fmt::format("/proc/self/task/{}/stat", tid);
    std::FILE* file = std::fopen(path.c_str(), "re");
    if (file == nullptr) return false;  // not known: not said
    const std::size_t got = std::fread(line.data(), 1, line.size() - 1, file);
    std::fclose(file);
    const std::string_view text(line.data(), got);
    const std::size_t name_end = text.rfind(')');
    if (name_end == std::string_view::npos || name_end + 2 >= text.size()) return false;
    if (text[name_end + 2] == 'R') return false;
  }
  return true;
}

void Scheduler::check_stall(ThreadState& thread, Clock::time_point now) noexcept {
  const std::uint64_t begun = tasks_begun();
  // Every slot taken (the master too: else this thread would run tasks in it), none idle, and every
  // slot's thread blocked in the kernel: bodies waiting for something, not computing.
  const bool all_busy = !master_free() && spinners_.load(std::memory_order_acquire) == 0 &&
                        sleepers_.load(std::memory_order_acquire) == 0 &&
                        waking_.load(std::memory_order_acquire) == 0;
  if (begun == thread.stall_begun && all_busy && !stalled_wait_warned_.load(std::memory_order_relaxed)) {
    try {
      if (slot_threads_all_blocked() && !stalled_wait_warned_.exchange(true)) {
        log::warn(
            "a thread without a worker slot has waited {} ms in nerve while all {} slots ran task bodies "
            "blocked outside nerve, and none began another task: if those bodies wait for something (a "
            "future, a barrier, a lock) that needs this thread or the tasks it waits for, this never "
            "ends. Do not block task bodies on work that waits for nerve, or give the context more "
            "slots (parallel.thread_pool_size)",
            std::chrono::duration_cast<std::chrono::milliseconds>(now - thread.stall_since).count(),
            slot_count());
      }
    } catch (...) {  // out of memory for the message: the wait goes on, unannounced
    }
  }
  thread.stall_since = now;
  thread.stall_begun = begun;
}

bool Scheduler::try_claim_master(ThreadState& thread) noexcept {
  WorkerSlot& master = *slots_[0];
  ThreadState* expected = nullptr;
  if (!master.occupant.compare_exchange_strong(expected, &thread, std::memory_order_acq_rel)) return false;
  thread.slot = &master;
  return true;
}

bool Scheduler::owns_submitter_deque(ThreadState& thread) noexcept {
  using Role = ThreadState::SubmitterRole;
  if (thread.submitter_role == Role::undecided) [[unlikely]] {
    thread.submitter_role =
        submitter_taken_.test_and_set(std::memory_order_relaxed) ? Role::other : Role::owner;
  }
  return thread.submitter_role == Role::owner;
}

void Scheduler::release_master(ThreadState& thread, bool popped_submitter_deque) noexcept {
  thread.slot = nullptr;
  WorkerSlot& master = *slots_[0];
  master.occupant.store(nullptr, std::memory_order_release);
  // Tasks left in the master's deque (or the submitter's, which this thread may have been popping)
  // are now only reachable by stealing.
  if (!master.deque.empty() || master.inbox.maybe_nonempty() ||
      (popped_submitter_deque && !submitter_deque_.empty()))
    notify_work(&master, -1);
}

bool Scheduler::help_once(ThreadState& thread) {
  if (stopping_.load(std::memory_order_acquire)) return false;
  const bool claimed = thread.slot == nullptr && try_claim_master(thread);
  if (thread.slot == nullptr) return false;
  IdleState idle;
  idle.idle = true;
  idle.since = Clock::time_point::min();  // allow stealing at once
  TaskRecord* task = find_work(thread, *thread.slot, idle);
  if (task != nullptr) {
    if (TaskRecord* next = run(task, thread, *thread.slot)) requeue(next, *thread.slot);
  }
  if (claimed) release_master(thread);
  return task != nullptr;
}

bool Scheduler::run_if_newest(ThreadState& thread, const TaskRecord* task) {
  WorkerSlot* slot = thread.slot;
  if (slot == nullptr) return false;
  // Only the owner pushes to a deque, so a newest entry equal to `task` is the task itself (its
  // record cannot have been recycled into a task this thread pushed since).
  TaskRecord* newest = slot->deque.pop();
  if (newest == nullptr) return false;
  if (newest != task) {
    slot->deque.push(newest);
    return false;
  }
  TaskRecord* next = newest;
  while (next != nullptr) next = run(next, thread, *slot);
  return true;
}

ChaseLevDeque<TaskRecord*>& Scheduler::relieved_deque(const ThreadState& thread) noexcept {
  // The submitter's own deque, else the master's (which this thread may have filled by borrowing it).
  return thread.submitter_role == ThreadState::SubmitterRole::owner ? submitter_deque_ : slots_[0]->deque;
}

bool Scheduler::master_free() const noexcept {
  return slots_[0]->occupant.load(std::memory_order_acquire) == nullptr;
}

bool Scheduler::claim_master_for_spawn(ThreadState& thread, std::size_t above) noexcept {
  if (thread.submitter_role == ThreadState::SubmitterRole::undecided) return false;
  if (relieved_deque(thread).size() <= above || stopping_.load(std::memory_order_acquire)) return false;
  return try_claim_master(thread);
}

void Scheduler::relieve_master(ThreadState& thread) {
  if (thread.slot != nullptr) return;
  const std::size_t depth = queue_depth_;
  const bool owner = thread.submitter_role == ThreadState::SubmitterRole::owner;
  ChaseLevDeque<TaskRecord*>& deque = relieved_deque(thread);
  // Only a queue past its depth is full: a task just submitted to an empty queue (depth 1) must not
  // run on its submitter, which may be about to do what that task waits for.
  if (deque.size() <= depth || stopping_.load(std::memory_order_acquire)) return;
  while (!try_claim_master(thread)) {
    if (!owner) return;  // the thread waiting in the master slot pops the master deque already
    // It only steals from the submitter's deque, as the workers do: wait until they bring it back
    // to its depth, or until the master slot is free to run tasks in.
    std::this_thread::sleep_for(std::chrono::microseconds(50));
    if (deque.size() <= depth || stopping_.load(std::memory_order_acquire)) return;
  }
  while (deque.size() > depth / 2) {
    // A ready task of positive priority first, as a worker takes it (TaskOptions::priority).
    TaskRecord* task = pop_prioritized(node_priorities(*slots_[0]), 1);
    if (task == nullptr) task = deque.pop();
    if (task == nullptr) break;
    while (task != nullptr) task = run(task, thread, *slots_[0]);
  }
  release_master(thread);
}

bool Scheduler::higher_priority_waiting() {
  const auto waiting = [](PriorityQueue* queue) {
    return queue != nullptr && queue->maybe_nonempty() && queue->has_at_least(1);
  };
  return waiting(&prioritized_) || waiting(node_priorities(*slots_[0]));
}

TaskRecord* Scheduler::run(TaskRecord* task, ThreadState& thread, WorkerSlot& slot) {
  WorkerSlot::bump(slot.stats.tasks_run);
  thread.bypass_enabled = true;
  executor_.execute(task, thread);
  thread.bypass_enabled = false;
  return std::exchange(thread.bypass, nullptr);
}

void Scheduler::requeue(TaskRecord* task, WorkerSlot& slot) {
  if (slot.deque.push(task)) notify_work(&slot, -1);
}

TaskRecord* Scheduler::pop_prioritized(PriorityQueue* local, std::int32_t minimum) {
  if (local == nullptr) return prioritized_.pop(minimum);
  // The higher of the two tops first (ties: the node's own); the other if that one was taken meanwhile.
  std::int32_t global_top = 0;
  std::int32_t local_top = 0;
  const bool has_global = prioritized_.top_priority(global_top);
  const bool has_local = local->top_priority(local_top);
  PriorityQueue* first = has_local && (!has_global || local_top >= global_top) ? local : &prioritized_;
  if (TaskRecord* task = first->pop(minimum)) return task;
  return (first == local ? &prioritized_ : local)->pop(minimum);
}

TaskRecord* Scheduler::find_work(ThreadState& thread, WorkerSlot& slot, IdleState& idle) {
  PriorityQueue* const local = node_priorities(slot);
  const bool prioritized = any_prioritized(prioritized_, local);
  if (prioritized) [[unlikely]] {
    if (TaskRecord* task = pop_prioritized(local, 1)) return task;
  }
  if (TaskRecord* task = slot.deque.pop()) return task;
  if (thread.submitter_role == ThreadState::SubmitterRole::owner) {
    if (TaskRecord* task = submitter_deque_.pop()) return task;
  }
  if (QueueLink* link = slot.inbox.try_pop()) return as_task(link);
  if (policy_ == SchedulerPolicy::eager) {
    if (QueueLink* link = shared_.try_pop()) return as_task(link);
  }
  // Low priorities last: only when nothing else could be found — and not merely because another
  // worker held a queue's consumer role a moment ago (try_pop() then fails with tasks inside), or a
  // steal lost a race with the deque's owner (with tasks left): the caller looks again instead.
  const auto lowest = [&](bool stole) -> TaskRecord* {
    if (!prioritized || slot.inbox.maybe_nonempty() ||
        (policy_ == SchedulerPolicy::eager && shared_.maybe_nonempty()) || (stole && stealable_work(slot)))
      return nullptr;
    return pop_prioritized(local, INT32_MIN);
  };
  if (steal_threshold_.count() > 0) {
    // Measured from when the slot went idle, not from its last sleep: a worker that the stealable
    // work keeps from sleeping (has_work_for) would otherwise restart the clock forever.
    if (!idle.idle || Clock::now() - idle.started < steal_threshold_) return lowest(false);
  }
  if (TaskRecord* task = steal(thread, slot)) return task;
  return lowest(true);
}

TaskRecord* Scheduler::steal(ThreadState& thread, WorkerSlot& slot) {
  if (thread.submitter_role != ThreadState::SubmitterRole::owner) {
    std::array<TaskRecord*, submitter_batch> batch;
    if (const std::size_t count = submitter_deque_.steal_batch(batch); count != 0) {
      WorkerSlot::bump(slot.stats.steals, count);  // tasks taken, as the stats document
      // The rest into this slot's deque, newest first, so that its pops take them oldest first; a
      // thief that finds it empty takes some from there.
      bool was_empty = false;
      for (std::size_t i = count; i-- > 1;) was_empty |= slot.deque.push(batch[i]);
      if (was_empty) notify_work(&slot, -1);
      return batch[0];
    }
  }
  const auto& victims = slot.victims;
  const std::size_t count = victims.size();
  if (count == 0) return nullptr;
  const bool by_distance = policy_ != SchedulerPolicy::eager && topology_awareness_;  // heft too
  const std::size_t start = by_distance ? 0 : static_cast<std::size_t>(thread.next_random() % count);
  for (std::size_t k = 0; k < count; ++k) {
    WorkerSlot& victim = *slots_[victims[(start + k) % count]];
    TaskRecord* task = victim.deque.steal();
    if (task == nullptr) {
      if (QueueLink* link = victim.inbox.try_pop()) task = as_task(link);
    }
    if (task != nullptr) {
      WorkerSlot::bump(slot.stats.steals);
      return task;
    }
  }
  return nullptr;
}

bool Scheduler::stealable_work(const WorkerSlot& slot) const noexcept {
  if (!submitter_deque_.empty()) return true;
  for (unsigned victim : slot.victims) {
    if (!slots_[victim]->deque.empty() || slots_[victim]->inbox.maybe_nonempty()) return true;
  }
  return false;
}

bool Scheduler::has_work_for(const WorkerSlot& slot) const noexcept {
  if (!slot.deque.empty() || slot.inbox.maybe_nonempty() || prioritized_for(slot)) return true;
  if (policy_ == SchedulerPolicy::eager && shared_.maybe_nonempty()) return true;
  return stealable_work(slot);
}

namespace {
std::int64_t to_ns(Clock::time_point time) noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(time.time_since_epoch()).count();
}
}  // namespace

Scheduler::ActiveSpan::ActiveSpan(WorkerSlot& s) noexcept
    : slot(s), outermost(s.stats.active_since.load(std::memory_order_relaxed) == 0) {
  if (outermost) slot.stats.active_since.store(to_ns(Clock::now()), std::memory_order_relaxed);
}

Scheduler::ActiveSpan::~ActiveSpan() {
  if (!outermost) return;
  const std::int64_t since = slot.stats.active_since.load(std::memory_order_relaxed);
  WorkerSlot::bump(slot.stats.active_ns, static_cast<std::uint64_t>(to_ns(Clock::now()) - since));
  slot.stats.active_since.store(0, std::memory_order_relaxed);
}

void Scheduler::enter_idle(IdleState& idle) noexcept {
  idle.idle = true;
  idle.since = Clock::now();
  idle.started = idle.since;
  if (idle.slot != nullptr) idle.slot->stats.idle_since.store(to_ns(idle.started), std::memory_order_relaxed);
  idle.spinning = true;
  spinners_.fetch_add(1, std::memory_order_acq_rel);
  executor_.on_slot_idle();
}

void Scheduler::leave_idle(IdleState& idle) noexcept {
  if (idle.spinning) spinners_.fetch_sub(1, std::memory_order_acq_rel);
  if (idle.idle && idle.slot != nullptr) {
    WorkerSlot& slot = *idle.slot;
    WorkerSlot::bump(
        slot.stats.idle_ns,
        static_cast<std::uint64_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - idle.started).count()));
    slot.stats.idle_since.store(0, std::memory_order_relaxed);
  }
  idle = IdleState{idle.slot};
}

// Under strict affinity a node's tasks go to the slots that serve it, and only those are woken for
// them: woken for a prioritized task of its node, slot 0 found nothing to run (it has no node queue)
// and slept again, while the node's worker slept on with the task: wait_all() hung (a differential test).
bool Scheduler::may_run_on(const WorkerSlot& slot, int numa_node) const noexcept {
  return numa_node < 0 || !numa_placement_ || numa_affinity_ != NumaAffinity::strict ||
         (slot.numa_node == numa_node && serves_its_node(slot.index));
}

void Scheduler::enqueue(TaskRecord* task, ThreadState& thread, bool submission, int numa_node) {
  if (task->priority != 0) [[unlikely]] {
    // Under strict affinity a prioritized task stays on its data's node too (when it has workers).
    if (!node_prioritized_.empty() && numa_node >= 0 && has_workers_on(numa_node)) {
      node_prioritized_[static_cast<std::size_t>(numa_node) % node_prioritized_.size()]->push(task);
      notify_work(thread.slot, numa_node);
      return;
    }
    prioritized_.push(task);
    notify_work(thread.slot, -1);
    return;
  }
  // Under eager data location does not place tasks; a node without workers binds nothing.
  if (numa_node >= 0 && (policy_ == SchedulerPolicy::eager || !has_workers_on(numa_node))) numa_node = -1;
  WorkerSlot* own = thread.slot;
  const bool bound_elsewhere =
      numa_node >= 0 && numa_placement_ && (own == nullptr || own->numa_node != numa_node);
  if (policy_ == SchedulerPolicy::eager) {
    // Nested fork-join stays local; everything else is first come, first served.
    if (own != nullptr && submission && thread.nesting > 0) {
      if (own->deque.push(task)) notify_work(own, -1);
    } else {
      push_shared(task, thread, submission);
    }
    return;
  }
  if (own != nullptr && !bound_elsewhere && !(submission && task->compute_intensive)) {
    // A successor released by the task this thread is finishing runs next on this thread (no queue).
    if (!submission && thread.bypass_enabled && thread.bypass == nullptr) {
      thread.bypass = task;
      return;
    }
    // Wake a sleeper only when the deque turns non-empty: while it holds tasks, a thread that went to
    // sleep saw them in its re-check and did not sleep, or someone is already taking them.
    if (own->deque.push(task)) notify_work(own, numa_node);
    return;
  }
  // The submitting application thread pushes into its own deque (submitter_deque_), others borrow
  // the master slot to push into its deque: one uncontended CAS instead of a shared queue. Workers
  // steal from both, and when the thread later waits it pops its own most recent (cache-hot) tasks.
  // The master slot is returned at once, so no thread ever holds it while outside nerve.
  if (own == nullptr && submission && !bound_elsewhere && !task->compute_intensive) {
    if (owns_submitter_deque(thread)) {
      // The master's occupant may be the only sleeper (a single slot): any slot may be woken.
      if (submitter_deque_.push(task)) notify_work(nullptr, numa_node);
      return;
    }
    if (try_claim_master(thread)) {
      WorkerSlot& master = *thread.slot;
      const bool was_empty = master.deque.push(task);
      thread.slot = nullptr;
      master.occupant.store(nullptr, std::memory_order_release);
      if (was_empty) notify_work(&master, numa_node);
      return;
    }
  }
  push_to_slot_inbox(task, thread, submission, numa_node);
}

void Scheduler::push_shared(TaskRecord* task, ThreadState& thread, bool submission) {
  if (!submission) {
    shared_.push_unbounded(task);
  } else {
    // Once stopped, nobody drains the queue: a late task (cancelled when picked) goes in regardless.
    Clock::time_point full_since{};
    while (!shared_.try_push(task)) {
      if (stopping_.load(std::memory_order_acquire) || !back_pressure(thread, full_since)) {
        shared_.push_unbounded(task);
        break;
      }
    }
  }
  notify_work(thread.slot, -1);
}

// Round-robin over the slots allowed for `numa_node` (all slots when unbound).
void Scheduler::push_to_slot_inbox(TaskRecord* task, ThreadState& thread, bool submission, int numa_node) {
  const bool bound = numa_node >= 0 && numa_placement_;
  const std::vector<unsigned>* candidates =
      bound ? &slots_by_node_[static_cast<std::size_t>(numa_node) % slots_by_node_.size()] : nullptr;
  if (candidates != nullptr && candidates->empty()) candidates = nullptr;
  const std::size_t count = candidates != nullptr ? candidates->size() : slots_.size();
  Clock::time_point full_since{};
  bool past_depth = false;  // back_pressure() refused: the next queue takes it, full or not
  while (true) {
    for (std::size_t attempt = 0; attempt < count; ++attempt) {
      const std::size_t k = thread.placement_cursor++ % count;
      WorkerSlot& target = *slots_[candidates != nullptr ? (*candidates)[k] : k];
      if (!submission || past_depth ||
          stopping_.load(std::memory_order_acquire)) {  // stopped: nobody drains it
        target.inbox.push_unbounded(task);
      } else if (!target.inbox.try_push(task)) {
        continue;
      }
      std::atomic_thread_fence(std::memory_order_seq_cst);
      if (!wake_slot(target)) notify_work(&target, bound ? numa_node : -1);
      return;
    }
    past_depth = !back_pressure(thread, full_since);
  }
}

// Every candidate queue is full. Helping takes one task out of it: when the queue holds no more tasks
// than there are workers woken for them (or spinning), that task is one of theirs, and helping took
// back each task just queued while they were waking (with task_queue.per_device_queue_depth 1 the
// submitter ran nearly every task while the workers went back to sleep). Those workers get a moment
// to take the tasks first. Otherwise, or past that moment, it helps run tasks if it can (a deep
// queue is drained by more hands), else waits a little.
bool Scheduler::back_pressure(ThreadState& thread, Clock::time_point& full_since) {
  if (!executor_.may_help(thread)) return false;
  const int coming = waking_.load(std::memory_order_acquire) + spinners_.load(std::memory_order_acquire);
  if (coming > 0 && static_cast<std::size_t>(coming) >= shared_.capacity()) {  // every queue's depth
    const auto now = Clock::now();
    if (full_since == Clock::time_point{}) full_since = now;
    if (now - full_since < back_pressure_grace) {
      std::this_thread::yield();
      return true;
    }
  }
  if (!help_once(thread)) std::this_thread::sleep_for(std::chrono::microseconds(50));
  return true;
}

void Scheduler::notify_work(const WorkerSlot* origin, int numa_node) noexcept {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_relaxed) == 0) return;
  // Under strict affinity (not eager) nobody steals across nodes: a spinner of another node cannot
  // take this work, whatever node it was placed for, so a spinner is no reason to skip the wake-up.
  const bool restricted = numa_placement_ && numa_affinity_ == NumaAffinity::strict &&
                          (numa_node >= 0 || policy_ != SchedulerPolicy::eager);
  if (!restricted && spinners_.load(std::memory_order_relaxed) > 0) return;
  if (origin != nullptr) {
    for (unsigned victim : origin->victims) {
      WorkerSlot& candidate = *slots_[victim];
      if (may_run_on(candidate, numa_node) && wake_slot(candidate)) return;
    }
  }
  for (auto& candidate : slots_) {
    if (candidate.get() != origin && may_run_on(*candidate, numa_node) && wake_slot(*candidate)) return;
  }
}

bool Scheduler::wake_slot(WorkerSlot& slot) noexcept {
  if (!slot.sleeping.load(std::memory_order_relaxed)) return false;
  // Counted before the exchange: the slot, seeing it lost the exchange, takes the count off.
  waking_.fetch_add(1, std::memory_order_acq_rel);
  if (!slot.sleeping.exchange(false, std::memory_order_acq_rel)) {
    waking_.fetch_sub(1, std::memory_order_acq_rel);
    return false;
  }
  sleepers_.fetch_sub(1, std::memory_order_acq_rel);
  if (ThreadState* occupant = slot.occupant.load(std::memory_order_acquire)) occupant->parker.unpark();
  return true;
}

std::uint64_t Scheduler::total_steals() const noexcept {
  std::uint64_t total = 0;
  for (const auto& slot : slots_) total += slot->stats.steals.load(std::memory_order_relaxed);
  return total;
}

}  // namespace nerve::detail
