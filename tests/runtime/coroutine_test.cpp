// Coroutine tasks: awaiting tasks, groups and child coroutines; suspension without holding workers;
// exceptions; many coroutines at once.
#include "nerve/coroutine.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <coroutine>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>

#include "runtime/context_impl.hpp"
#include "runtime_test.hpp"

namespace nerve::testing {
namespace {

using ::testing::HasSubstr;
using CoroutineTest = RuntimeTest;

CoTask<int> add_later(Context& context, int a, int b) {
  int result = 0;
  co_await context.submit([&] { result = a + b; });
  co_return result;
}

CoTask<> sum_chunks(Context& context, Buffer<int>& data, Buffer<long>& total, std::size_t chunk) {
  for (std::size_t at = 0; at < data.size(); at += chunk) {
    auto part = data.slice(at, std::min(chunk, data.size() - at));
    co_await context.submit(
        [](std::span<int> values) {
          for (int& v : values) v *= 2;
        },
        read_write(part));
    co_await context.submit(
        [](std::span<const int> values, std::span<long> sum) {
          for (int v : values) sum[0] += v;
        },
        read(part), read_write(total));
  }
  const int extra = co_await add_later(context, 1, 2);
  co_await context.submit([extra](std::span<long> sum) { sum[0] += extra; }, read_write(total));
}

TEST_P(CoroutineTest, StreamsChunksThroughTasksInOrder) {
  Buffer<int> data(*context, 1000);
  {
    auto values = data.map_write();
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<int>(i);
  }
  Buffer<long> total(*context, 1);
  total.map_write()[0] = 0;
  Task task = launch(*context, sum_chunks(*context, data, total, 64));
  task.wait();
  EXPECT_EQ(task.status(), TaskStatus::succeeded);
  EXPECT_EQ(total.map_read()[0], 2L * (999L * 1000L / 2) + 3);
  EXPECT_EQ(data.map_read()[10], 20);
}

CoTask<> wait_for_gate(Task gate, std::atomic<int>& suspended, std::atomic<int>& resumed) {
  suspended.fetch_add(1);
  co_await gate;
  resumed.fetch_add(1);
}

TEST_P(CoroutineTest, SuspendedCoroutinesHoldNoWorker) {
  // Far more coroutines than workers suspend on one gate task, which cannot run before the
  // application thread unmaps a buffer — and it does so only once every coroutine has suspended. If a
  // suspended coroutine held a worker, the later ones could never start (with one worker: the
  // second).
  constexpr int coroutines = 200;
  std::atomic<int> suspended{0};
  std::atomic<int> resumed{0};
  Buffer<int> lock(*context, 1);
  auto mapped = lock.map_write();
  Task gate = context->submit([](std::span<const int>) {}, read(lock));
  std::vector<Task> tasks;
  for (int i = 0; i < coroutines; ++i)
    tasks.push_back(launch(*context, wait_for_gate(gate, suspended, resumed)));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (suspended.load() < coroutines && std::chrono::steady_clock::now() < deadline) {
    (void)tasks.back().wait_for(std::chrono::milliseconds(1));  // lends this thread to the workers
  }
  EXPECT_EQ(suspended.load(), coroutines) << "not every coroutine could start and suspend";
  EXPECT_EQ(resumed.load(), 0) << "a coroutine resumed before its gate finished";
  mapped.unmap();
  for (Task& task : tasks) task.wait();
  EXPECT_EQ(resumed.load(), coroutines);
}

CoTask<> throws_after_a_task(Context& context) {
  co_await context.submit([] {});
  throw std::runtime_error("coroutine failed on purpose");
}

TEST_P(CoroutineTest, AnEscapingExceptionFailsItsTask) {
  Task task = launch(*context, throws_after_a_task(*context));
  try {
    task.wait();
    FAIL() << "no exception";
  } catch (const std::runtime_error& error) {
    EXPECT_THAT(error.what(), HasSubstr("on purpose"));
  }
  EXPECT_EQ(task.status(), TaskStatus::failed);
  EXPECT_NO_THROW(context->wait_all()) << "like a failed task's: task.wait() reported it, once";
}

// An unnamed coroutine is unnamed in messages too, like an unnamed task: no "task 'coroutine'".
TEST_P(CoroutineTest, AnUnnamedCoroutinesFailureIsNotGivenAName) {
  Task task = launch(*context, throws_after_a_task(*context));
  Task after = context->submit(TaskOptions{.name = "after", .after = {task}}, [] {});
  try {
    after.wait();
    FAIL() << "not cancelled";
  } catch (const TaskCancelled& error) {
    EXPECT_THAT(error.what(), HasSubstr("because a task it depends on failed: coroutine failed on purpose"));
  }
  EXPECT_THROW(task.wait(), std::runtime_error);
}

CoTask<> catches_a_failed_task(Context& context, std::string& caught) {
  try {
    co_await context.submit([] { throw std::runtime_error("task failed on purpose"); });
  } catch (const std::runtime_error& error) {
    caught = error.what();
  }
  co_await context.submit([] {});  // still usable after catching
}

TEST_P(CoroutineTest, AwaitingAFailedTaskThrowsInTheCoroutine) {
  std::string caught;
  Task task = launch(*context, catches_a_failed_task(*context, caught));
  task.wait();
  EXPECT_EQ(caught, "task failed on purpose");
  try {
    context->wait_all();  // the failed task nobody waited for is still reported once
  } catch (const std::runtime_error&) {
  }
}

CoTask<int> child_throws() {
  throw std::logic_error("child");
  co_return 0;
}

CoTask<> parent_catches_child(int& result) {
  try {
    result = co_await child_throws();
  } catch (const std::logic_error&) {
    result = -1;
  }
}

TEST_P(CoroutineTest, ChildCoroutineExceptionsReachTheParent) {
  int result = 0;
  launch(*context, parent_catches_child(result)).wait();
  EXPECT_EQ(result, -1);
}

CoTask<> fan_out(Context& context, std::atomic<int>& count, bool fail) {
  TaskGroup group(context);
  for (int i = 0; i < 50; ++i) {
    group.spawn([&count] {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      count.fetch_add(1);
    });
  }
  if (fail) group.spawn([] { throw std::runtime_error("one of the group failed"); });
  co_await group;
  EXPECT_EQ(count.load(), 50) << "resumed before the group finished";
  co_await group;  // an empty group: no suspension
}

TEST_P(CoroutineTest, AwaitsAGroup) {
  std::atomic<int> count{0};
  launch(*context, fan_out(*context, count, false)).wait();
  EXPECT_EQ(count.load(), 50);
}

TEST_P(CoroutineTest, AwaitingAGroupRethrowsItsFirstFailure) {
  std::atomic<int> count{0};
  Task task = launch(*context, fan_out(*context, count, true));
  EXPECT_THROW(task.wait(), std::runtime_error);
  EXPECT_NO_THROW(context->wait_all()) << "task.wait() reported the failure, once";
}

TEST_P(CoroutineTest, LaunchedInAGroupAndCountedByWaitAll) {
  std::atomic<int> finished{0};
  {
    TaskGroup group(*context);
    for (int i = 0; i < 20; ++i) {
      launch(group, [](Context& ctx, std::atomic<int>& done) -> CoTask<> {
        co_await ctx.submit([] { std::this_thread::sleep_for(std::chrono::microseconds(100)); });
        done.fetch_add(1);
      }(*context, finished));
    }
    group.wait();
    EXPECT_EQ(finished.load(), 20);
  }
  for (int i = 0; i < 20; ++i) {
    (void)launch(*context, [](Context& ctx, std::atomic<int>& done) -> CoTask<> {
      co_await ctx.submit([] {});
      done.fetch_add(1);
    }(*context, finished));
  }
  context->wait_all();
  EXPECT_EQ(finished.load(), 40);
}

// Awaiting its own group (directly or from a child coroutine) or its own Task could never end: an
// error in the coroutine, as Task::wait() and TaskGroup::wait() give for the same mistake.
TEST_P(CoroutineTest, AwaitingItsOwnGroupOrTaskIsAnErrorNotAHang) {
  TaskGroup group(*context);
  auto child = [](TaskGroup& g) -> CoTask<> { co_await g; };
  Task direct = launch(
      group, [](TaskGroup& g) -> CoTask<> { co_await g; }(group), "own group");
  Task nested = launch(
      group, [](TaskGroup& g, auto make) -> CoTask<> { co_await make(g); }(group, child),
      "own group, from a child");
  for (Task* task : {&direct, &nested}) {
    try {
      task->wait();
      FAIL() << "awaiting its own group returned";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::invalid_argument);
      EXPECT_THAT(error.what(), HasSubstr("would wait for itself")) << error.what();
    }
  }
  EXPECT_ANY_THROW(group.wait()) << "the group reports the first failure";
  // Its own Task: handed to the coroutine once launch() returned it (a task holds it back till then).
  // References, not by-value shared_ptr parameters: GCC 12 may destroy a lambda coroutine's
  // by-value parameters twice.
  std::optional<Task> own;
  std::atomic<bool> published{false};
  Task self = launch(
      *context,
      [](Context& ctx, std::optional<Task>& handle, std::atomic<bool>& ready) -> CoTask<> {
        co_await ctx.submit([&ready] {
          while (!ready.load()) std::this_thread::yield();
        });
        co_await *handle;
      }(*context, own, published),
      "awaits itself");
  own = self;
  published.store(true);
  try {
    self.wait();
    FAIL() << "awaiting its own Task returned";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::invalid_argument);
    EXPECT_THAT(error.what(), HasSubstr("awaits itself")) << error.what();
  }
  own.reset();
}

