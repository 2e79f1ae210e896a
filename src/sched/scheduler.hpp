// scheduler.hpp — CPU worker slots, task placement, work finding, stealing, idling and waking.
//
// Placement (enqueue):
//  - A task submitted by a thread that runs a slot goes to that slot's deque (LIFO for the owner,
//    stolen FIFO by others) — unless the policy sends it elsewhere: under `eager` tasks from outside
//    and tasks released by dependencies go to one shared FIFO; under `locality_aware_stealing` a
//    task whose data lives on another NUMA node (scheduler.numa_affinity) goes to a worker there.
//  - A task submitted by a thread without a slot goes to the inbox (per-device ready queue) of a slot
//    chosen round-robin, or the shared FIFO under `eager`. A full inbox back-pressures the submitter.
// Work finding: own deque, own inbox, the shared FIFO (eager), then — once the slot has been idle for
// scheduler.work_stealing_threshold — other slots' deques and inboxes in victim order (topology
// distance under locality_aware_stealing with topology_awareness, random otherwise; same NUMA node
// only under numa_affinity: strict).
// Idling: spin for scheduler.spin_us, then sleep on the thread's Parker. Sleepers announce
// themselves (sleeping flag + sleepers count, seq_cst) before re-checking for work; publishers
// publish, issue a seq_cst fence, then check for sleepers — so no wake-up is ever lost (Dekker).
//
// Waiting: a thread that runs a slot waits by running other tasks (run_until); the master slot (0)
// is claimed by an application thread for the duration of a wait; other application threads park.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "nerve/config.hpp"
#include "nerve/topology.hpp"

#include "sched/priority_queue.hpp"
#include "sched/ready_queue.hpp"
#include "sched/thread_state.hpp"
#include "sched/waiter_registry.hpp"
#include "sched/worker_slot.hpp"
#include "topology/affinity.hpp"
#include "util/fork_generation.hpp"

namespace nerve::detail {

// What the scheduler needs from the runtime that owns it.
class TaskExecutor {
 public:
  virtual void execute(TaskRecord* task, ThreadState& thread) = 0;
  virtual ThreadState& create_worker_state(unsigned slot) = 0;
  // on_slot_idle() is called when a slot runs out of work (for waking wait_all() waiters).
  virtual void on_slot_idle() noexcept = 0;
  // may_help(): whether a submitter back-pressured by a full queue may run tasks, or wait for room:
  // not while it holds a buffer mapping (a task run there that maps the same data would be refused,
  // where a queued one waits for the unmap, and the queued tasks may wait for that unmap).
  virtual bool may_help(ThreadState& thread) = 0;
  // forked_inside_a_task(): the calling thread is the one that forked this process, inside a task body
  // (of any context): back in a scheduler made before the fork, nothing of the parent's runs for it.
  virtual bool forked_inside_a_task() noexcept = 0;

 protected:
  ~TaskExecutor() = default;
};

using Clock = std::chrono::steady_clock;

// A Waitable that declares `may_be_hopeless = true` has parking() and resumed() (see Scheduler::wait).
template <class Waitable>
constexpr bool may_be_hopeless = requires {
  requires Waitable::may_be_hopeless;
};

class Scheduler {
 public:
  Scheduler(const Config& config, const Topology& topology, TaskExecutor& executor);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // start() launches the dedicated worker threads (slots 1..); stop() joins them. stop() requires
  // that no task is queued or running.
  void start();
  void stop();

  unsigned slot_count() const noexcept { return static_cast<unsigned>(slots_.size()); }
  WorkerSlot& slot(unsigned index) noexcept { return *slots_[index]; }
  const WorkerSlot& slot(unsigned index) const noexcept { return *slots_[index]; }
  SchedulerPolicy policy() const noexcept { return policy_; }
  bool numa_placement() const noexcept { return numa_placement_; }
  WaiterRegistry& waiters() noexcept { return waiters_; }
  const ReadyQueue& shared_queue() const noexcept { return shared_; }