// The blocking waits refuse inside a coroutine what they refuse inside a task: its stretches are
// tasks of their own, but what the coroutine is (its Task, a member of its group, what is ordered
// after it) counts. Each of these used to hang.
CoTask<> wait_blocking(TaskGroup& group, std::string& message) {
  try {
    group.wait();
    message = "returned";
  } catch (const Error& error) {
    message = error.what();
  }
  co_return;
}

// `mode`: 0 = Task::wait() on its own Task, 1 = wait() on a task ordered after its Task, 2 = co_await
// of that task. `self` is published once launch() has returned it; `gate` holds the coroutine until then.
CoTask<> wait_on_itself(Context& ctx, std::optional<Task>& self, Task gate, int mode, std::string& message) {
  co_await gate;
  try {
    if (mode == 0) {
      self->wait();
    } else {
      Task after = ctx.submit(TaskOptions{.name = "ordered after", .after = {*self}}, [] {});
      if (mode == 1) {
        after.wait();
      } else {
        co_await after;
      }
    }
    message = "returned";
  } catch (const Error& error) {
    message = error.what();
  }
}

TEST_P(CoroutineTest, BlockingWaitsForItselfInsideACoroutineAreErrorsNotHangs) {
  {
    TaskGroup group(*context);
    std::string message;
    Task task = launch(group, wait_blocking(group, message), "waits for its group");
    group.wait();
    EXPECT_THAT(message, HasSubstr("TaskGroup::wait() inside coroutine 'waits for its group' would wait for "
                                   "that coroutine itself"));
  }
  for (const int mode : {0, 1, 2}) {
    std::optional<Task> self;
    std::atomic<bool> go{false};
    Task gate = context->submit([&go] {
      while (!go.load()) std::this_thread::yield();
    });
    std::string message;
    self = launch(*context, wait_on_itself(*context, self, gate, mode, message), "self waiter");
    go.store(true);
    self->wait();
    SCOPED_TRACE(mode);
    if (mode == 0) {
      EXPECT_THAT(message, HasSubstr("inside coroutine 'self waiter' would wait for that coroutine itself"));
    } else if (mode == 1) {
      EXPECT_THAT(message, HasSubstr("inside task 'self waiter' would wait for task 'ordered after'"));
    } else {
      EXPECT_THAT(message, HasSubstr("co_await of a Task inside coroutine 'self waiter' would never resume: "
                                     "task 'ordered after' is ordered after the coroutine's own Task"));
    }
    self.reset();
    context->wait_all();
  }
}