  // enqueue() makes a ready task runnable. `submission`: a new task from `thread`, which may be
  // back-pressured by full queues (the thread helps or blocks); otherwise an internal release, which
  // never blocks. `numa_node` is the node the task should run on, or -1.
  void enqueue(TaskRecord* task, ThreadState& thread, bool submission, int numa_node);
  // enqueue_spawned(): enqueue() of a new task with no node to run on — a fork-join spawn. One of
  // normal priority, not compute-intensive, submitted inside a slot goes on top of the slot's own
  // deque, as enqueue() would put it, without enqueue()'s call and tests (W2 runs one per task).
  void enqueue_spawned(TaskRecord* task, ThreadState& thread) {
    WorkerSlot* own = thread.slot;
    if (own != nullptr && task->priority == 0 && !task->compute_intensive &&
        (policy_ != SchedulerPolicy::eager || thread.nesting > 0)) [[likely]] {
      if (own->deque.push(task)) notify_work(own, -1);
      return;
    }
    enqueue(task, thread, true, -1);
  }

  // A Waitable has done(), before_park() (make the completer notice this waiter), after_park(),
  // address() (the registry key) and, optionally, parking() and resumed() (may_be_hopeless): an
  // untimed wait inside a task that finds no work to run and whose parking() says it is hopeless
  // returns false, not done (see run_until).
  // wait() runs tasks while waiting if `thread` runs a slot or can claim the master slot, else parks.
  // Returns false if `deadline` passed first. A timed wait runs no task while other slots can (see
  // below), unless `help` (a wait cut in slices, not a timeout).
  template <class Waitable>
  bool wait(ThreadState& thread, Waitable& target, Clock::time_point deadline = Clock::time_point::max(),
            bool help = false);

  // higher_priority_waiting(): a ready task of positive priority is queued where slot 0 takes work
  // (the submitter's back-pressure then runs it before any spawn of its own).
  bool higher_priority_waiting();
  // help_once() runs one task if the thread runs (or can claim) a slot; false if it found none.
  bool help_once(ThreadState& thread);
  // run_if_newest() runs `task` on this thread if it is the newest entry of the thread's own deque
  // (just pushed there and not stolen); false otherwise, leaving the deque as it was. Running only
  // that task keeps the stack as deep as the task tree, like an undeferred OpenMP task.
  bool run_if_newest(ThreadState& thread, const TaskRecord* task);

  // relieve_master() bounds what an application thread leaves in the master slot's deque: once it
  // holds more than task_queue.per_device_queue_depth tasks, the submitter runs the newest ones itself until
  // half remain (the back-pressure that key promises; the tasks it runs are cache-hot and need no
  // steal). Threads that run a slot are not affected: their own deques are bounded by their waits.
  void relieve_master(ThreadState& thread);
  // claim_master_for_spawn() takes the master slot for one fork-join spawn of an application thread to
  // run at once (ContextImpl::begin_spawn): false unless the queue relieve_master() bounds holds more
  // than `above` tasks and slot 0 is free. The caller gives it back with release_master(thread, false):
  // it took nothing from the submitter's deque, whose tasks the workers were told about as they came.
  bool claim_master_for_spawn(ThreadState& thread, std::size_t above) noexcept;
  // queue_depth(): task_queue.per_device_queue_depth, the depth relieve_master() keeps;
  // relieved_deque(): the queue it bounds for `thread`.
  std::size_t queue_depth() const noexcept { return queue_depth_; }
  ChaseLevDeque<TaskRecord*>& relieved_deque(const ThreadState& thread) noexcept;
  void release_master(ThreadState& thread, bool popped_submitter_deque = true) noexcept;
  // master_free(): no thread holds slot 0 at this moment.
  bool master_free() const noexcept;

  // Worker statistics for tests and nerve-info.
  std::uint64_t total_steals() const noexcept;

  // A thread without a slot parked this long while every slot's thread is blocked in a task body and
  // no slot begins a task says that its wait may never end (once in the scheduler's life; tests
  // shorten it): the bodies may wait for it, or for what it must do next.
  std::chrono::milliseconds stalled_wait_warning{5000};

 private:
  // The tasks the slots have begun (a slot counts a task as it starts it).
  std::uint64_t tasks_begun() const noexcept;
  // check_stall(): warns (once) when no slot has begun a task since `thread`'s watch began,
  // stalled_wait_warning ago, every slot is taken, none idle, and none of their threads is running
  // (all blocked: a long computation is not a stall); else starts the watch again from `now`.
  void check_stall(ThreadState& thread, Clock::time_point now) noexcept;
  bool slot_threads_all_blocked() const noexcept;
  std::atomic<bool> stalled_wait_warned_{false};
  struct IdleState {
    WorkerSlot* slot = nullptr;  // for time accounting (null: not accounted)
    bool idle = false;
    bool spinning = false;
    Clock::time_point since{};    // spinning since (reset after each sleep)
    Clock::time_point started{};  // idle since
    bool slept = false;           // has slept since it last found work (see sleep_slot)
  };
  // Accounts the time a slot is run by its outermost run_until (a nested wait adds nothing).
  struct ActiveSpan {
    WorkerSlot& slot;
    const bool outermost;
    explicit ActiveSpan(WorkerSlot& s) noexcept;
    ~ActiveSpan();
  };

  void worker_main(unsigned index);
  // `sliced`: an untimed wait cut in slices (help), which parks listed as an untimed one does.
  template <class Waitable>
  bool run_until(ThreadState& thread, Waitable& target, Clock::time_point deadline, bool sliced = false);
  template <class Waitable>
  bool park_until(ThreadState& thread, Waitable& target, Clock::time_point deadline, bool help = true);
  // sleep_slot(): true when a publisher woke the slot (wake_slot() counted it in waking_).
  template <class Waitable>
  bool sleep_slot(ThreadState& thread, WorkerSlot& slot, Waitable& target, Clock::time_point deadline,
                  bool first);

  TaskRecord* find_work(ThreadState& thread, WorkerSlot& slot, IdleState& idle);
  TaskRecord* steal(ThreadState& thread, WorkerSlot& slot);
  bool has_work_for(const WorkerSlot& slot) const noexcept;
  // stealable_work(): the submitter's deque or one of `slot`'s victims' queues holds a task.
  bool stealable_work(const WorkerSlot& slot) const noexcept;
  void enter_idle(IdleState& idle) noexcept;
  void leave_idle(IdleState& idle) noexcept;
  // run() executes `task` and returns the successor it released for this thread to run next (or
  // nullptr); requeue() puts such a successor back when the caller stops running tasks.
  TaskRecord* run(TaskRecord* task, ThreadState& thread, WorkerSlot& slot);
  void requeue(TaskRecord* task, WorkerSlot& slot);

  bool try_claim_master(ThreadState& thread) noexcept;
  // owns_submitter_deque(): true for the one application thread that owns submitter_deque_ (the
  // first to submit outside a slot); decided once per thread.
  bool owns_submitter_deque(ThreadState& thread) noexcept;

  void push_to_slot_inbox(TaskRecord* task, ThreadState& thread, bool submission, int numa_node);
  void push_shared(TaskRecord* task, ThreadState& thread, bool submission);
  // back_pressure(): one round of waiting for room in a full queue; `full_since` is when this
  // submission first found every queue full (zero before the first round). False when the submitter
  // may neither help nor wait (TaskExecutor::may_help): the queue then grows past its depth.
  bool back_pressure(ThreadState& thread, Clock::time_point& full_since);
  // notify_work(): after publishing a task reachable by any slot (near `origin`, or for NUMA node
  // `numa_node` when >= 0), wake a sleeper unless a spinner will find it.
  void notify_work(const WorkerSlot* origin, int numa_node) noexcept;
  bool wake_slot(WorkerSlot& slot) noexcept;
  bool may_run_on(const WorkerSlot& slot, int numa_node) const noexcept;
  // serves_its_node(): slot `index` serves its NUMA node (slots_by_node_, the node queues). Slot 0 is
  // the application thread's, which runs tasks only while it waits: it serves no node while other
  // slots exist. Counted, tasks whose data lived on its node waited for a waiter under strict
  // affinity, and Task::wait_for() timed out, as no worker of another node takes them.
  bool serves_its_node(unsigned index) const noexcept { return index != 0 || placements_.size() == 1; }
  bool has_workers_on(int numa_node) const noexcept {
    return static_cast<std::size_t>(numa_node) < slots_by_node_.size() &&
           !slots_by_node_[static_cast<std::size_t>(numa_node)].empty();
  }
  void compute_victims();
  // abandon_forked_child(): the thread of a child forked inside a task body, about to sleep in the
  // parent's scheduler (the body returned, or used the parent's context), where no thread of the
  // parent runs: says so and exits rather than wait for ever.
  [[noreturn]] static void abandon_forked_child() noexcept;