// Coroutines that await each other in a cycle: each awaits, once `gate` has finished, what `target`
// selects (a Task published after launch, possibly a task ordered after one, or a group); the await
// that closes the cycle must throw instead of leaving every coroutine of the cycle suspended for good.
// `refusals` counts the refused awaits, `messages` keeps their texts.
struct CycleLog {
  std::atomic<int> arrived{0};  // awaits about to be made
  std::atomic<int> refusals{0};
  std::mutex mutex;
  std::vector<std::string> messages;
  void refused(const char* what) {
    refusals.fetch_add(1);
    std::lock_guard lock(mutex);
    messages.emplace_back(what);
  }
};

// await_and_log(): co_await of `task`, or else of `group`, whose refusal is logged.
CoTask<> await_and_log(Task* task, TaskGroup* group, CycleLog& log) {
  log.arrived.fetch_add(1);
  try {
    if (task != nullptr) {
      co_await *task;
    } else {
      co_await *group;
    }
  } catch (const Error& error) {
    if (error.code() != ErrorCode::invalid_argument) throw;
    log.refused(error.what());
  }
}

CoTask<> await_peer(Task gate, std::vector<std::optional<Task>>& peers, std::size_t peer, CycleLog& log) {
  co_await gate;
  co_await await_and_log(&*peers[peer], nullptr, log);
}

CoTask<> await_after_peer(Context& ctx, Task gate, std::vector<std::optional<Task>>& peers, std::size_t peer,
                          CycleLog& log) {
  co_await gate;
  Task after = ctx.submit(TaskOptions{.name = "after the peer", .after = {*peers[peer]}}, [] {});
  co_await await_and_log(&after, nullptr, log);
}

CoTask<> await_group(Task gate, TaskGroup& group, CycleLog& log) {
  co_await gate;
  co_await await_and_log(nullptr, &group, log);
}

// A gate: a task that waits, without holding a thread, until open() (the handles are published
// first). It reads a buffer this thread holds mapped for writing; open() ends the mapping.
struct Gate {
  Gate(Context& context, const char* name) : trigger(context, 1), held(trigger.map_write()) {
    task = context.submit(
        TaskOptions{.name = name}, [](std::span<const int>) {}, read(trigger));
  }
  void open() { held.reset(); }
  Buffer<int> trigger;
  std::optional<Mapped<int>> held;
  Task task;
};

// open_and_settle(): opens a gate and lets the coroutine behind it make its await (counted in
// `log.arrived`, which must reach `arrivals`) and suspend. With a single slot nothing runs unless
// this thread waits: the gate is only opened, and the waits for the coroutines run them.
void open_and_settle(Gate& gate, const CycleLog& log, int arrivals, unsigned workers) {
  gate.open();
  if (workers == 1) return;
  while (log.arrived.load() < arrivals) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

// Every Task of `tasks` finishes within the test's patience; true if so.
bool all_finish(std::vector<std::optional<Task>>& tasks) {
  return std::all_of(tasks.begin(), tasks.end(),
                     [](std::optional<Task>& task) { return task->wait_for(std::chrono::seconds(20)); });
}

TEST_P(CoroutineTest, CoroutinesAwaitingEachOthersTasksInACycleAreAnErrorNotAHang) {
  // Rings of 2 and 3 coroutines, each awaiting the next one's Task; the gates open one after the
  // other, so each cycle is closed by the last await, after the others suspended.
  for (const std::size_t ring : {std::size_t{2}, std::size_t{3}}) {
    SCOPED_TRACE(ring);
    const char* const names[2][3] = {{"A", "B", ""}, {"X", "Y", "Z"}};
    CycleLog log;
    std::vector<std::optional<Task>> coroutines(ring);
    std::vector<std::unique_ptr<Gate>> gates;
    for (std::size_t i = 0; i < ring; ++i) gates.push_back(std::make_unique<Gate>(*context, "gate"));
    for (std::size_t i = 0; i < ring; ++i) {
      coroutines[i] =
          launch(*context, await_peer(gates[i]->task, coroutines, (i + 1) % ring, log), names[ring - 2][i]);
    }
    for (std::size_t i = 0; i < ring; ++i)
      open_and_settle(*gates[i], log, static_cast<int>(i) + 1, workers());
    ASSERT_TRUE(all_finish(coroutines)) << "the coroutines of the cycle stayed suspended";
    EXPECT_EQ(log.refusals.load(), 1);
    ASSERT_EQ(log.messages.size(), 1u);
    // Which await closes the cycle is usually the last (the gates open one by one), but a loaded
    // machine may let a later gate's coroutine make its await first: any coroutine of the ring.
    std::vector<::testing::Matcher<const std::string&>> closers;
    for (std::size_t i = 0; i < ring; ++i)
      closers.push_back(HasSubstr(std::string("co_await of a Task inside coroutine '") + names[ring - 2][i] +
                                  "' would never resume: task "));
    EXPECT_THAT(log.messages[0], ::testing::AnyOfArray(closers));
    EXPECT_THAT(log.messages[0], HasSubstr("the awaits wait for each other"));
    for (auto& task : coroutines) EXPECT_NO_THROW(task->wait());
    coroutines.clear();
    context->wait_all();
  }
}

// The three cycles of ACycleOfAwaitsThroughATaskOrderedAfterACoroutineOrAGroupIsFoundToo: A then B
// make their awaits (A's gate opens first), and B's or A's closes the cycle.
enum class CycleThrough { task_after_peer, group_then_task, task_then_group };

TEST_P(CoroutineTest, ACycleOfAwaitsThroughATaskOrderedAfterACoroutineOrAGroupIsFoundToo) {
  for (const CycleThrough through :
       {CycleThrough::task_after_peer, CycleThrough::group_then_task, CycleThrough::task_then_group}) {
    SCOPED_TRACE(static_cast<int>(through));
    CycleLog log;
    TaskGroup group(*context);
    Gate gate_a(*context, "gate A");
    Gate gate_b(*context, "gate B");
    std::vector<std::optional<Task>> coroutines(2);
    // The await made second closes the cycle; a loaded machine may change which one that is.
    const char* a_closes = "co_await of a Task inside coroutine 'A' would never resume";
    const char* b_closes = through == CycleThrough::task_after_peer
                               ? "co_await of a Task inside coroutine 'B' would never resume"
                               : "co_await of a TaskGroup inside coroutine 'B' would never resume";
    if (through == CycleThrough::task_after_peer) {
      // A awaits a task ordered after B's Task; then B awaits A's.
      coroutines[0] = launch(*context, await_after_peer(*context, gate_a.task, coroutines, 1, log), "A");
      coroutines[1] = launch(*context, await_peer(gate_b.task, coroutines, 0, log), "B");
    } else {
      // A belongs to a group that B awaits, and awaits B's Task.
      coroutines[0] = launch(group, await_peer(gate_a.task, coroutines, 1, log), "A");
      coroutines[1] = launch(*context, await_group(gate_b.task, group, log), "B");
    }
    Gate& first = through == CycleThrough::group_then_task ? gate_b : gate_a;
    Gate& second = through == CycleThrough::group_then_task ? gate_a : gate_b;
    open_and_settle(first, log, 1, workers());
    second.open();
    ASSERT_TRUE(all_finish(coroutines)) << "the coroutines of the cycle stayed suspended";
    EXPECT_EQ(log.refusals.load(), 1);
    ASSERT_EQ(log.messages.size(), 1u);
    EXPECT_THAT(log.messages[0], ::testing::AnyOf(HasSubstr(a_closes), HasSubstr(b_closes)));
    EXPECT_THAT(log.messages[0], HasSubstr("the awaits wait for each other"));
    group.wait();
    coroutines.clear();
    context->wait_all();
  }
}

// fork_joins(): awaits `rounds` fork-joins of four tasks each, once `gate` has run.
CoTask<> fork_joins(Context& context, Task gate, int rounds, std::atomic<int>& ran) {
  co_await gate;
  for (int round = 0; round < rounds; ++round) {
    TaskGroup group(context);
    for (int k = 0; k < 4; ++k) group.spawn([&ran] { ran.fetch_add(1); });
    co_await group;
  }
}

// A coroutine with a long chain of tasks ordered after its Task awaits fork-joins: each co_await of
// a group checks that it does not wait for what waits for the coroutine, and walks nothing when no
// member can be ordered behind a task (it walked the whole chain per await).
TEST_P(CoroutineTest, AwaitingForkJoinsDoesNotWalkTheChainAfterTheCoroutine) {
  constexpr int chain = 300;
  constexpr int rounds = 20;
  std::atomic<int> ran{0};
  std::atomic<std::uint64_t>& visits = context->impl()->cycle_walk_visits;
  const std::uint64_t visits_before = visits.load();
  Gate gate(*context, "gate");
  Task coroutine = launch(*context, fork_joins(*context, gate.task, rounds, ran), "fork-joins");
  Task last = coroutine;
  for (int i = 0; i < chain; ++i)
    last = context->submit(TaskOptions{.after = {last}}, [&ran] { ran.fetch_add(1); });
  gate.open();
  last.wait();
  EXPECT_EQ(ran.load(), 4 * rounds + chain);
  // The await of the gate (a task behind a mapping: whether it waits for the coroutine cannot be
  // told without looking) may walk the chain once, when the chain is there before that await.
  EXPECT_LE(visits.load() - visits_before, std::uint64_t{chain + 1}) << "the awaits walked the chain";
  context->wait_all();
}

// Two coroutines released by one gate await each other's Task at the same moment, on two threads when
// there are: neither check may miss the other's await (both would stay suspended). A chain that is no
// cycle (each awaits the next; the last awaits nothing) is never refused.
TEST_P(CoroutineTest, TwoAwaitsClosingOneCycleAtOnceSeeEachOther) {
  for (int round = 0; round < 200; ++round) {
    CycleLog log;
    Gate gate(*context, "gate");
    std::vector<std::optional<Task>> coroutines(2);
    coroutines[0] = launch(*context, await_peer(gate.task, coroutines, 1, log), "A");
    coroutines[1] = launch(*context, await_peer(gate.task, coroutines, 0, log), "B");
    gate.open();
    ASSERT_TRUE(all_finish(coroutines)) << "round " << round << ": both awaits suspended for good";
    ASSERT_EQ(log.refusals.load(), 1) << "round " << round;
    coroutines.clear();
  }
  context->wait_all();
  CycleLog log;
  Gate gate(*context, "gate");
  std::vector<std::optional<Task>> chain(4);
  chain[3] = launch(
      *context, [](Task g) -> CoTask<> { co_await g; }(gate.task), "end of the chain");
  for (std::size_t i = 3; i-- > 0;)
    chain[i] = launch(*context, await_peer(gate.task, chain, i + 1, log), "link");
  gate.open();
  ASSERT_TRUE(all_finish(chain));
  EXPECT_EQ(log.refusals.load(), 0);
  chain.clear();
  context->wait_all();
}

// deep_link(): one level of a chain of launched coroutines, each awaiting the Task of the next one it
// launches; the last awaits the first's (`top`, published once launched) when `closed`: a cycle
// through the whole chain, closed by whichever of the last two awaits comes second.
CoTask<> deep_link(Context& context, int level, int depth, bool closed, std::atomic<Task*>& top,
                   CycleLog& log) {
  if (level < depth) {
    Task next = launch(context, deep_link(context, level + 1, depth, closed, top, log), "link");
    co_await await_and_log(&next, nullptr, log);
    co_return;
  }
  if (!closed) co_return;
  Task* first = nullptr;
  while ((first = top.load()) == nullptr) std::this_thread::yield();
  co_await await_and_log(first, nullptr, log);
}

// The check of an await follows what the awaited coroutine awaits in turn, downwards: through a long
// chain it must still find the cycle the last await closes, and refuse nothing when there is none.
TEST_P(CoroutineTest, ACycleThroughADeepChainOfAwaitingCoroutinesIsFound) {
  constexpr int depth = 2000;
  for (const bool closed : {true, false}) {
    SCOPED_TRACE(closed);
    CycleLog log;
    std::atomic<Task*> top{nullptr};
    Task first = launch(*context, deep_link(*context, 0, depth, closed, top, log), "top");
    top.store(&first);
    ASSERT_TRUE(first.wait_for(std::chrono::seconds(60))) << "the chain stayed suspended";
    context->wait_all();
    EXPECT_EQ(log.refusals.load(), closed ? 1 : 0);
    if (closed && log.refusals.load() == 1)
      EXPECT_THAT(log.messages[0], HasSubstr("the awaits wait for each other"));
  }
}

// random_node(): node `index` of a random graph of launched coroutines: it awaits the Tasks of
// earlier nodes (`inputs`), then children it launches (each awaiting a submitted task), and stores
// index + the sum of what it awaited (its inputs' values and its children's) in `values`.
CoTask<> random_node(Context& context, std::size_t index, std::vector<Task> inputs,
                     std::vector<std::size_t> input_indices, int children, std::vector<long>& values) {
  long sum = static_cast<long>(index);
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    co_await inputs[k];
    sum += values[input_indices[k]];
  }
  std::vector<long> child_values(static_cast<std::size_t>(children), 0);
  std::vector<Task> launched;
  for (int c = 0; c < children; ++c) {
    launched.push_back(launch(
        context,
        [](Context& ctx, long& out, long value) -> CoTask<> {
          co_await ctx.submit([&out, value] { out = value; });
        }(context, child_values[static_cast<std::size_t>(c)], static_cast<long>(index * 7 + c)),
        "child"));
  }
  for (Task& child : launched) co_await child;
  for (const long value : child_values) sum += value;
  values[index] = sum;
}