  TaskExecutor& executor_;
  const SchedulerPolicy policy_;
  const NumaAffinity numa_affinity_;
  const bool topology_awareness_;
  const bool numa_placement_;  // numa_affinity != none and more than one NUMA node
  const std::chrono::nanoseconds spin_;
  const std::chrono::nanoseconds steal_threshold_;
  const Topology& topology_;
  std::vector<topology::WorkerPlacement> placements_;
  const bool bind_threads_;
  const std::uint64_t made_in_ = fork_generation();  // the process whose threads these slots are
  std::atomic_flag bind_warned_;                     // one warning for all workers that fail to bind
  std::vector<std::unique_ptr<WorkerSlot>> slots_;
  std::vector<std::vector<unsigned>> slots_by_node_;
  ReadyQueue shared_;          // eager's FIFO
  PriorityQueue prioritized_;  // ready tasks with a priority other than normal
  // Under strict NUMA affinity (locality_aware_stealing, heft): a priority queue per NUMA node, for
  // prioritized tasks whose data lives on a node with workers; only that node's workers serve it.
  // Empty otherwise.
  std::vector<std::unique_ptr<PriorityQueue>> node_prioritized_;
  // The node queue each slot serves besides prioritized_ (by slot index; nullptr for a slot that
  // serves no node). Empty unless node_prioritized_ is not: the common case costs one test.
  std::vector<PriorityQueue*> slot_node_queue_;
  PriorityQueue* node_priorities(const WorkerSlot& slot) const noexcept {
    return slot_node_queue_.empty() ? nullptr : slot_node_queue_[slot.index];
  }
  static bool any_prioritized(const PriorityQueue& global, const PriorityQueue* local) noexcept {
    return global.maybe_nonempty() || (local != nullptr && local->maybe_nonempty());
  }
  bool prioritized_for(const WorkerSlot& slot) const noexcept {
    return any_prioritized(prioritized_, node_priorities(slot));
  }
  // pop_prioritized(): the highest-priority task of at least `minimum` among prioritized_ and
  // `local` (may be nullptr), or nullptr.
  TaskRecord* pop_prioritized(PriorityQueue* local, std::int32_t minimum);
  // The deque of the application thread that submits most (in practice: the first to submit from
  // outside a slot). It pushes there with plain stores, where borrowing the master slot's deque
  // costs a compare-and-swap and a release store per task (oneTBB likewise keeps a slot for its
  // external thread). It pops there while it waits; everyone else steals. It is owned for the
  // context's life: an owner that exits leaves its tasks stealable, and other threads borrow the
  // master slot as before.
  // Workers steal from it in batches (submitter_batch at most, half of what it holds): one thread
  // feeding all the others would otherwise move its deque's lines to a thief once per task.
  static constexpr std::size_t submitter_batch = 16;
  ChaseLevDeque<TaskRecord*> submitter_deque_{256, submitter_batch};
  std::size_t queue_depth_ = 0;       // the master inbox's capacity
  std::atomic_flag submitter_taken_;  // set by the owner's first submission
  WaiterRegistry waiters_;
  static constexpr std::chrono::milliseconds first_sleep_bound{1};
  // How often a wait inside a task, parked for want of work, checks again for a cycle of waits.
  static constexpr std::chrono::milliseconds stuck_wait_recheck{50};
  // How long a submission that finds every queue full leaves the woken workers to take the tasks
  // before it runs one itself: a little more than a futex wake-up takes on a busy machine.
  static constexpr std::chrono::microseconds back_pressure_grace{200};
  alignas(cache_line_size) std::atomic<int> sleepers_{0};
  alignas(cache_line_size) std::atomic<int> spinners_{0};
  // Slots woken by wake_slot() that have not yet begun to spin: neither sleepers nor spinners, but
  // about to look for work (back_pressure() leaves them the tasks it queued).
  alignas(cache_line_size) std::atomic<int> waking_{0};
  alignas(cache_line_size) std::atomic<bool> stopping_{false};
  std::atomic<unsigned> workers_ready_{0};
  bool started_ = false;
};

// --- template definitions -------------------------------------------------------------------------

template <class Waitable>
bool Scheduler::wait(ThreadState& thread, Waitable& target, Clock::time_point deadline, bool help) {
  if (target.done()) return true;
  const bool timed = deadline != Clock::time_point::max();
  if (timed) {
    // A timed wait does not run tasks while other workers can: a task it took could run past the
    // deadline, and wait_for() would answer long after its timeout. With a single slot nobody else
    // would run them, so there it helps, overrunning by at most the task it runs (see run_until) —
    // and a deadline already past runs one task at most, so that a loop polling wait_for(0) still
    // gets its work done. Elsewhere a deadline already past only polls.
    if (Clock::now() >= deadline) {
      if (slot_count() == 1 && help_once(thread)) return target.done();
      return false;
    }
    if (slot_count() > 1 && !help) return park_until(thread, target, deadline, false);
  }
  if (thread.slot != nullptr) {
    // Fork-join fast path: what a task waits for is usually on top of its own deque (it just
    // spawned it), so pop and run that before setting up the general loop — unless tasks with a
    // priority are waiting, which the general loop serves first. Not for a timed wait: it runs
    // successors without reading the clock.
    if constexpr (!Waitable::expensive) {
      if (!timed) {
        WorkerSlot& slot = *thread.slot;
        while (!prioritized_for(slot)) {
          TaskRecord* task = slot.deque.pop();
          if (task == nullptr) break;
          do {
            task = run(task, thread, slot);
          } while (task != nullptr);
          if (target.done()) return true;
        }
      }
    }
    return run_until(thread, target, deadline, help);
  }
  if (try_claim_master(thread)) {
    struct Release {
      Scheduler& scheduler;
      ThreadState& thread;
      ~Release() { scheduler.release_master(thread); }
    } release{*this, thread};
    return run_until(thread, target, deadline, help);
  }
  return park_until(thread, target, deadline);
}

template <class Waitable>
bool Scheduler::run_until(ThreadState& thread, Waitable& target, Clock::time_point deadline, bool sliced) {
  WorkerSlot& slot = *thread.slot;
  const ActiveSpan span(slot);
  IdleState idle;
  idle.slot = &slot;
  // An expensive done() (wait_all scans every thread's counters) is checked every 64 tasks and
  // whenever no work is found, a cheap one before every task.
  std::uint32_t tasks_since_check = 0;
  TaskRecord* next = nullptr;  // a successor handed over by the task just run
  while (true) {
    if (!Waitable::expensive || tasks_since_check == 0) {
      if (target.done()) break;
    }
    if (TaskRecord* task = next != nullptr ? std::exchange(next, nullptr) : find_work(thread, slot, idle)) {
      if (idle.idle) {
        leave_idle(idle);
        // A spinner that found work was the reason publishers did not wake anyone: if more work
        // is visible and nobody else is spinning, pass the baton to a sleeper.
        if (spinners_.load(std::memory_order_relaxed) == 0 && has_work_for(slot)) notify_work(&slot, -1);
      }
      tasks_since_check = (tasks_since_check + 1) & 63;
      next = run(task, thread, slot);
      // A timed wait reads the clock after every task: it may overrun its deadline by the task it
      // ran, not by more, and a wait cut in slices comes back between them while work never runs out.
      if (deadline != Clock::time_point::max() && Clock::now() >= deadline) {
        if (next != nullptr) requeue(std::exchange(next, nullptr), slot);
        leave_idle(idle);
        return target.done();
      }
      continue;
    }
    tasks_since_check = 0;
    if (Waitable::expensive && target.done()) break;
    const auto now = Clock::now();
    if (now >= deadline) {
      leave_idle(idle);
      return target.done();
    }
    if (!idle.idle) {
      enter_idle(idle);
      continue;
    }
    if (now - idle.since < spin_) {
      for (int i = 0; i < 32; ++i) cpu_relax();
      continue;
    }
    // A wait inside a task that finds nothing to run may be waiting for a task suspended below it on
    // this very stack, which cannot resume before it returns, or for one below a wait on another
    // thread that waits for this one: such a wait would never end. It returns, not done, for its
    // caller to say so (Waitable::parking(), asked only here: waits that end pay nothing; it lists
    // the wait for other threads' checks until resumed()). Not for a timed wait, which ends at its
    // deadline — but for an untimed one cut in slices, whose caller looks again between them.
    Clock::time_point wake_by = deadline;
    if constexpr (may_be_hopeless<Waitable>) {
      if ((deadline == Clock::time_point::max() || sliced) && thread.nesting + thread.map_waits > 0) {
        if (target.parking(thread)) {
          leave_idle(idle);
          return target.done();
        }
        // A cycle closed after the check (by a submission that orders work a parked wait waits for
        // behind a task on another parked wait's stack) is found at a later one.
        if (target.listed()) wake_by = std::min(wake_by, Clock::now() + stuck_wait_recheck);
      }
    }
    // A sleeper must not count as a spinner: publishers skip waking anyone while a spinner exists.
    if (idle.spinning) spinners_.fetch_sub(1, std::memory_order_acq_rel);
    const bool woken = sleep_slot(thread, slot, target, wake_by, !idle.slept);
    if constexpr (may_be_hopeless<Waitable>) target.resumed();
    idle.slept = true;
    spinners_.fetch_add(1, std::memory_order_acq_rel);
    if (woken) waking_.fetch_sub(1, std::memory_order_acq_rel);  // counted as a spinner now
    idle.spinning = true;
    idle.since = Clock::now();  // spin again before the next sleep
  }
  if (next != nullptr) requeue(next, slot);
  leave_idle(idle);
  return true;
}

template <class Waitable>
bool Scheduler::sleep_slot(ThreadState& thread, WorkerSlot& slot, Waitable& target,
                           Clock::time_point deadline, bool first) {
  // Announce, then re-check: a publisher that misses the announcement published before it, and the
  // re-check sees its task (both sides order their two steps with seq_cst).
  sleepers_.fetch_add(1, std::memory_order_seq_cst);
  slot.sleeping.store(true, std::memory_order_seq_cst);
  // The re-check's loads are acquire or relaxed: without a fence they may be ordered before the
  // announcement (not on x86, where the seq_cst store is a full barrier, but on weaker machines).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  waiters_.add(target.address(), &thread.parker);
  target.before_park();
  if (!target.done() && !has_work_for(slot)) {
    WorkerSlot::bump(slot.stats.sleeps);
    if (fork_generation() != made_in_ && executor_.forked_inside_a_task()) [[unlikely]]
      abandon_forked_child();
    if (deadline == Clock::time_point::max()) {
      // The first sleep after finding work is bounded. A deque's push reads top without a fence
      // after storing bottom (a fence per push costs W1 a third of its speed), so the push that
      // refilled the deque this slot just emptied may have seen it non-empty and woken nobody,
      // while the re-check above read bottom before that store was visible. That store is
      // visible within microseconds: one bounded sleep of the thief finds the task. Later sleeps
      // follow no steal of this slot's and are unbounded (an idle runtime does not poll). Not
      // covered: a thief that blocks inside the task it took, outside nerve, while every other
      // slot already sleeps; the task then waits for the next thread that looks (at the latest
      // its submitter's next wait, or the next push that finds the deque empty).
      if (first) {
        thread.parker.park(first_sleep_bound);
      } else {
        thread.parker.park();
      }
    } else {
      const auto remaining = deadline - Clock::now();
      thread.parker.park(first ? std::min<Clock::duration>(remaining, first_sleep_bound) : remaining);
    }
  }
  target.after_park();
  waiters_.remove(target.address(), &thread.parker);
  if (!slot.sleeping.exchange(false, std::memory_order_acq_rel)) return true;  // wake_slot() took it
  sleepers_.fetch_sub(1, std::memory_order_acq_rel);
  return false;
}

template <class Waitable>
bool Scheduler::park_until(ThreadState& thread, Waitable& target, Clock::time_point deadline, bool help) {
  // The stall watch begins at the first park (a wait whose target is done reads no slot's counters),
  // or goes on from a wait that ended just now (a wait_for polled in a loop).
  struct Watch {
    ThreadState& thread;
    bool on = false;
    ~Watch() {
      if (on) thread.stall_seen = Clock::now();
    }
  } watch{thread};
  while (!target.done()) {
    const Clock::time_point now = Clock::now();
    if (now >= deadline) return false;
    if (!watch.on) {
      watch.on = true;
      if (now - thread.stall_seen > std::chrono::milliseconds(10)) {
        thread.stall_since = now;
        thread.stall_begun = tasks_begun();
      }
    } else if (now - thread.stall_since >= stalled_wait_warning) [[unlikely]] {
      check_stall(thread, now);
    }
    waiters_.add(target.address(), &thread.parker);
    target.before_park();
    if (!target.done()) {
      // Bounded so that a thread blocked here retries the master slot now and then: the master
      // may have left, and with a single worker slot nobody else would run its tasks.
      const auto remaining = deadline - Clock::now();
      thread.parker.park(std::min<Clock::duration>(remaining, std::chrono::milliseconds(1)));
    }
    target.after_park();
    waiters_.remove(target.address(), &thread.parker);
    if (help && !target.done() && try_claim_master(thread)) {
      const bool finished = run_until(thread, target, deadline);
      release_master(thread);
      return finished;
    }
  }
  return true;
}

}  // namespace nerve::detail