// Random acyclic graphs of coroutines awaiting each other's Tasks (and their children's), checked
// against a sequential reference: the cycle checks, both directions, never refuse an await that
// closes no cycle, and every coroutine resumes with its inputs' values.
TEST_P(CoroutineTest, RandomAcyclicGraphsOfAwaitingCoroutinesMatchASequentialReference) {
  for (const std::uint64_t seed : {1u, 2u, 3u}) {
    SCOPED_TRACE(seed);
    std::mt19937_64 random(seed);
    constexpr std::size_t nodes = 200;
    std::vector<long> values(nodes, -1), expected(nodes, 0);
    std::vector<Task> tasks;
    for (std::size_t i = 0; i < nodes; ++i) {
      std::vector<Task> inputs;
      std::vector<std::size_t> indices;
      const std::size_t fan_in = i == 0 ? 0 : random() % std::min<std::size_t>(i, 4);
      for (std::size_t k = 0; k < fan_in; ++k) {
        // Mostly recent nodes: long chains, which the downward walk follows.
        const std::size_t j =
            random() % 4 == 0 ? random() % i : i - 1 - random() % std::min<std::size_t>(i, 3);
        inputs.push_back(tasks[j]);
        indices.push_back(j);
      }
      const int children = static_cast<int>(random() % 3);
      expected[i] = static_cast<long>(i);
      for (const std::size_t j : indices) expected[i] += expected[j];
      for (int c = 0; c < children; ++c)
        expected[i] += static_cast<long>(i * 7 + static_cast<std::size_t>(c));
      tasks.push_back(
          launch(*context, random_node(*context, i, std::move(inputs), std::move(indices), children, values),
                 "node"));
    }
    for (Task& task : tasks) ASSERT_NO_THROW(task.wait());
    context->wait_all();
    EXPECT_EQ(values, expected);
  }
}

// A CoTask runs once: awaiting it again, or launching it after it was awaited, is an error (it used
// to resume a finished coroutine).
TEST_P(CoroutineTest, ACoTaskAwaitedOnceIsEmptyAfterwards) {
  auto child = [](int value) -> CoTask<int> { co_return value; };
  auto twice = [](CoTask<int>& once, int& first, std::string& message) -> CoTask<> {
    first = co_await once;
    try {
      (void)co_await once;
      message = "awaited twice";
    } catch (const Error& error) {
      message = error.what();
    }
  };
  CoTask<int> once = child(7);
  int first = 0;
  std::string message;
  launch(*context, twice(once, first, message)).wait();
  EXPECT_EQ(first, 7);
  EXPECT_THAT(message, HasSubstr("empty CoTask (moved from, launched, or already awaited)"));
  EXPECT_FALSE(once.valid());
  auto plain = [](Context& ctx) -> CoTask<> { co_await ctx.submit([] {}); };
  CoTask<> awaited = plain(*context);
  auto awaits = [](CoTask<>& inner) -> CoTask<> { co_await inner; };
  launch(*context, awaits(awaited)).wait();
  EXPECT_THROW((void)launch(*context, std::move(awaited)), Error);
}

// A coroutine type of the program's own (not CoTask) may co_await nerve Tasks too: its stretches have
// no launched coroutine behind them, and a blocking wait inside one is an ordinary task's wait (the
// wait checks looked for its launched coroutine and dereferenced null).
struct Detached {
  struct promise_type {
    Detached get_return_object() noexcept { return {}; }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_never final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { std::terminate(); }
  };
};

Detached own_coroutine_type(Context& ctx, std::atomic<int>& finished) {
  // Not done when awaited: the rest runs as a resumed stretch, a task.
  co_await ctx.submit([] { std::this_thread::sleep_for(std::chrono::milliseconds(10)); });
  TaskGroup group(ctx);
  group.spawn([] { std::this_thread::sleep_for(std::chrono::milliseconds(5)); });
  group.wait();
  finished = 1;
}

TEST_P(CoroutineTest, AnotherCoroutineTypeMayWaitInsideItsStretches) {
  std::atomic<int> finished{0};
  own_coroutine_type(*context, finished);
  context->wait_all();
  EXPECT_EQ(finished.load(), 1);
}

// A coroutine of a group submits, after the group's wait has begun, work that needs a mapping the
// waiting thread holds, and awaits it: its stretch waits behind that work, so the group does, for
// ever. The wait looks through the coroutine's stretches to the coroutine, and refuses.
TEST_P(CoroutineTest, AGroupWhoseCoroutineComesToWaitForTheWaitersMappingIsRefused) {
  Buffer<int> buffer(*context, 4);
  TaskGroup group(*context);
  auto reading = buffer.map_read();
  launch(
      group,
      [](Context& ctx, Buffer<int>& data) -> CoTask<> {
        co_await ctx.submit([] { std::this_thread::sleep_for(std::chrono::milliseconds(30)); });
        co_await ctx.submit([](std::span<int> x) { x[0] = 9; }, write(data));
      }(*context, buffer),
      "late writer");
  try {
    group.wait();
    FAIL() << "the group's coroutine waits for this thread's mapping";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::buffer_misuse);
    EXPECT_THAT(error.what(), HasSubstr("would wait forever for the mapping"));
  }
  reading.unmap();
  group.wait();
  EXPECT_EQ(buffer.to_vector()[0], 9);
}

// The same through the coroutine's own Task: Task::wait() looks again while the coroutine goes on.
TEST_P(CoroutineTest, AWaitForACoroutineThatComesToWaitForTheWaitersMappingIsRefused) {
  Buffer<int> buffer(*context, 4);
  auto writing = buffer.map_write();
  Task late = launch(
      *context,
      [](Context& ctx, Buffer<int>& data) -> CoTask<> {
        co_await ctx.submit([] { std::this_thread::sleep_for(std::chrono::milliseconds(30)); });
        co_await ctx.submit([](std::span<const int> x) { (void)x[0]; }, read(data));
      }(*context, buffer),
      "late reader");
  try {
    late.wait();
    FAIL() << "the coroutine waits for this thread's mapping";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::buffer_misuse);
    EXPECT_THAT(error.what(),
                HasSubstr("Task::wait() for task 'late reader' would wait forever for the mapping"));
  }
  writing.unmap();
  EXPECT_NO_THROW(late.wait());
}

TEST_P(CoroutineTest, UnlaunchedCoroutineNeverRuns) {
  bool ran = false;
  {
    auto coroutine = [](bool& flag) -> CoTask<> {
      flag = true;
      co_return;
    }(ran);
  }
  EXPECT_FALSE(ran);
}

// A coroutine launched into a cancelled group is one of the group's unstarted tasks: it never runs,
// and its Task says cancelled. A coroutine that already started runs to its end.
TEST_P(CoroutineTest, ACancelledGroupCancelsCoroutinesThatHaveNotStarted) {
  std::atomic<int> ran{0};
  auto body = [](Context& ctx, std::atomic<int>& count) -> CoTask<> {
    count.fetch_add(1);
    co_await ctx.submit([] {});
    count.fetch_add(100);
  };
  TaskGroup group(*context);
  group.cancel();
  Task launched = launch(group, body(*context, ran));
  group.wait();
  EXPECT_EQ(ran.load(), 0);
  EXPECT_THROW(launched.wait(), TaskCancelled);

  // After the wait the cancel no longer applies (TaskGroup::cancel()): the next one runs.
  Task next = launch(group, body(*context, ran));
  group.wait();
  EXPECT_NO_THROW(next.wait());
  EXPECT_EQ(ran.load(), 101);
}

// A group that outlived its context: launching into it is an error naming the coroutine.
// A reused group awaited by a second coroutine after the first awaiter's resumption was queued but
// before it ran: both parked bits added up into the sign of the group's count, and the completer of
// the group's next emptying resumed nobody (the second coroutine waited for ever). The workers are
// held busy so that the first awaiter's resumed stretch waits in the queue meanwhile.
CoTask<> await_group(TaskGroup& group, std::atomic<bool>& resumed) {
  co_await group;
  resumed = true;
}

Detached await_group_from_here(TaskGroup& group, std::atomic<bool>& resumed) {
  co_await group;
  resumed = true;
}

template <class Condition>
bool eventually(Condition condition) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return true;
}

TEST(Coroutines, ACoroutineAwaitingAReusedGroupBeforeThePreviousAwaiterRanIsResumed) {
  Context context(make_settings(2));
  TaskGroup group(context);
  std::atomic<detail::TaskRecord*> deferred{nullptr};
  group.spawn([&] { deferred = detail::defer_current_task(); });
  ASSERT_TRUE(eventually([&] { return deferred.load() != nullptr; }));
  std::atomic<bool> first_resumed{false}, second_resumed{false}, release{false};
  Task first = launch(context, await_group(group, first_resumed));
  ASSERT_TRUE(eventually(
      [&] { return (group.state()->pending.load() & detail::GroupState::coroutine_parked) != 0; }));
  std::atomic<int> holding{0};
  Task holder = context.submit([&] {  // reads locals of this body: waited for below
    ++holding;
    while (!release) std::this_thread::yield();
  });
  ASSERT_TRUE(eventually([&] { return holding.load() == 1; }));
  detail::complete_deferred(deferred.load(), nullptr);  // empties: the first awaiter's stretch is queued
  std::atomic<bool> added_ran{false};
  group.spawn(TaskOptions{.priority = Priority::high}, [&] { added_ran = true; });
  await_group_from_here(group, second_resumed);  // parks in the reused group
  release = true;
  EXPECT_TRUE(eventually([&] { return first_resumed.load() && second_resumed.load(); }))
      << "first " << first_resumed << ", second " << second_resumed << ", pending " << std::hex
      << group.state()->pending.load();
  EXPECT_TRUE(added_ran);
  if (!second_resumed) std::_Exit(1);  // the group would wait for ever at its destruction
  holder.wait();
  first.wait();
  group.wait();
}

// Suspended coroutines do not count against task_queue.max_in_flight: an application thread may
// launch any number that await what it does afterwards. (Counted twice each, their Task and their
// continuation, launch() blocked for ever past half the bound.)
CoTask<> await_task(Task gate, std::atomic<int>& resumed) {
  co_await gate;
  ++resumed;
}

TEST(Coroutines, SuspendedCoroutinesDoNotCountAgainstMaxInFlight) {
  Settings settings = make_settings(2);
  settings.set("task_queue.max_in_flight", "64");
  Context context(settings);
  std::atomic<bool> open{false};
  const Task gate = context.submit([&] {
    while (!open) std::this_thread::yield();
  });
  constexpr int count = 400;
  std::atomic<int> launched{0}, resumed{0};
  std::vector<Task> tasks;
  tasks.reserve(count);
  std::thread launcher([&] {
    for (int i = 0; i < count; ++i) {
      tasks.push_back(launch(context, await_task(gate, resumed)));
      ++launched;
    }
  });
  const bool all_launched = eventually([&] { return launched.load() == count; });
  open = true;  // everything can end now, either way
  launcher.join();
  EXPECT_TRUE(all_launched) << "launch() blocked after " << launched << " of " << count;
  for (Task& task : tasks) task.wait();
  EXPECT_EQ(resumed.load(), count);
  EXPECT_EQ(context.impl()->suspended_coroutine_records.load(), 0);
}

TEST(Coroutines, LaunchingIntoAGroupWhoseContextIsGoneNamesTheCoroutine) {
  std::optional<TaskGroup> group;
  {
    Context gone(make_settings(2));
    group.emplace(gone);
  }
  try {
    (void)launch(
        *group, []() -> CoTask<> { co_return; }(), "my-coroutine");
    ADD_FAILURE() << "the context is gone";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(error.what())
                  .find("coroutine 'my-coroutine' launched in a context that has been destroyed"),
              std::string::npos)
        << error.what();
  }
}

TEST_P(CoroutineTest, AnEmptyCoTaskIsAnErrorNotACrash) {
  auto coroutine = [](Context& ctx) -> CoTask<> { co_await ctx.submit([] {}); }(*context);
  EXPECT_TRUE(coroutine.valid());
  Task first = launch(*context, std::move(coroutine));
  EXPECT_FALSE(coroutine.valid());  // NOLINT(bugprone-use-after-move): the point of the test
  try {
    (void)launch(*context, std::move(coroutine));  // NOLINT(bugprone-use-after-move)
    FAIL() << "an empty CoTask cannot be launched";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::invalid_argument);
    EXPECT_THAT(error.what(), HasSubstr("empty CoTask"));
  }
  auto awaits_empty = [](CoTask<> empty) -> CoTask<> { co_await empty; };
  Task failed =
      launch(*context, awaits_empty(CoTask<>(std::move(coroutine))));  // NOLINT(bugprone-use-after-move)
  EXPECT_THROW(failed.wait(), Error);
  first.wait();
  context->wait_all();
}

// A blocking wait was checked for cycles only when it began: a task that waits for a coroutine it
// launched, which then awaits a reader of the data the task writes (ordered after it), hung for
// ever once the coroutine suspended after the wait had begun. The wait looks again before it parks.
TEST_P(CoroutineTest, AWaitThatAnAwaitLaterMakesEndlessThrows) {
  Buffer<int> data(*context, 16);
  std::atomic<int> child_resumed{0};
  std::string refused;
  const auto child = [](Context& ctx, Buffer<int> shared, std::atomic<int>& resumed) -> CoTask<> {
    co_await ctx.submit(
        TaskOptions{.name = "reader"}, [](std::span<const int>) {}, read(shared));
    resumed.fetch_add(1);
  };
  Task parent = context->submit(
      TaskOptions{.name = "parent"},
      [&](std::span<int>) {
        Task launched = launch(*context, child(*context, data, child_resumed), "child");
        try {
          launched.wait();
        } catch (const Error& error) {
          EXPECT_EQ(error.code(), ErrorCode::invalid_argument);
          refused = error.what();
        }
      },
      write(data));
  ASSERT_TRUE(parent.wait_for(std::chrono::seconds(60))) << "the wait hung";
  context->wait_all();
  EXPECT_EQ(child_resumed.load(), 1);
  // Refused before it began (the child suspended first) or when it would park (after).
  EXPECT_THAT(refused, HasSubstr("Task::wait() inside task 'parent' would"));
  EXPECT_THAT(refused, HasSubstr("'child'"));
}

// A coroutine's stretch suspended below a wait on the same thread holds up the coroutine's Task: a
// task run on top of it that waits for that Task hung, where a plain task below was refused.
TEST_P(CoroutineTest, AWaitForACoroutineSuspendedBelowOnTheSameStackThrows) {
  if (workers() < 2) GTEST_SKIP() << "needs a worker beside the application thread";
  Buffer<int> gate(*context, 1);
  auto mapping = gate.map_write();
  Task gated = context->submit(
      TaskOptions{.name = "gated"}, [](std::span<const int>) {}, read(gate));
  std::atomic<bool> in_wait{false};
  std::atomic<bool> below_done{false};
  const auto below = [](Task waited, std::atomic<bool>& waiting, std::atomic<bool>& done) -> CoTask<> {
    waiting.store(true);
    waited.wait();  // runs other tasks on this thread meanwhile
    done.store(true);
    co_return;
  };
  Task r = launch(*context, below(gated, in_wait, below_done), "R");
  while (!in_wait.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::string refused;
  Task w = context->submit(TaskOptions{.name = "W"}, [&] {
    try {
      r.wait();
    } catch (const Error& error) {
      refused = error.what();
    }
  });
  // W runs on top of R's wait (R's thread is the one with nothing else to do) or on another thread,
  // where it simply waits for R; either way it must end once the gate opens.
  const bool w_done_first = w.wait_for(std::chrono::seconds(5));
  mapping.unmap();
  ASSERT_TRUE(r.wait_for(std::chrono::seconds(60))) << "R hung";
  ASSERT_TRUE(w.wait_for(std::chrono::seconds(60))) << "W hung";
  EXPECT_TRUE(below_done.load());
  if (w_done_first)
    EXPECT_THAT(refused, HasSubstr("which this thread suspended in a wait of its own to run 'W'"));
  context->wait_all();
}

INSTANTIATE_TEST_SUITE_P(Runtime, CoroutineTest, NERVE_RUNTIME_PARAMS, runtime_param_name);

}  // namespace
}  // namespace nerve::testing
