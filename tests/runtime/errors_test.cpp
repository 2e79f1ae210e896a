// Failures, cancellation, task groups and task pools.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <initializer_list>
#include <limits>
#include <memory>
#include <optional>
#include <ratio>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gmock/gmock.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define NERVE_TEST_COUNTS_HEAP 1
// In the sanitizers' runtime (GCC ships no header declaring it): bytes allocated and not freed.
extern "C" std::size_t __sanitizer_get_current_allocated_bytes();
#endif

#include "runtime/context_impl.hpp"
#include "runtime_test.hpp"

namespace nerve::testing {
namespace {

using ErrorsTest = RuntimeTest;

// Refusals records, from any thread, what each call threw as Error(invalid_argument) (its message),
// "wrong error: ..." for anything else it threw, or `returned` when it returned.
struct Refusals {
  std::mutex lock;
  std::vector<std::string> messages;
  template <class F>
  void record(F&& call, const char* returned) {
    std::string said = returned;
    try {
      call();
    } catch (const Error& error) {
      said = error.code() == ErrorCode::invalid_argument ? error.what()
                                                         : std::string("wrong error: ") + error.what();
    }
    std::lock_guard guard(lock);
    messages.push_back(std::move(said));
  }
};

// A cancelled task's message names the failed task it depends on (its cause() is the original
// exception, which does not say where it came from), through a chain too; an unnamed one is not named.
TEST_P(ErrorsTest, CancellationNamesTheTaskThatFailed) {
  Buffer<int> data(*context, 1);
  Task producer = context->submit(
      TaskOptions{.name = "producer"}, [](std::span<int>) { throw std::runtime_error("boom"); }, write(data));
  Task consumer = context->submit(
      TaskOptions{.name = "consumer"}, [](std::span<int>) {}, read_write(data));
  Task last = context->submit([](std::span<const int>) {}, read(data));
  EXPECT_THROW(producer.wait(), std::runtime_error);
  for (const Task* cancelled : {&consumer, &last}) {
    try {
      cancelled->wait();
      ADD_FAILURE() << "not cancelled";
    } catch (const TaskCancelled& error) {
      EXPECT_NE(std::string(error.what()).find("because task 'producer', which it depends on, failed: boom"),
                std::string::npos)
          << error.what();
    }
  }
  Buffer<int> other(*context, 1);
  context->spawn([](std::span<int>) { throw std::runtime_error("anonymous"); }, write(other));
  try {
    context->submit([](std::span<const int>) {}, read(other)).wait();
    ADD_FAILURE() << "not cancelled";
  } catch (const TaskCancelled& error) {
    EXPECT_NE(std::string(error.what()).find("because a task it depends on failed: anonymous"),
              std::string::npos)
        << error.what();
  }
  EXPECT_THROW(context->wait_all(), std::runtime_error) << "the unnamed failure, not waited for";
}

// A pool member's failure is named after the member, not after the pool's internal gate (whose
// failure carries the same exception): 'task pool' named no task of the program.
TEST_P(ErrorsTest, CancellationByAPoolMemberNamesTheMember) {
  for (const char* member : {"member7", static_cast<const char*>(nullptr)}) {
    Buffer<int> data(*context, 10);
    TaskPool pool(*context);
    pool.add(
        TaskOptions{.name = member}, [](std::span<int>) { throw std::runtime_error("pw"); }, write(data));
    pool.launch();
    Task reader = context->submit(
        TaskOptions{.name = "reader"}, [](std::span<const int>) {}, read(data));
    try {
      reader.wait();
      ADD_FAILURE() << "not cancelled";
    } catch (const TaskCancelled& error) {
      const std::string expected = member != nullptr
                                       ? "because task 'member7', which it depends on, failed: pw"
                                       : "because a task it depends on failed: pw";
      EXPECT_NE(std::string(error.what()).find(expected), std::string::npos) << error.what();
    }
    EXPECT_THROW(pool.wait_all(), std::runtime_error);
  }
}

TEST_P(ErrorsTest, FailureIsRethrownByWaitAndDependentsAreCancelled) {
  Buffer<int> data(*context, 1);
  Task writer =
      context->submit([](std::span<int>) { throw std::runtime_error("kernel exploded"); }, write(data));
  std::atomic<bool> reader_ran{false};
  Task reader = context->submit([&](std::span<const int>) { reader_ran = true; }, read(data));
  Task grandchild = context->submit([&](std::span<int>) { reader_ran = true; }, read_write(data));
  EXPECT_THROW(
      {
        try {
          writer.wait();
        } catch (const std::runtime_error& error) {
          EXPECT_STREQ(error.what(), "kernel exploded");
          throw;
        }
      },
      std::runtime_error);
  EXPECT_EQ(writer.status(), TaskStatus::failed);
  try {
    reader.wait();
    FAIL() << "a task reading a failed task's output must be cancelled";
  } catch (const TaskCancelled& cancelled) {
    EXPECT_EQ(cancelled.code(), ErrorCode::cancelled);
    EXPECT_NE(std::string(cancelled.what()).find("kernel exploded"), std::string::npos) << cancelled.what();
    EXPECT_NE(cancelled.cause(), nullptr);
  }
  EXPECT_THROW(grandchild.wait(), TaskCancelled);
  EXPECT_FALSE(reader_ran.load());
  EXPECT_NO_THROW(context->wait_all()) << "writer.wait() reported the failure: each is reported once";
  context->wait_all();
}

// The successors of a failed task are released in batches (task_graph.hpp): every consuming one
// is cancelled with the cause, whatever its place in the batches.
TEST_P(ErrorsTest, AFailedWriterCancelsEveryReaderBehindIt) {
  Buffer<int> data(*context, 1);
  std::atomic<bool> all_submitted{false};
  Task writer = context->submit(
      [&](std::span<int>) {
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
        while (!all_submitted.load() && std::chrono::steady_clock::now() < until) std::this_thread::yield();
        throw std::runtime_error("writer failed");
      },
      write(data));
  std::atomic<int> ran{0};
  std::vector<Task> readers;
  for (int i = 0; i < 19; ++i)
    readers.push_back(context->submit([&](std::span<const int>) { ++ran; }, read(data)));
  all_submitted = true;
  EXPECT_THROW(writer.wait(), std::runtime_error);
  for (Task& reader : readers) {
    EXPECT_THROW(reader.wait(), TaskCancelled);
    EXPECT_EQ(reader.status(), TaskStatus::cancelled);
  }
  EXPECT_EQ(ran.load(), 0);
  context->wait_all();
}

TEST_P(ErrorsTest, IndependentWorkStillCompletes) {
  Buffer<int> bad(*context, 1);
  Buffer<int> good(*context, 1);
  context->spawn([](std::span<int>) { throw std::logic_error("bad"); }, write(bad));
  context->spawn([](std::span<int> g) { g[0] = 1; }, write(good));
  for (int i = 0; i < 100; ++i) context->spawn([](std::span<int> g) { g[0] += 1; }, read_write(good));
  EXPECT_THROW(context->wait_all(), std::logic_error);
  EXPECT_EQ(good.to_vector()[0], 101);
}

TEST_P(ErrorsTest, PureWriteAfterFailedWriterRecoversTheBuffer) {
  Buffer<int> data(*context, 1);
  context->spawn([](std::span<int>) { throw std::runtime_error("first writer failed"); }, write(data));
  EXPECT_THROW(data.map_read(), TaskCancelled) << "reading a failed task's output is cancelled";
  Task rewrite = context->submit([](std::span<int> d) { d[0] = 5; }, write(data));
  EXPECT_NO_THROW(rewrite.wait()) << "a pure write does not consume the failed result";
  EXPECT_EQ(data.to_vector()[0], 5);
  EXPECT_THROW(context->wait_all(), std::runtime_error);
}

// A task that reads part of a failed task's output is cancelled even when it also overwrites (or
// follows through a write-after-read) the same task, and even when that access is declared first:
// the two dependencies on one predecessor must not collapse into the non-consuming one. The failing
// task waits on a gate so that the edges are linked while it is still running.
TEST_P(ErrorsTest, AConsumingDependencyIsNotLostBehindANonConsumingOneOnTheSameTask) {
  enum class Shape {
    overwrite_then_read,
    read_then_overwrite,
    write_what_it_read_then_read_other,
    after_and_overwrite
  };
  for (const Shape shape : {Shape::overwrite_then_read, Shape::read_then_overwrite,
                            Shape::write_what_it_read_then_read_other, Shape::after_and_overwrite}) {
    Buffer<int> x(*context, 16), y(*context, 4);
    std::atomic<bool> open{false};
    const auto gate = [&open] {
      while (!open.load()) std::this_thread::yield();
      throw std::runtime_error("producer failed");
    };
    Task producer = shape == Shape::write_what_it_read_then_read_other
                        ? context->submit([gate](std::span<int>, std::span<const int>) { gate(); },
                                          write(x.slice(0, 8)), read(y))
                        : context->submit([gate](std::span<int>) { gate(); }, write(x.slice(0, 8)));
    std::atomic<bool> ran{false};
    const auto body = [&ran](auto&&...) { ran = true; };
    Task consumer;
    switch (shape) {
      case Shape::overwrite_then_read:
        consumer = context->submit(body, write(x.slice(4, 4)), read(x.slice(0, 4)));
        break;
      case Shape::read_then_overwrite:
        consumer = context->submit(body, read(x.slice(0, 4)), write(x.slice(4, 4)));
        break;
      case Shape::write_what_it_read_then_read_other:
        consumer = context->submit(body, write(y), read(x.slice(0, 4)));
        break;
      case Shape::after_and_overwrite:
        consumer = context->submit(TaskOptions{.after = {producer}}, body, write(x.slice(0, 8)));
        break;
    }
    open = true;
    EXPECT_THROW(consumer.wait(), TaskCancelled) << static_cast<int>(shape);
    EXPECT_FALSE(ran.load()) << static_cast<int>(shape);
    EXPECT_THROW(producer.wait(), std::runtime_error);
    context->wait_all();
  }
}

TEST_P(ErrorsTest, AfterEdgePropagatesFailure) {
  Task failing = context->submit([] { throw std::runtime_error("no"); });
  Task after = context->submit(TaskOptions{.after = {failing}}, [] {});
  EXPECT_THROW(after.wait(), TaskCancelled);
  EXPECT_EQ(after.status(), TaskStatus::cancelled);
  EXPECT_THROW(context->wait_all(), std::runtime_error);
}

TEST_P(ErrorsTest, AfterACancelledTaskSaysThePredecessorWasCancelled) {
  TaskGroup group(*context);
  group.cancel();
  Task cancelled = group.submit([] {});
  group.wait();
  try {
    cancelled.wait();
    FAIL() << "a task of a cancelled group ran";
  } catch (const TaskCancelled& error) {
    EXPECT_THAT(error.what(), ::testing::HasSubstr("was cancelled before it started")) << error.what();
  }
  Task after = context->submit(TaskOptions{.after = {cancelled}}, [] {});
  try {
    after.wait();
    FAIL() << "a task after a cancelled one ran";
  } catch (const TaskCancelled& error) {
    const std::string message = error.what();
    EXPECT_THAT(message, ::testing::HasSubstr("because a task it depends on was cancelled")) << message;
    EXPECT_THAT(message, ::testing::Not(::testing::HasSubstr("before it started"))) << message;
    EXPECT_EQ(error.cause(), nullptr) << "no failure caused it";
  }
  EXPECT_NO_THROW(context->wait_all()) << "cancellation on request is not a failure";
}

TEST_P(ErrorsTest, GroupWaitRethrowsFirstFailureAndOthersFinish) {
  TaskGroup group(*context);
  std::atomic<int> finished{0};
  for (int i = 0; i < 50; ++i) {
    group.spawn([&, i] {
      if (i == 25) throw std::out_of_range("task 25");
      finished.fetch_add(1);
    });
  }
  EXPECT_THROW(group.wait(), std::out_of_range);
  EXPECT_EQ(finished.load(), 49);
  EXPECT_NO_THROW(group.wait()) << "each failure is reported once";
}

TEST_P(ErrorsTest, GroupCancelSkipsTasksNotStarted) {
  TaskGroup group(*context);
  std::atomic<int> ran{0};
  Buffer<int> gate(*context, 1);
  auto mapping = gate.map_write();  // holds every task below until unmap
  for (int i = 0; i < 20; ++i) group.spawn([&](std::span<const int>) { ran.fetch_add(1); }, read(gate));
  group.cancel();
  mapping.unmap();
  EXPECT_NO_THROW(group.wait()) << "requested cancellation is not an error";
  EXPECT_EQ(ran.load(), 0);
}

TEST_P(ErrorsTest, WaitForTimesOut) {
  Buffer<int> gate(*context, 1);
  auto mapping = gate.map_write();
  Task blocked = context->submit([](std::span<const int>) {}, read(gate));
  EXPECT_FALSE(blocked.wait_for(std::chrono::milliseconds(20)));
  EXPECT_FALSE(blocked.done());
  mapping.unmap();
  EXPECT_TRUE(blocked.wait_for(std::chrono::seconds(30)));
}

// A negative timeout is an immediate poll (it once meant "wait forever"), and a timeout too long for
// int64 nanoseconds saturates instead of overflowing into a negative one.
TEST_P(ErrorsTest, WaitForNegativeOrHugeTimeouts) {
  Buffer<int> gate(*context, 1);
  auto mapping = gate.map_write();
  Task blocked = context->submit([](std::span<const int>) {}, read(gate));
  TaskGroup group(*context);
  group.spawn([](std::span<const int>) {}, read(gate));
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(blocked.wait_for(std::chrono::nanoseconds(-1)));
  EXPECT_FALSE(blocked.wait_for(std::chrono::milliseconds(-5)));
  EXPECT_FALSE(blocked.wait_for(std::chrono::nanoseconds::min()));
  EXPECT_FALSE(blocked.wait_for(std::chrono::duration<double>(-0.5)));
  EXPECT_FALSE(group.wait_for(std::chrono::seconds(-1)));
  EXPECT_FALSE(group.wait_for(std::chrono::nanoseconds::min()));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  mapping.unmap();
  EXPECT_TRUE(blocked.wait_for(std::chrono::seconds::max()));
  EXPECT_TRUE(blocked.wait_for(std::chrono::hours::max()));
  EXPECT_TRUE(group.wait_for(std::chrono::nanoseconds::max()));
  EXPECT_TRUE(group.wait_for(std::chrono::duration<double>(1e30)));
}

// A tick that is not a whole number of nanoseconds (1/3 s, 1/1024 s) is converted without the
// overflow of duration_cast, which multiplies by the numerator first: 195 years in thirds of a second
// became a 96 ms wait (black-box audit).
TEST(TimeoutConversion, FractionalTicksConvertWithoutOverflow) {
  using thirds = std::chrono::duration<std::int64_t, std::ratio<1, 3>>;
  using kibi = std::chrono::duration<std::uint64_t, std::ratio<1, 1024>>;
  EXPECT_EQ(detail::timeout_ns(thirds(3)), 1'000'000'000);
  EXPECT_EQ(detail::timeout_ns(kibi(1024)), 1'000'000'000);
  const std::int64_t long_wait = detail::timeout_ns(thirds(18'446'744'074));  // ~6.1e18 ns
  EXPECT_GT(long_wait, 6'000'000'000'000'000'000);
  EXPECT_LT(long_wait, 6'200'000'000'000'000'000);
  EXPECT_GT(detail::timeout_ns(kibi(std::uint64_t{1} << 62)), 4'000'000'000'000'000'000);
  EXPECT_EQ(detail::timeout_ns(thirds(std::numeric_limits<std::int64_t>::max())),
            std::numeric_limits<std::int64_t>::max());
  EXPECT_EQ(detail::timeout_ns(std::chrono::hours(2)), 7'200'000'000'000);
}

// A timed wait does not run the task it waits for (or any other) while other workers can: a task
// of 300 ms must not turn wait_for(10 ms) into a 300 ms wait that answers true.
TEST_P(ErrorsTest, WaitForDoesNotRunTasksPastItsTimeout) {
  if (workers() == 1) GTEST_SKIP() << "with one worker slot a timed wait runs tasks (documented)";
  Task slow = context->submit([] { std::this_thread::sleep_for(std::chrono::milliseconds(300)); });
  EXPECT_FALSE(slow.wait_for(std::chrono::milliseconds(10)));
  TaskGroup group(*context);
  group.spawn([] { std::this_thread::sleep_for(std::chrono::milliseconds(300)); });
  EXPECT_FALSE(group.wait_for(std::chrono::milliseconds(10)));
  EXPECT_TRUE(slow.wait_for(std::chrono::seconds(60)));
  EXPECT_TRUE(group.wait_for(std::chrono::seconds(60)));
}

// With one slot a timed wait runs tasks itself, but returns late by at most the task it ran: the
// deadline is read after each task (it was read every 64, so wait_for(0) ran up to 64 tasks), and a
// zero or negative timeout runs one task at most — from the application thread and from inside a
// task (whose wait once ran its own deque's tasks without reading the clock).
TEST(WaitForOneSlot, ATimedWaitOverrunsByOneTaskAtMost) {
  Context context(Settings().use_environment(false).set("parallel.thread_pool_size", "1"));
  std::atomic<int> ran{0};
  const auto slow = [&ran] {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ran.fetch_add(1);
  };
  Task target = context.submit([&] { ran.fetch_add(1); });
  // Submitted after the target, so a waiter popping the newest first meets them before it.
  for (int i = 0; i < 20; ++i) context.spawn(slow);
  EXPECT_FALSE(target.wait_for(std::chrono::milliseconds(0)));
  EXPECT_LE(ran.load(), 1) << "a zero timeout runs one task at most";
  EXPECT_FALSE(target.wait_for(std::chrono::milliseconds(-1)));
  EXPECT_LE(ran.load(), 2) << "so does a negative one";
  EXPECT_FALSE(target.wait_for(std::chrono::milliseconds(1)));
  EXPECT_LE(ran.load(), 3) << "a 1 ms wait ran more than the one 5 ms task it may overrun by";
  TaskGroup group(context);
  group.spawn([&] { ran.fetch_add(1); });
  for (int i = 0; i < 10; ++i) group.spawn(slow);
  const int before = ran.load();
  EXPECT_FALSE(group.wait_for(std::chrono::milliseconds(0)));
  EXPECT_LE(ran.load(), before + 1);
  EXPECT_TRUE(target.wait_for(std::chrono::seconds(60)));
  EXPECT_TRUE(group.wait_for(std::chrono::seconds(60)));
  context.wait_all();
  EXPECT_EQ(ran.load(), 32);

  // Inside a task, which runs on the one slot: its own deque holds what it submitted.
  std::atomic<int> inner_ran{0};
  std::atomic<int> ran_during_wait{-1};
  context.spawn([&] {
    Task inner_target = context.submit([&] { inner_ran.fetch_add(1); });
    for (int i = 0; i < 20; ++i) {
      context.spawn([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        inner_ran.fetch_add(1);
      });
    }
    (void)inner_target.wait_for(std::chrono::milliseconds(1));
    ran_during_wait = inner_ran.load();
  });
  context.wait_all();
  EXPECT_LE(ran_during_wait.load(), 1) << "a task's 1 ms wait ran its deque's tasks past the deadline";
  EXPECT_EQ(inner_ran.load(), 21);
}

// A loop polling with a zero timeout still finishes with one slot: each poll runs a task at most.
TEST(WaitForOneSlot, PollingWithAZeroTimeoutFinishes) {
  Context context(Settings().use_environment(false).set("parallel.thread_pool_size", "1"));
  std::atomic<bool> ran{false};
  Task task = context.submit([&] { ran = true; });
  int polls = 0;
  while (!task.wait_for(std::chrono::seconds(0))) ASSERT_LT(++polls, 1000);
  EXPECT_TRUE(ran.load());
}

// With one slot a polling loop of short timed waits still gets the task run (by the waiter).
TEST_P(ErrorsTest, PollingWithWaitForFinishes) {
  std::atomic<bool> ran{false};
  Task task = context->submit([&] { ran = true; });
  int polls = 0;
  while (!task.wait_for(std::chrono::milliseconds(1))) ASSERT_LT(++polls, 60000);
  EXPECT_TRUE(ran.load());
}

// Each failure is reported once: by the Task::wait() that saw it, else by wait_all().
TEST_P(ErrorsTest, WaitAllReportsOnlyFailuresNobodyWaitedFor) {
  Task seen = context->submit([] { throw std::runtime_error("seen"); });
  EXPECT_THROW(seen.wait(), std::runtime_error);
  EXPECT_NO_THROW(context->wait_all());
  Task handled = context->submit([] { throw std::runtime_error("handled"); });
  context->spawn([] { throw std::runtime_error("unseen"); });
  EXPECT_THROW(handled.wait(), std::runtime_error);
  try {
    context->wait_all();
    FAIL() << "the failure nobody waited for was not reported";
  } catch (const std::runtime_error& error) {
    EXPECT_STREQ(error.what(), "unseen");
  }
  EXPECT_NO_THROW(context->wait_all()) << "and only once";
}

// Tasks that throw the same exception object (a shared upstream error rethrown) fail with equal
// errors: a wait for one of them took the other's failure off wait_all()'s report, which then
// returned quietly — a group task's wait, or a second wait for a task already waited for (a
// white-box review; 5 of 5 runs).
TEST_P(ErrorsTest, AWaitTakesOffWaitAllsReportOnlyTheFailureOfTheTaskItWaitedFor) {
  const std::exception_ptr shared = std::make_exception_ptr(std::runtime_error("shared upstream failure"));
  context->spawn([shared] { std::rethrow_exception(shared); });  // nobody waits for this one
  {
    TaskGroup group(*context);
    Task in_group = group.submit([shared] { std::rethrow_exception(shared); });
    EXPECT_THROW(in_group.wait(), std::runtime_error);
    EXPECT_THROW(group.wait(), std::runtime_error);
  }
  EXPECT_THROW(context->wait_all(), std::runtime_error) << "the spawned task's failure was lost";
  context->spawn([shared] { std::rethrow_exception(shared); });
  Task waited = context->submit([shared] { std::rethrow_exception(shared); });
  EXPECT_THROW(waited.wait(), std::runtime_error);
  EXPECT_THROW(waited.wait(), std::runtime_error) << "a second wait rethrows, and takes nothing more off";
  EXPECT_THROW(context->wait_all(), std::runtime_error) << "the spawned task's failure was lost";
  EXPECT_NO_THROW(context->wait_all()) << "and reported once";
}

// wait_all() rethrows one failure; the others of the same wait are logged, not silently dropped, and
// not rethrown by a later wait.
TEST_P(ErrorsTest, WaitAllLogsTheFailuresItDoesNotRethrow) {
  context->spawn([] { throw std::runtime_error("failure A"); });
  context->spawn([] { throw std::runtime_error("failure B"); });
  ::testing::internal::CaptureStderr();
  std::string rethrown;
  try {
    context->wait_all();
  } catch (const std::runtime_error& error) {
    rethrown = error.what();
  }
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(rethrown == "failure A" || rethrown == "failure B") << rethrown;
  const std::string other = rethrown == "failure A" ? "failure B" : "failure A";
  EXPECT_THAT(log, ::testing::HasSubstr(other)) << "the failure not rethrown must be logged";
  EXPECT_NO_THROW(context->wait_all()) << "and not rethrown later";
}

// Several threads may wait for one group or pool: exactly one of them rethrows its failure (two
// once both took the same exception_ptr, rethrew it and released it twice: a corrupted heap), and
// wait_all() on an unlaunched pool launches it once however many threads call it.
TEST(ConcurrentWaits, OneOfSeveralWaitersRethrowsAGroupsOrPoolsFailure) {
  Context context(Settings().use_environment(false).set("parallel.thread_pool_size", "2"));
  constexpr int waiters = 3;
  const auto wait_from_threads = [&](auto&& wait) {
    std::atomic<int> rethrown{0};
    std::atomic<int> ready{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < waiters; ++t) {
      threads.emplace_back([&] {
        ready.fetch_add(1);
        while (ready.load() < waiters) std::this_thread::yield();
        try {
          wait();
        } catch (const std::runtime_error&) {
          rethrown.fetch_add(1);
        }
      });
    }
    for (auto& thread : threads) thread.join();
    return rethrown.load();
  };
  for (int round = 0; round < 30; ++round) {
    TaskGroup group(context);
    group.spawn([] { throw std::runtime_error("group member failed"); });
    group.spawn([] { std::this_thread::sleep_for(std::chrono::microseconds(200)); });
    EXPECT_EQ(wait_from_threads([&] { group.wait(); }), 1) << "group, round " << round;

    std::atomic<int> ran{0};
    TaskPool pool(context);
    pool.add([] { throw std::runtime_error("pool member failed"); });
    for (int i = 0; i < 4; ++i) pool.add([&] { ran.fetch_add(1); });
    // Not launched: every waiter's wait_all() launches it, once.
    EXPECT_EQ(wait_from_threads([&] { pool.wait_all(); }), 1) << "pool, round " << round;
    EXPECT_EQ(ran.load(), 4) << "each member ran once";
  }
  context.wait_all();
}

// A group or pool rethrows its first failure; the others are logged as they happen (16 of them,
// then a count at the wait), and destroying one with a failure no wait took logs that too.
TEST_P(ErrorsTest, GroupsAndPoolsLogTheFailuresTheyDoNotRethrow) {
  const auto failures = [](auto& owner, auto spawn, int count) {
    for (int i = 0; i < count; ++i) spawn(owner, i);
  };
  const auto fail = [](int i) { throw std::runtime_error("failure " + std::to_string(i)); };
  for (const int count : {2, 20}) {
    SCOPED_TRACE(count);
    ::testing::internal::CaptureStderr();
    std::string group_rethrown;
    {
      TaskGroup group(*context);
      failures(
          group, [&](TaskGroup& g, int i) { g.spawn([=] { fail(i); }); }, count);
      try {
        group.wait();
      } catch (const std::runtime_error& error) {
        group_rethrown = error.what();
      }
    }
    std::string pool_rethrown;
    {
      TaskPool pool(*context);
      failures(
          pool, [&](TaskPool& p, int i) { p.add([=] { fail(100 + i); }); }, count);
      try {
        pool.wait_all();
      } catch (const std::runtime_error& error) {
        pool_rethrown = error.what();
      }
    }
    const std::string log = ::testing::internal::GetCapturedStderr();
    for (const auto& [rethrown, first] : {std::pair{group_rethrown, 0}, std::pair{pool_rethrown, 100}}) {
      ASSERT_THAT(rethrown, ::testing::StartsWith("failure "));
      int logged = 0;
      for (int i = first; i < first + count; ++i) {
        const std::string message = "failure " + std::to_string(i) + "\n";
        if (log.find(message) != std::string::npos) {
          ++logged;
          EXPECT_NE(rethrown + "\n", message) << "the rethrown failure is not logged too";
        }
      }
      EXPECT_EQ(logged, std::min(count - 1, 16)) << log;
    }
    if (count == 20) {
      EXPECT_THAT(log, ::testing::HasSubstr("and 3 more task failures in this task group"));
      EXPECT_THAT(log, ::testing::HasSubstr("and 3 more task failures in this task pool"));
    }
  }
  // Destroyed without a wait: the kept failure is logged, once.
  ::testing::internal::CaptureStderr();
  {
    TaskGroup group(*context);
    group.spawn([] { throw std::runtime_error("never waited for"); });
    context->wait_all();  // the group's failure is its own: wait_all() does not rethrow it
  }
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(log,
              ::testing::HasSubstr("task group destroyed with an unreported task failure: never waited for"));
}

// Past the 256 failures wait_all() keeps, the rest are only counted — and a failure Task::wait()
// reported must come off that count too (once, however often it is waited for), or wait_all()
// reports failures that were seen. Drops from before a wait_all() report do not count after it.
TEST_P(ErrorsTest, FailuresWaitedForPastTheKeptOnesAreNotReportedAgain) {
  constexpr int failures = 600;
  std::vector<Task> tasks;
  for (int i = 0; i < failures; ++i)
    tasks.push_back(context->submit([] { throw std::runtime_error("seen"); }));
  for (Task& task : tasks) EXPECT_THROW(task.wait(), std::runtime_error);
  EXPECT_THROW(tasks.back().wait(), std::runtime_error) << "a second wait rethrows too";
  EXPECT_NO_THROW(context->wait_all()) << "every failure was waited for";

  tasks.clear();
  for (int i = 0; i < failures; ++i) tasks.push_back(context->submit([] { throw std::runtime_error("x"); }));
  for (int i = 0; i < failures - 1; ++i)
    EXPECT_THROW(tasks[static_cast<std::size_t>(i)].wait(), std::runtime_error);
  EXPECT_THROW(context->wait_all(), std::runtime_error) << "the one nobody waited for";
  EXPECT_THROW(tasks.back().wait(), std::runtime_error);
  context->spawn([] {});
  EXPECT_NO_THROW(context->wait_all()) << "reported already, and waiting later takes nothing off";
  context->spawn([] { throw std::runtime_error("new"); });
  try {
    context->wait_all();
    FAIL() << "a new failure after the report";
  } catch (const std::runtime_error& error) {
    EXPECT_STREQ(error.what(), "new");
  }
}

TEST(MovedFromContext, EveryUseIsAnErrorNotACrash) {
  Context original(make_settings(2));
  Context moved(std::move(original));
  const auto expect_error = [](auto&& use, const char* what) {
    try {
      use();
      ADD_FAILURE() << what << " on a moved-from Context returned";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::invalid_argument) << what;
      EXPECT_NE(std::string(error.what()).find("moved-from"), std::string::npos) << error.what();
    }
  };
  EXPECT_EQ(original.worker_count(), 0u);
  EXPECT_EQ(original.current_worker(), -1);
  expect_error([&] { original.wait_all(); }, "wait_all");
  expect_error([&] { original.spawn([] {}); }, "spawn");
  expect_error([&] { (void)original.submit([] {}); }, "submit");
  expect_error([&] { Buffer<int> buffer(original, 4); }, "Buffer");
  expect_error([&] { (void)original.stats(); }, "stats");
  expect_error([&] { (void)original.devices(); }, "devices");
  expect_error([&] { (void)original.config(); }, "config");
  expect_error([&] { (void)original.memory_compact(); }, "memory_compact");
  expect_error([&] { TaskPool pool(original); }, "TaskPool");
  expect_error(
      [&] {
        TaskGroup group(original);
        group.spawn([] {});
      },
      "TaskGroup::spawn");
  EXPECT_EQ(moved.submit([] { return; }).wait_for(std::chrono::seconds(60)), true) << "the new owner works";
  expect_error([&] { parallel_for(original, 0, 1000, 10, [](std::size_t) {}); }, "parallel_for");
  expect_error(
      [&] {
        (void)parallel_reduce(
            original, 0, 1000, 0, 0, [](std::size_t, std::size_t) { return 1; },
            [](int a, int b) { return a + b; });
      },
      "parallel_reduce");
  expect_error(
      [&] {
        TaskGroup group(original);
        group.wait();
      },
      "TaskGroup::wait");
}

// Groups and pools keep the runtime alive: used after their Context is gone they fail cleanly.
TEST(OutlivingTheContext, GroupsAndPoolsFailCleanly) {
  std::optional<Context> context(std::in_place, make_settings(2));
  TaskGroup group(*context);
  TaskPool unlaunched(*context);
  TaskPool launched(*context);
  std::atomic<int> ran{0};
  group.spawn([&] { ran.fetch_add(1); });
  unlaunched.add([&] { ran.fetch_add(100); });
  launched.add([&] { ran.fetch_add(1); });
  launched.launch();
  context.reset();  // waits for the group's and the launched pool's tasks
  EXPECT_EQ(ran.load(), 2) << "the unlaunched pool's task never runs";
  EXPECT_NO_THROW(group.wait());
  EXPECT_NO_THROW(launched.wait_all());
  EXPECT_THROW(group.spawn([] {}), Error);
  EXPECT_THROW(unlaunched.wait_all(), Error);
}  // the pools' and the group's destructors run after the context's: no crash (ASan checks)

// A group counts its reference in the shard of the thread that made it. Groups made inside tasks on
// the workers and destroyed on other threads after the Context is gone must keep the runtime alive
// to the last of them (ASan: no use after free), and the last must free it. The sanitizer builds
// check that through their allocators' exact count: the heap is back where it was (a leaked runtime
// holds its task-record slab alone, 512 records, well over the margin); glibc has no such count.
TEST(OutlivingTheContext, GroupsMadeOnWorkersAndDestroyedElsewhereKeepTheRuntimeToTheLast) {
  constexpr int group_count = 16;
  std::atomic<int> ran{0};
  auto scenario = [&] {
    std::vector<std::unique_ptr<TaskGroup>> groups(group_count);
    {
      Context context(make_settings(2));
      TaskGroup outer(context);
      for (int i = 0; i < group_count; ++i) {
        outer.spawn([&, i] {
          auto& group = groups[static_cast<std::size_t>(i)];
          group = std::make_unique<TaskGroup>(context);
          group->spawn([&] { ran.fetch_add(1); });
          group->wait();
          // Fork-join on this worker too: groups made and destroyed in place leave the shard balanced.
          for (int j = 0; j < 100; ++j) {
            TaskGroup inner(context);
            inner.spawn([&] { ran.fetch_add(1); });
          }
        });
      }
      outer.wait();
    }
    // Half go on this thread, half on two others at once; the runtime goes with the last.
    auto reset_every_other = [&](int first) {
      for (int i = first; i < group_count; i += 2) groups[static_cast<std::size_t>(i)].reset();
    };
    std::thread even(reset_every_other, group_count / 2);
    std::thread odd(reset_every_other, group_count / 2 + 1);
    for (int i = 0; i < group_count / 2; ++i) {
      EXPECT_THROW(groups[static_cast<std::size_t>(i)]->spawn([] {}), Error);
      groups[static_cast<std::size_t>(i)].reset();
    }
    even.join();
    odd.join();
  };
  // Each run on a thread of its own, whose exit returns its thread-local caches; the first run
  // also makes whatever the process keeps once (logging, topology).
  std::thread(scenario).join();
#if NERVE_TEST_COUNTS_HEAP
  const std::size_t before = __sanitizer_get_current_allocated_bytes();
#endif
  std::thread(scenario).join();
  EXPECT_EQ(ran.load(), 2 * group_count * 101);
#if NERVE_TEST_COUNTS_HEAP
  EXPECT_LT(__sanitizer_get_current_allocated_bytes(), before + 64 * 1024)
      << "the runtime outlived its last group";
#endif
}

// A group or pool may outlive its Context; using it then says the context is gone (it used to say
// "being destroyed", as if waiting could help).
TEST(ContextLifetime, GroupAndPoolAfterTheContextIsDestroyedSaySo) {
  auto context = std::make_unique<Context>(make_settings(2));
  TaskGroup group(*context);
  TaskPool pool(*context);
  context.reset();
  for (const auto& use : std::initializer_list<std::function<void()>>{[&] { group.spawn([] {}); },
                                                                      [&] {
                                                                        pool.add([] {});
                                                                        pool.launch();
                                                                      }}) {
    try {
      use();
      ADD_FAILURE() << "use after the context was destroyed did not throw";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::invalid_argument);
      EXPECT_NE(std::string(error.what()).find("has been destroyed"), std::string::npos) << error.what();
    }
  }
}

// Destructors can neither throw nor wait forever: a group or context destroyed while this thread
// holds a mapping their tasks wait for is a reported fatal error, not a silent hang.
TEST(OwnMappingDeadlock, DestroyingAGroupOrContextThatWaitsForThisThreadsMappingIsFatal) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "death tests fork a multi-threaded process, which ThreadSanitizer does not support";
#else
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        Context context(make_settings(2));
        Buffer<int> buffer(context, 4);
        auto reading = buffer.map_read();
        TaskGroup group(context);
        group.spawn([](std::span<int> x) { x[0] = 1; }, write(buffer));
      },
      "~TaskGroup: .*would wait forever");
  EXPECT_DEATH(
      {
        std::optional<Mapped<const int>> reading;
        Context context(make_settings(2));
        Buffer<int> buffer(context, 4);
        reading.emplace(buffer.map_read());
        context.spawn([](std::span<int> x) { x[0] = 1; }, write(buffer));
      },
      "destroying the Context.*would wait forever");
#endif
}

// A TaskPool lives on the heap, so unlike a group its destructor need not wait: destroyed while this
// thread holds a mapping its task waits for, it is detached (logged), and the task runs after the
// mapping goes; the context frees the pool once that task ended (at the next pool, or at shutdown).
TEST(OwnMappingDeadlock, DestroyingAPoolThatWaitsForThisThreadsMappingDetachesIt) {
  Context context(make_settings(2));
  auto buffer = std::make_optional<Buffer<int>>(context, 4);
  std::atomic<int> seen{0};
  {
    auto writing = buffer->map_write();
    writing[0] = 5;
    TaskPool pool(context);
    pool.add([&seen](std::span<const int> x) { seen = x[0]; }, read(*buffer));
    pool.launch();
    // ~TaskPool here: it would wait forever for `writing`.
  }
  context.wait_all();
  EXPECT_EQ(seen.load(), 5);
  {
    TaskPool next(context);
    next.add([&seen](std::span<const int> x) { seen = x[0] + 1; }, read(*buffer));
    next.wait_all();
  }
  EXPECT_EQ(seen.load(), 6);
  buffer.reset();
  expect_no_leaks(context);  // the detached pool was freed after its task, at the next pool
}

// A Context destroyed inside one of its own tasks would wait for that task: a reported fatal error,
// whether the task runs on a worker or on the application thread helping in a wait.
TEST(OwnTaskDeadlock, DestroyingAContextInsideOneOfItsTasksIsFatal) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "death tests fork a multi-threaded process, which ThreadSanitizer does not support";
#else
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        std::optional<Context> context(std::in_place, make_settings(1));  // tasks run on this thread
        TaskGroup group(*context);
        group.spawn([&] {
          TaskGroup inner(*context);
          context.reset();
        });
        group.wait();
      },
      "Context is destroyed inside one of its own tasks");
  EXPECT_DEATH(
      {
        // This thread never waits on the context, so only the worker can run the task.
        std::optional<Context> context(std::in_place, make_settings(2));
        context->spawn([&] { context.reset(); });
        for (;;) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      },
      "Context is destroyed inside one of its own tasks");
#endif
}

// cancel() applies until the next wait() (or successful wait_for()) returns; the group then runs
// tasks again.
TEST_P(ErrorsTest, CancelLastsUntilTheNextWait) {
  TaskGroup group(*context);
  std::atomic<int> ran{0};
  group.cancel();
  group.spawn([&] { ran.fetch_add(1); });
  group.wait();
  EXPECT_EQ(ran.load(), 0);
  Task task = group.submit([&] { ran.fetch_add(1); });
  group.wait();
  EXPECT_EQ(ran.load(), 1);
  EXPECT_EQ(task.status(), TaskStatus::succeeded);
  // A wait_for() that finds the group done ends the cancellation too; one that times out does not.
  Buffer<int> gate(*context, 1);
  std::optional<Mapped<int>> mapping(gate.map_write());
  group.cancel();
  group.spawn([&](std::span<const int>) { ran.fetch_add(1); }, read(gate));
  EXPECT_FALSE(group.wait_for(std::chrono::milliseconds(1)));
  group.spawn([&] { ran.fetch_add(1); });
  mapping.reset();
  EXPECT_TRUE(group.wait_for(std::chrono::seconds(60)));
  EXPECT_EQ(ran.load(), 1) << "cancelled before a wait returned true";
  group.spawn([&] { ran.fetch_add(1); });
  group.wait();
  EXPECT_EQ(ran.load(), 2);
}

// parallel_reduce needs no default constructor: identity and map give every value.
TEST_P(ErrorsTest, ParallelReduceOfATypeWithoutDefaultConstructor) {
  struct Sum {
    explicit Sum(long v) : value(v) {}
    long value;
  };
  const Sum total = parallel_reduce(
      *context, 0, 10000, 7, Sum(0),
      [](std::size_t b, std::size_t e) {
        long s = 0;
        for (std::size_t i = b; i < e; ++i) s += static_cast<long>(i);
        return Sum(s);
      },
      [](Sum a, Sum b) { return Sum(a.value + b.value); });
  EXPECT_EQ(total.value, 10000L * 9999 / 2);
}

TEST_P(ErrorsTest, EmptyHandlesAreErrors) {
  Task empty;
  EXPECT_THROW(empty.wait(), Error);
  EXPECT_THROW(context->submit(TaskOptions{.after = {empty}}, [] {}), Error);
}

TEST_P(ErrorsTest, TaskPoolRunsIndependentTasksAfterItsPredecessors) {
  Buffer<float> out(*context, 64);
  Buffer<float> in(*context, 64);
  context->spawn([](std::span<float> x) { std::fill(x.begin(), x.end(), 2.0f); }, write(in));
  TaskPool pool(*context, 8);
  for (std::size_t chunk = 0; chunk < 8; ++chunk) {
    // Every task declares the *whole* output buffer: inside a pool that does not serialise them.
    pool.add(
        [chunk](std::span<const float> x, std::span<float> y) {
          for (std::size_t i = chunk * 8; i < chunk * 8 + 8; ++i) y[i] = x[i] * 3.0f;
        },
        read(in), write(out));
  }
  EXPECT_EQ(pool.size(), 8u);
  // A task submitted after launch that reads the pool's output waits for the whole pool.
  pool.launch();
  float total = 0;
  Task sum = context->submit(
      [&](std::span<const float> y) {
        for (float v : y) total += v;
      },
      read(out));
  pool.wait_all();
  sum.wait();
  EXPECT_FLOAT_EQ(total, 64 * 6.0f);
  EXPECT_THROW(pool.add([] {}), Error) << "no adding after launch";
}

// Regression: wait_all() inside a task is refused, but only inside one of the context's own: inside
// a task of another context it waited, and hung when this context's work waited for that task (here
// a map of the buffer it writes): a cycle of waits across two contexts, which is not found.
TEST(ContextWaitAll, InsideATaskOfAnotherContextIsRefused) {
  Context first(make_settings(2));
  Context second(make_settings(2));
  Buffer<int> data(first, 4);
  std::string refusal;
  first
      .submit(
          [&](std::span<int>) {
            try {
              second.wait_all();
            } catch (const Error& error) {
              if (error.code() == ErrorCode::invalid_argument) refusal = error.what();
            }
          },
          write(data))
      .wait();
  EXPECT_THAT(refusal, ::testing::HasSubstr("called inside a task of another context"));
  EXPECT_NO_THROW(second.wait_all()) << "outside tasks it waits as ever";
}

// A task waiting for itself — its own Task, its own group, its own pool — would never return: each is
// Error(invalid_argument) naming the task, not a hang. A pool's expected size is a hint, a huge one too.
TEST_P(ErrorsTest, WaitingForItselfIsAnErrorNotAHang) {
  const auto refused = [](auto wait) {
    try {
      wait();
    } catch (const Error& error) {
      return error.code() == ErrorCode::invalid_argument &&
             std::string(error.what()).find("would wait for that task itself") != std::string::npos;
    }
    return false;
  };
  std::optional<Task> self;
  std::atomic<bool> published{false};
  std::atomic<int> refusals{0};
  Task task = context->submit(TaskOptions{.name = "self-waiter"}, [&] {
    while (!published.load(std::memory_order_acquire)) std::this_thread::yield();
    if (refused([&] { self->wait(); })) refusals.fetch_add(1);
    // A finite timed wait cannot deadlock: it is not refused, and times out (task.hpp).
    if (!self->wait_for(std::chrono::milliseconds(5))) refusals.fetch_add(1);
    // One without limit is wait(): refused too (it hung).
    if (refused([&] { (void)self->wait_for(std::chrono::hours::max()); })) refusals.fetch_add(1);
  });
  self = task;
  published.store(true, std::memory_order_release);
  task.wait();

  TaskGroup group(*context);
  group.spawn([&] {
    if (refused([&] { group.wait(); })) refusals.fetch_add(1);
    if (refused([&] { (void)group.wait_for(std::chrono::hours::max()); })) refusals.fetch_add(1);
  });
  group.wait();

  TaskPool pool(*context, SIZE_MAX);
  pool.add([&] {
    if (refused([&] { pool.wait_all(); })) refusals.fetch_add(1);
  });
  pool.wait_all();
  EXPECT_EQ(refusals.load(), 6);
}

// Waiting inside a task for work its own accesses order after it — a Task, a group member or a pool
// that reads what the running task writes, also through a task in between — would never return
// either: Error(invalid_argument) naming both tasks. Work that does not wait for it is waited for.
TEST_P(ErrorsTest, WaitingInsideATaskForWorkOrderedAfterItIsAnErrorNotAHang) {
  Buffer<int> data(*context, 1);
  Buffer<int> other(*context, 1);
  Refusals refusals;
  std::vector<std::string>& messages = refusals.messages;
  const auto expect_refused = [&](auto wait) { refusals.record(wait, "not refused"); };
  std::atomic<int> independent{0};
  context
      ->submit(
          TaskOptions{.name = "writer"},
          [&](std::span<int>) {
            Task reader = context->submit(
                TaskOptions{.name = "reader"}, [](std::span<const int>) {}, read(data));
            expect_refused([&] { reader.wait(); });
            Task behind = context->submit(
                TaskOptions{.name = "behind"}, [](std::span<const int>, std::span<int>) {}, read(data),
                write(other));
            Task further = context->submit(
                TaskOptions{.name = "further"}, [](std::span<const int>) {}, read(other));
            expect_refused([&] { further.wait(); });  // through 'behind'
            TaskPool pool(*context);
            pool.add([](std::span<const int>) {}, read(data));
            pool.launch();
            expect_refused([&] { pool.wait_all(); });
            // Unrelated work is waited for as usual.
            Task free_task = context->submit([&] { independent.fetch_add(1); });
            free_task.wait();
            TaskGroup group(*context);
            group.spawn([&] { independent.fetch_add(1); });
            group.wait();
            // (~TaskPool: the pool's wait would never end either; it is detached and runs later.)
          },
          write(data))
      .wait();
  context->wait_all();
  EXPECT_EQ(independent.load(), 2);
  ASSERT_EQ(messages.size(), 3u);
  EXPECT_THAT(messages[0],
              ::testing::HasSubstr("Task::wait() inside task 'writer' would wait for task 'reader'"));
  EXPECT_THAT(messages[1], ::testing::HasSubstr("would wait for task 'further'"));
  EXPECT_THAT(messages[2], ::testing::HasSubstr("would wait for task 'task pool'"));
}

// A task that waits runs other tasks on top of itself meanwhile; one of them waiting for the task
// below it (or its group or pool, or work ordered after it) could never return, as the task below
// resumes only after it does. Found when that wait has nothing left to run: Error(invalid_argument)
// naming both, not a hang; the task below then resumes and finishes (a differential test hung on it
// every time). With two slots and the application thread outside nerve, the worker running 'waiter'
// is the only one that can take 'helper'; it does so inside waiter's wait.
TEST(WaitBehindSuspended, AWaitForATaskSuspendedBelowOnTheSameThreadIsAnErrorNotAHang) {
  for (const SchedulerPolicy policy :
       {SchedulerPolicy::eager, SchedulerPolicy::locality_aware_stealing, SchedulerPolicy::heft}) {
    for (const std::string wait : {"Task::wait()", "TaskGroup::wait()", "TaskPool::wait_all()"}) {
      Context context(make_settings(2, policy));
      Buffer<int> gate(context, 1), result(context, 1);
      auto held = gate.map_write();  // keeps waiter's child from starting
      std::atomic<bool> waiting{false}, helping{false};
      const auto waiter_body = [&] {
        TaskGroup children(context);
        children.spawn([](std::span<const int>, std::span<int> out) { out[0] = 1; }, read(gate),
                       write(result));
        waiting.store(true);
        children.wait();
      };
      TaskGroup outer(context);  // the waiter's group, or
      TaskPool pool(context);    // its pool
      std::optional<Task> waiter;
      if (wait == "TaskPool::wait_all()") {
        pool.add(TaskOptions{.name = "waiter"}, waiter_body);
        pool.launch();
      } else {
        waiter = outer.submit(TaskOptions{.name = "waiter"}, waiter_body);
      }
      while (!waiting.load()) std::this_thread::yield();
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // into its wait, asleep
      Task helper = context.submit(TaskOptions{.name = "helper"}, [&] {
        helping.store(true);
        if (wait == "Task::wait()") waiter->wait();
        if (wait == "TaskGroup::wait()") outer.wait();
        if (wait == "TaskPool::wait_all()") pool.wait_all();
      });
      while (!helping.load()) std::this_thread::yield();
      std::string message;
      try {
        helper.wait();
      } catch (const Error& error) {
        EXPECT_EQ(error.code(), ErrorCode::invalid_argument);
        message = error.what();
      }
      EXPECT_THAT(message,
                  ::testing::HasSubstr(wait + " inside task 'helper' would never return: it waits for "
                                              "task 'waiter'"))
          << static_cast<int>(policy);
      held[0] = 0;
      held.unmap();
      outer.wait();  // the waiter resumed and finished
      pool.wait_all();
      EXPECT_EQ(result.to_vector()[0], 1);
      context.wait_all();
    }
  }
}

// The same for the other ways to be behind a suspended task (a C API audit hung on the first two):
// the suspended task is a pool's, which has no successors of its own (work ordered after it waits
// for its pool as a whole); a mapping, or try_map, of data a suspended task writes. And a pool's task
// waiting for a pool ordered after its own is refused before it waits, like a plain task. With one
// slot every task runs on the application thread, nested in the waits, in a known order.
TEST(WaitBehindSuspended, APoolsTaskOrAMappingBehindATaskSuspendedBelowIsAnErrorNotAHang) {
  for (const SchedulerPolicy policy :
       {SchedulerPolicy::eager, SchedulerPolicy::locality_aware_stealing, SchedulerPolicy::heft}) {
    for (const bool below_in_pool : {true, false}) {
      SCOPED_TRACE(below_in_pool ? "below is a pool's task" : "below is a plain task");
      Context context(make_settings(1, policy));
      Buffer<int> data(context, 4);
      Refusals refusals;
      const auto above = [&] {
        TaskPool behind(context);
        behind.add([](std::span<const int>) {}, read(data));
        behind.launch();
        refusals.record([&] { behind.wait_all(); }, "pool wait returned");
        refusals.record([&] { (void)data.map_read(); }, "mapped");
        refusals.record([&] { (void)data.try_map(Access::read); }, "try_map returned");
        // (~TaskPool: its wait could never end either; the pool is detached and runs later.)
      };
      const auto below = [&](std::span<int> out) {
        TaskPool inner(context);
        inner.add(TaskOptions{.name = "above"}, above);
        inner.wait_all();
        out[0] = 1;
      };
      if (below_in_pool) {
        TaskPool outer(context);
        outer.add(TaskOptions{.name = "below"}, below, write(data));
        outer.add([] {});
        outer.wait_all();
      } else {
        context.submit(TaskOptions{.name = "below"}, below, write(data)).wait();
      }
      context.wait_all();
      EXPECT_EQ(data.to_vector()[0], 1) << "below resumed and finished";
      ASSERT_EQ(refusals.messages.size(), 3u);
      for (const std::string& message : refusals.messages) {
        EXPECT_THAT(message, ::testing::HasSubstr("inside task 'above' would never return: it waits for task "
                                                  "'below'"))
            << static_cast<int>(policy);
      }
      EXPECT_THAT(refusals.messages[0], ::testing::StartsWith("TaskPool::wait_all()"));
      EXPECT_THAT(refusals.messages[1], ::testing::HasSubstr("read map of bytes [0, 16)"));
    }
  }
  // A pool's task waiting for a pool its own pool's accesses order after it.
  Context context(make_settings(2));
  Buffer<int> data(context, 1);
  Refusals refusals;
  TaskPool writers(context);
  writers.add(
      TaskOptions{.name = "writer"},
      [&](std::span<int>) {
        TaskPool readers(context);
        readers.add([](std::span<const int>) {}, read(data));
        readers.launch();
        refusals.record([&] { readers.wait_all(); }, "pool wait returned");
      },
      write(data));
  writers.wait_all();
  context.wait_all();
  ASSERT_EQ(refusals.messages.size(), 1u);
  EXPECT_THAT(refusals.messages[0],
              ::testing::HasSubstr("TaskPool::wait_all() inside task 'writer' would wait for"));
}

// A blocking map runs ready tasks while it waits to be granted, and returns only after they do:
// a task it runs that waits for work ordered after that mapping (a map, or Task::wait()) would
// never return either (a torture audit hung there). The map waits for a write mapping another
// thread holds until the task has run; with one slot the task runs in that map's wait.
TEST(WaitBehindSuspended, ATaskRunByAWaitingMapThatWaitsBehindThatMappingIsAnErrorNotAHang) {
  for (const SchedulerPolicy policy :
       {SchedulerPolicy::eager, SchedulerPolicy::locality_aware_stealing, SchedulerPolicy::heft}) {
    for (const bool inner_map : {true, false}) {
      SCOPED_TRACE(inner_map ? "the task maps" : "the task waits for a task");
      Context context(make_settings(1, policy));
      Buffer<int> data(context, 4);
      std::atomic<bool> held{false};
      std::atomic<bool> inner_done{false};
      std::thread holder([&] {
        auto mapped = data.map_write();
        mapped[0] = 1;
        held = true;
        held.notify_all();
        inner_done.wait(false);
      });
      held.wait(false);
      Refusals refusals;
      context.spawn(TaskOptions{.name = "inner"}, [&] {
        // Ordered after the outer map's mapping, which cannot end before this task returns.
        Task after_mapping = context.submit(
            TaskOptions{.name = "writer"}, [](std::span<int> values) { values[0] += 10; }, read_write(data));
        if (inner_map) {
          refusals.record([&] { (void)data.map_read(); }, "mapped");
        } else {
          refusals.record([&] { after_mapping.wait(); }, "waited");
        }
        inner_done = true;
        inner_done.notify_all();
      });
      {
        auto mapped = data.map_read();  // waits for the holder, running "inner" meanwhile
        EXPECT_EQ(mapped[0], 1);
      }
      holder.join();
      context.wait_all();
      EXPECT_EQ(data.to_vector()[0], 11) << "the writer ran after the unmap";
      ASSERT_EQ(refusals.messages.size(), 1u);
      EXPECT_THAT(refusals.messages[0],
                  ::testing::HasSubstr("inside task 'inner' would never return: it waits for the map of "
                                       "bytes [0, 16) of buffer"))
          << static_cast<int>(policy);
    }
  }
}

// Waits inside tasks on two threads, each for work ordered behind a task suspended on the other's
// stack: 'waiter 1' writes `first` and, in its group's wait, runs 'helper 1' on top of itself, which
// waits for a reader of `second` — behind 'waiter 2', which runs 'helper 2' the same way, waiting
// for a reader of `first`. Neither stack alone shows it (a torture audit hung on it); the second
// wait to park finds the cycle: Error(invalid_argument) naming the task on the other thread, and
// everything then finishes. Or 'helper 1' maps `second` instead, or both helpers map (a map that
// gives up leaves its pending mapping to end once granted). Or, without helpers, two running tasks that wait
// for each other. The helpers are queued, each on its waiter's worker, before either waiter waits, and both
// run before either waits; should a thread still take the other's (it would be the one-stack case), the scene
// is played again.
TEST(WaitBehindSuspended, WaitsOnTwoThreadsBehindEachOthersSuspendedTasksAreAnErrorNotAHang) {
  for (const SchedulerPolicy policy :
       {SchedulerPolicy::eager, SchedulerPolicy::locality_aware_stealing, SchedulerPolicy::heft}) {
    enum class Scene { helpers_wait, helper_maps, helpers_map, tasks_wait };
    for (const Scene scene :
         {Scene::helpers_wait, Scene::helper_maps, Scene::helpers_map, Scene::tasks_wait}) {
      const bool helpers = scene != Scene::tasks_wait;
      SCOPED_TRACE(scene == Scene::helpers_wait  ? "helpers on top of waiters"
                   : scene == Scene::helper_maps ? "a helper maps"
                   : scene == Scene::helpers_map ? "both helpers map"
                                                 : "two tasks waiting for each other");
      bool across = false;
      for (int round = 0; round < 20 && !across; ++round) {
        Context context(make_settings(3, policy));  // two workers
        const std::vector<int> zero{0};
        Buffer<int> first(context, std::span(zero)), second(context, std::span(zero));
        std::optional<Task> reads_first, reads_second, waiter_1, waiter_2;
        std::atomic<int> started{0};
        std::atomic<bool> go{false};
        std::atomic<int> queued{0}, helpers_started{0}, stayed{0}, finished{0};
        Refusals refusals;
        const auto waiter = [&](const char* name, std::optional<Task>& behind_other,
                                std::optional<Task>& other) {
          return [&, name](std::span<int> own) {
            // Both waiters running (on the two workers) before anything else is queued.
            started.fetch_add(1);
            while (started.load() < 2 || !go.load()) std::this_thread::yield();
            if (!helpers) {
              refusals.record([&] { other->wait(); }, "returned");
            } else {
              const std::thread::id here = std::this_thread::get_id();
              TaskGroup group(context);
              group.spawn(TaskOptions{.name = name}, [&, here] {
                if (std::this_thread::get_id() == here) stayed.fetch_add(1);
                // Both helpers running before either waits: an idle thread would steal the other.
                helpers_started.fetch_add(1);
                while (helpers_started.load() < 2) std::this_thread::yield();
                const bool maps = scene == Scene::helpers_map ||
                                  (scene == Scene::helper_maps && &behind_other == &reads_second);
                if (maps) {
                  Buffer<int>& other_data = &behind_other == &reads_second ? second : first;
                  refusals.record([&] { (void)other_data.map_read(); }, "returned");
                } else {
                  refusals.record([&] { behind_other->wait(); }, "returned");
                }
              });
              // Both helpers queued before either waiter waits: each then takes its own first.
              queued.fetch_add(1);
              while (queued.load() < 2) std::this_thread::yield();
              group.wait();
            }
            own[0] += 1;
            finished.fetch_add(1);
            finished.notify_all();
          };
        };
        waiter_1 = context.submit(TaskOptions{.name = "waiter 1"}, waiter("helper 1", reads_second, waiter_2),
                                  read_write(first));
        waiter_2 = context.submit(TaskOptions{.name = "waiter 2"}, waiter("helper 2", reads_first, waiter_1),
                                  read_write(second));
        reads_first = context.submit([](std::span<const int>) {}, read(first));
        reads_second = context.submit([](std::span<const int>) {}, read(second));
        go.store(true);
        // Asleep outside nerve until the waiters finish: a wait here would take tasks too (a third
        // stack), and a spinning thread would slow the workers enough for one to steal a helper.
        for (int count = finished.load(); count < 2; count = finished.load()) finished.wait(count);
        context.wait_all();  // the refused wait's task goes on, and finishes
        EXPECT_EQ(first.to_vector()[0] + second.to_vector()[0], 2);
        std::lock_guard lock(refusals.lock);
        ASSERT_EQ(refusals.messages.size(), 2u);
        const auto refused = std::count_if(refusals.messages.begin(), refusals.messages.end(),
                                           [](const std::string& said) { return said != "returned"; });
        ASSERT_EQ(refused, 1) << refusals.messages[0] << "\n" << refusals.messages[1];
        across = !helpers || stayed.load() == 2;
        if (!across) continue;
        const std::string& message =
            refusals.messages[0] != "returned" ? refusals.messages[0] : refusals.messages[1];
        EXPECT_THAT(message,
                    ::testing::MatchesRegex(".*inside task '(helper|waiter) [12]' would never return: it "
                                            "waits for task 'waiter [12]' \\(or for tasks ordered after "
                                            "it\\), held on another thread's stack below a wait.*"))
            << static_cast<int>(policy);
        if (scene == Scene::helpers_map) {  // a map gave up its mapping: the data is free again
          EXPECT_THAT(message, ::testing::StartsWith("a read map of bytes [0, 4) of buffer"));
        }
      }
      EXPECT_TRUE(across) << "the helpers never stayed on their waiters' threads; policy "
                          << static_cast<int>(policy);
    }
  }
}

// The same cycle closed only after both waits parked: each waiter waits for a group whose task is
// held back by a mapping, until the application thread adds to each group a reader of the data the
// other waiter writes. Nothing wakes the parked waits then; they look for cycles again every few
// tens of milliseconds, and one of them is refused.
TEST(WaitBehindSuspended, ACycleOfWaitsClosedAfterTheyParkedIsFoundToo) {
  // Also while one waiter holds a mapping (of a buffer nobody else uses): its wait then looks again
  // for work behind that mapping, and must still park listed, where the cycle is found (found by
  // review: waiting in timed slices instead, it was never listed, and both waits hung).
  for (const bool holds_mapping : {false, true}) {
    SCOPED_TRACE(holds_mapping ? "waiter 2 holds a mapping" : "no mapping held");
    Context context(make_settings(3, SchedulerPolicy::locality_aware_stealing));  // two workers
    const std::vector<int> zero{0};
    Buffer<int> first(context, std::span(zero)), second(context, std::span(zero)), gate(context, 1);
    Buffer<int> unrelated(context, 1);
    auto held = gate.map_write();
    TaskGroup group_1(context), group_2(context);
    for (TaskGroup* group : {&group_1, &group_2}) group->spawn([](std::span<const int>) {}, read(gate));
    std::atomic<int> started{0}, finished{0};
    Refusals refusals;
    const auto waiter = [&](TaskGroup& group) {
      return [&](std::span<int> own) {
        started.fetch_add(1);
        while (started.load() < 2) std::this_thread::yield();  // on two threads
        std::optional<Mapped<int>> own_mapping;
        if (holds_mapping && &group == &group_2) own_mapping.emplace(unrelated.map_write());
        refusals.record([&] { group.wait(); }, "returned");
        if (own_mapping) own_mapping->unmap();
        own[0] += 1;
        finished.fetch_add(1);
        finished.notify_all();
      };
    };
    context.submit(TaskOptions{.name = "waiter 1"}, waiter(group_1), read_write(first));
    context.submit(TaskOptions{.name = "waiter 2"}, waiter(group_2), read_write(second));
    while (started.load() < 2) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // both parked, nothing to find
    group_1.spawn(
        TaskOptions{.name = "reads second"}, [](std::span<const int>) {}, read(second));
    group_2.spawn(
        TaskOptions{.name = "reads first"}, [](std::span<const int>) {}, read(first));
    finished.wait(0);  // the refused waiter; the other waits for the gate
    held.unmap();
    for (int count = finished.load(); count < 2; count = finished.load()) finished.wait(count);
    group_1.wait();
    group_2.wait();
    context.wait_all();
    EXPECT_EQ(first.to_vector()[0] + second.to_vector()[0], 2);
    ASSERT_EQ(refusals.messages.size(), 2u);
    const auto refused = std::find_if(refusals.messages.begin(), refusals.messages.end(),
                                      [](const std::string& said) { return said != "returned"; });
    ASSERT_NE(refused, refusals.messages.end());
    EXPECT_THAT(*refused,
                ::testing::MatchesRegex("TaskGroup::wait\\(\\) inside task 'waiter [12]' would never "
                                        "return: it waits for task 'waiter [12]'.*held on another "
                                        "thread's stack.*"));
    EXPECT_EQ(std::count(refusals.messages.begin(), refusals.messages.end(), "returned"), 1);
  }
}

// A ~TaskGroup cannot fail without ending the program: in a cycle of waits it leaves the refusal to
// another wait of the cycle, even when it is the last to park (here 'waiter 1' leaves its group's
// scope, which waits for a reader of `second`, after 'waiter 2' waits for a reader of `first`).
TEST(WaitBehindSuspended, AGroupsDestructorInACycleLeavesTheRefusalToAnotherWait) {
  Context context(make_settings(3, SchedulerPolicy::locality_aware_stealing));  // two workers
  const std::vector<int> zero{0};
  Buffer<int> first(context, std::span(zero)), second(context, std::span(zero));
  std::optional<Task> reads_first;
  std::atomic<int> started{0}, finished{0};
  std::atomic<bool> go{false};
  Refusals refusals;
  const auto both_running = [&] {
    started.fetch_add(1);
    while (started.load() < 2 || !go.load()) std::this_thread::yield();
  };
  context.submit(
      TaskOptions{.name = "waiter 1"},
      [&](std::span<int> own) {
        both_running();
        {
          TaskGroup group(context);
          group.spawn(
              TaskOptions{.name = "reads second"}, [](std::span<const int>) {}, read(second));
          std::this_thread::sleep_for(std::chrono::milliseconds(100));  // 'waiter 2' waits first
        }
        own[0] += 1;
        finished.fetch_add(1);
        finished.notify_all();
      },
      read_write(first));
  context.submit(
      TaskOptions{.name = "waiter 2"},
      [&](std::span<int> own) {
        both_running();
        refusals.record([&] { reads_first->wait(); }, "returned");
        own[0] += 1;
        finished.fetch_add(1);
        finished.notify_all();
      },
      read_write(second));
  reads_first = context.submit([](std::span<const int>) {}, read(first));
  go.store(true);
  for (int count = finished.load(); count < 2; count = finished.load()) finished.wait(count);
  context.wait_all();
  EXPECT_EQ(first.to_vector()[0] + second.to_vector()[0], 2);
  ASSERT_EQ(refusals.messages.size(), 1u);
  EXPECT_THAT(refusals.messages[0],
              ::testing::HasSubstr("Task::wait() inside task 'waiter 2' would never return: it waits for "
                                   "task 'waiter 1' (or for tasks ordered after it), held on another "
                                   "thread's stack"));
}

// A time-stepping loop submitted up front — a chain of steps over one buffer, each a fork-join
// inside — checks at each wait that it does not wait behind its own step. What it waits for there
// (members without predecessors or only behind other members, a task already ready) cannot be
// ordered behind a task outside the group, so the check walks nothing: it used to walk every later step, per
// wait (O(steps²) for the loop). A member that is ordered behind the step is still found, and one whose
// predecessor has finished is waited for.
TEST_P(ErrorsTest, ForkJoinInsideAChainOfStepsDoesNotWalkTheStepsAfterIt) {
  constexpr int steps = 300;
  Buffer<long> state(*context, 1);
  std::atomic<std::uint64_t>& visits = context->impl()->cycle_walk_visits;
  const std::uint64_t visits_before = visits.load();
  context->spawn([](std::span<long> x) { x[0] = 0; }, write(state));
  for (int i = 0; i < steps; ++i) {
    context->spawn(
        [&](std::span<long> x) {
          std::atomic<long> sum{0};
          TaskGroup group(*context);
          for (int k = 0; k < 4; ++k) group.spawn([&] { sum.fetch_add(1); });
          group.wait();
          // The group's own little graph: a member behind another member.
          Buffer<long> scratch(*context, 1);
          group.spawn([](std::span<long> s) { s[0] = 2; }, write(scratch));
          group.spawn([&](std::span<const long> s) { sum.fetch_add(s[0]); }, read(scratch));
          group.wait();
          parallel_for(*context, 0, 8, 1, [&](std::size_t) { sum.fetch_add(1); });
          Task ready = context->submit([&] { sum.fetch_add(1); });
          ready.wait();
          x[0] += sum.load();
        },
        read_write(state));
  }
  context->wait_all();
  EXPECT_EQ(state.to_vector()[0], 15L * steps);
  EXPECT_LT(visits.load() - visits_before, std::uint64_t{steps})
      << "the waits walked the chain of steps after theirs";

  Buffer<int> written(*context, 1);
  context->submit([](std::span<int> x) { x[0] = 1; }, write(written)).wait();
  Refusals refusals;
  TaskGroup behind(*context);  // outlives the steps: its member runs after them
  std::atomic<int> after_finished{0};
  for (int i = 0; i < 3; ++i) {
    context->spawn(
        TaskOptions{.name = "step"},
        [&, i](std::span<long>) {
          if (i == 0) {
            // Ordered after the last step (it reads what the chain writes): never done in this step.
            behind.spawn(
                TaskOptions{.name = "reads the state"}, [](std::span<const long>) {}, read(state));
            refusals.record([&] { behind.wait(); }, "not refused");
          }
          TaskGroup group(*context);
          group.spawn([&](std::span<const int> x) { after_finished.fetch_add(x[0]); }, read(written));
          group.wait();
        },
        read_write(state));
  }
  context->wait_all();
  behind.wait();
  EXPECT_EQ(after_finished.load(), 3);
  ASSERT_EQ(refusals.messages.size(), 1u);
  EXPECT_THAT(
      refusals.messages[0],
      ::testing::HasSubstr("TaskGroup::wait() inside task 'step' would wait for task 'reads the state'"));
}

// Mapping, inside a task, a buffer range the task itself accesses in a conflicting mode — or one a task
// ordered after it accesses — would wait for the running task: Error(invalid_argument), not a hang.
// A mapping that does not conflict is granted; nothing of a refused one is left behind.
TEST_P(ErrorsTest, MappingInsideATaskThatWouldWaitForItIsAnErrorNotAHang) {
  Buffer<int> data(*context, 4);
  Buffer<int> other(*context, 4);
  Refusals refusals;
  std::vector<std::string>& messages = refusals.messages;
  const auto outcome = [&](auto map) { refusals.record(map, "granted"); };
  context->submit(
      TaskOptions{.name = "writes data"}, [&](std::span<int>) { outcome([&] { (void)data.map_read(); }); },
      write(data));
  context->wait_all();  // one at a time: each refusal is for the running task itself
  context->submit(
      TaskOptions{.name = "reads data"},
      [&](std::span<const int>) { outcome([&] { (void)data.map_write(); }); }, read(data));
  context->wait_all();
  context->submit(
      TaskOptions{.name = "updates data"}, [&](std::span<int>) { outcome([&] { (void)data.to_vector(); }); },
      read_write(data));
  context->wait_all();
  context->submit(
      TaskOptions{.name = "reads slice"},
      [&](std::span<const int>) {
        outcome([&] { (void)data.map_read(); });               // readers do not conflict
        outcome([&] { (void)data.slice(2, 2).map_write(); });  // nor does a range it does not access
      },
      read(data.slice(0, 2)));
  context->wait_all();
  // Through a task ordered after it: 'later' writes what the running task reads.
  Task later;
  std::atomic<bool> go{false};
  context->submit(
      TaskOptions{.name = "reads other"},
      [&](std::span<const int>) {
        while (!go.load()) std::this_thread::yield();
        outcome([&] { (void)other.map_read(); });
      },
      read(other));
  later = context->submit(
      TaskOptions{.name = "later"}, [](std::span<int> o) { o[0] = 7; }, write(other));
  go.store(true);
  context->wait_all();
  EXPECT_EQ(other.to_vector()[0], 7) << "the refused mapping left nothing behind";
  ASSERT_EQ(messages.size(), 6u);
  EXPECT_THAT(messages[0], ::testing::HasSubstr("inside task 'writes data' would wait for that task itself"));
  EXPECT_THAT(messages[1], ::testing::HasSubstr("inside task 'reads data' would wait for that task itself"));
  EXPECT_THAT(messages[2],
              ::testing::HasSubstr("inside task 'updates data' would wait for that task itself"));
  EXPECT_EQ(messages[3], "granted");
  EXPECT_EQ(messages[4], "granted");
  EXPECT_THAT(messages[5], ::testing::HasSubstr("inside task 'reads other' would wait for task 'later'"));
}

// A task whose body waits (a blocking map, or a wait for a child task) for work behind a mapping this
// thread holds cannot end while the mapping lasts: a wait for that task, for its group or for all is
// Error(buffer_misuse), not a hang, whichever thread runs the task. If another thread runs it, the
// wait finds it parked there (the waits inside tasks are listed while they park), looking again while
// it waits. After the unmap the task goes on (or, run by this thread, failed with the same refusal).
TEST_P(ErrorsTest, AWaitForATaskWhoseBodyWaitsBehindThisThreadsMappingIsRefused) {
  Buffer<int> data(*context, 4);
  for (const char* body : {"map", "child"}) {
    for (const char* wait : {"task", "group", "all"}) {
      SCOPED_TRACE(std::string(body) + " inside, wait for " + wait);
      auto writing = data.map_write();
      TaskGroup group(*context);
      const auto blocked_body = [&context = *context, &data, child = std::string(body) == "child"] {
        if (child) {
          context.submit([](std::span<const int> x) { (void)x[0]; }, read(data)).wait();
        } else {
          (void)data.map_read();
        }
      };
      Task task = std::string(wait) == "group"
                      ? group.submit(TaskOptions{.name = "blocked"}, blocked_body)
                      : context->submit(TaskOptions{.name = "blocked"}, blocked_body);
      const auto wait_for_it = [&] {
        if (std::string(wait) == "task") {
          task.wait();
        } else if (std::string(wait) == "group") {
          group.wait();
        } else {
          context->wait_all();
        }
      };
      try {
        wait_for_it();
        FAIL() << "the wait returned while the task waited for this thread's mapping";
      } catch (const Error& error) {
        EXPECT_EQ(error.code(), ErrorCode::buffer_misuse) << error.what();
      }
      writing.unmap();
      try {
        wait_for_it();
      } catch (const Error& error) {  // the task ran on this thread and its own wait was refused
        EXPECT_EQ(error.code(), ErrorCode::buffer_misuse) << error.what();
      }
      context->wait_all();
    }
  }
}

// A wait inside a task that comes to wait for the task's own mapping is refused while its thread
// keeps finding other work to run (a stream of short tasks from the application thread): it looks
// again between slices of its wait, not only when it runs out of work. Found by review: looking
// again only before parking, it was refused only once the stream ended.
TEST(OwnMappingDeadlock, AWaitInsideATaskIsRefusedWhileItKeepsFindingWork) {
  Context context(make_settings(2));
  Buffer<int> data(context, 4);
  std::atomic<bool> started{false};
  std::atomic<bool> refused{false};
  Task waiting = context.submit(TaskOptions{.name = "maps and waits"}, [&] {
    started = true;
    auto held = data.map_write();
    TaskGroup group(context);
    group.spawn([&] {  // comes to wait for the mapping once the wait is under way
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      group.spawn([](std::span<const int>) {}, read(data));
    });
    try {
      group.wait();
    } catch (const Error& error) {
      refused = error.code() == ErrorCode::buffer_misuse;
    }
    held.unmap();
    group.wait();
  });
  while (!started) std::this_thread::yield();
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!refused && std::chrono::steady_clock::now() < give_up) {
    context.spawn([] {
      const auto begin = std::chrono::steady_clock::now();
      while (std::chrono::steady_clock::now() - begin < std::chrono::microseconds(50)) {
      }
    });
  }
  EXPECT_TRUE(refused.load()) << "the wait was not refused while work kept coming";
  waiting.wait();
  context.wait_all();
}

// try_map() inside a task on a range the task itself accesses in a conflicting mode could only ever
// answer "busy" while the task runs (a polling loop never ended): it is refused as map() is. Busy
// because of another task, it still answers nothing.
TEST_P(ErrorsTest, TryMapInsideATaskOfItsOwnRangeIsAnError) {
  Buffer<int> data(*context, 4);
  Buffer<int> gate(*context, 1);
  std::string refused;
  bool busy = false;
  context
      ->submit(
          TaskOptions{.name = "writes data"},
          [&](std::span<int>) {
            try {
              (void)data.try_map(Access::read);
            } catch (const Error& error) {
              if (error.code() == ErrorCode::invalid_argument) refused = error.what();
            }
          },
          write(data))
      .wait();
  EXPECT_THAT(refused, ::testing::HasSubstr("inside task 'writes data' would wait for that task itself"));
  {
    auto held = gate.map_write();
    Task reader = context->submit([](std::span<const int>) {}, read(gate));
    context->submit([&] { busy = !gate.try_map(Access::write).has_value(); }).wait();
    held.unmap();
    reader.wait();
  }
  EXPECT_TRUE(busy) << "a write behind another task's read is busy, not an error";
}

// A task that launches a pool (or ends a mapping) releases tasks from inside its body: they must be
// queued, not kept as the finishing task's next one — the body's wait for them hung (the released
// task sat where nobody looked).
TEST_P(ErrorsTest, APoolWaitedForInsideATaskRunsItsTasks) {
  std::atomic<int> ran{0};
  for (int round = 0; round < 50; ++round) {
    context
        ->submit([&] {
          TaskPool pool(*context, 1);
          pool.add([&] { ran.fetch_add(1); });
          pool.wait_all();
        })
        .wait();
  }
  EXPECT_EQ(ran.load(), 50);
  Buffer<int> data(*context, 1);
  context
      ->submit([&] {
        Task writer;
        {
          auto mapped = data.map_write();
          mapped[0] = 1;
          writer = context->submit([](std::span<int> d) { d[0] += 1; }, read_write(data));
        }  // unmapped inside the body: the writer is released here
        writer.wait();
      })
      .wait();
  EXPECT_EQ(data.to_vector()[0], 2);
}

TEST_P(ErrorsTest, TaskPoolFailureAndDiscard) {
  {
    TaskPool pool(*context);
    pool.add([] { throw std::runtime_error("pool member failed"); });
    pool.add([] {});
    EXPECT_THROW(pool.wait_all(), std::runtime_error);
  }
  {  // launched, failed, destroyed without a wait: the failure is logged, not lost
    ::testing::internal::CaptureStderr();
    {
      TaskPool unwatched(*context);
      unwatched.add([] { throw std::runtime_error("nobody waited"); });
      unwatched.launch();
    }
    const std::string log = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(log.find("task pool destroyed with an unreported task failure: nobody waited"),
              std::string::npos)
        << log;
  }
  std::atomic<int> ran{0};
  {
    TaskPool never_launched(*context);
    never_launched.add([&] { ran.fetch_add(1); });
  }
  context->wait_all();
  EXPECT_EQ(ran.load(), 0) << "an unlaunched pool's tasks are discarded";
}

// A pool is ordered and poisoned by its members' accesses, not by the range spanning them: work on
// a gap between them neither waits for the pool nor is cancelled by its failure, while work on a
// member's range is; a piece only read by the members does not poison a later reader.
TEST_P(ErrorsTest, APoolCoversItsMembersRangesNotTheGapsBetween) {
  Buffer<int> data(*context, 100);
  Buffer<int> gate(*context, 1);
  auto held = gate.map_write();  // keeps the pool from starting
  TaskPool pool(*context);
  pool.add([](std::span<const int>, std::span<int>) { throw std::runtime_error("pool member failed"); },
           read(gate), write(data.slice(0, 10)));
  pool.add([](std::span<const int>, std::span<const int>) {}, read(gate), read(data.slice(90, 10)));
  pool.launch();
  std::atomic<bool> gap_ran{false};
  Task gap = context->submit([&](std::span<int>) { gap_ran = true; }, write(data.slice(40, 10)));
  Task tail = context->submit([](std::span<const int>) {}, read(data.slice(90, 10)));
  Task head = context->submit([](std::span<const int>) {}, read(data.slice(0, 10)));
  if (workers() > 1) {
    EXPECT_TRUE(gap.wait_for(std::chrono::seconds(30))) << "the gap waited for a pool that has not started";
  }
  held.unmap();
  EXPECT_THROW(pool.wait_all(), std::runtime_error);
  EXPECT_NO_THROW(gap.wait()) << "the gap is no member's: not poisoned";
  EXPECT_TRUE(gap_ran.load());
  EXPECT_NO_THROW(tail.wait()) << "only read by the pool: nothing to poison";
  EXPECT_THROW(head.wait(), TaskCancelled) << "reads what the failed member wrote";
}

// Regression: past 1024 ranges in one buffer, a pool was ordered by the whole span from its lowest
// to its highest byte: work in a wide gap between its ranges waited for it and was cancelled by its
// failure. Now only the smallest gaps are merged (here those of one element between neighbours).
TEST(PoolRanges, APoolOfManyRangesMergesOnlyItsSmallestGaps) {
  Context context(make_settings(2));
  constexpr int members = 1100;  // every other element, in two runs with a wide gap between them
  constexpr int wide_gap_start = 2 * (members / 2), second_run = 5000;
  Buffer<int> data(context, second_run + 2 * members);
  TaskPool pool(context);
  for (int k = 0; k < members; ++k) {
    const int at = k < members / 2 ? 2 * k : second_run + 2 * k;
    pool.add(
        [k](std::span<int> x) {
          if (k == 0) throw std::runtime_error("member 0 failed");
          x[0] = 1;
        },
        write(data.slice(static_cast<std::size_t>(at), 1)));
  }
  pool.launch();
  Task in_wide_gap = context.submit([](std::span<const int>) {}, read(data.slice(wide_gap_start + 1000, 1)));
  Task on_a_member = context.submit([](std::span<const int>) {}, read(data.slice(0, 1)));
  EXPECT_THROW(pool.wait_all(), std::runtime_error);
  EXPECT_NO_THROW(in_wide_gap.wait()) << "the wide gap is no member's: not poisoned";
  EXPECT_THROW(on_a_member.wait(), TaskCancelled) << "reads what the failed member wrote";
  context.wait_all();
}

// Regression: a pool over more buffers than 65535 / 1024 with many ranges each, or over more than
// 65535 buffers, failed to launch with "a task declares N accesses", which no task did. The first
// now merges each buffer's gaps sooner; the second is refused as the pool's doing.
TEST(PoolRanges, APoolOverManyBuffersLaunchesOrIsRefusedAsAPool) {
  Context context(make_settings(2));
  {
    constexpr std::size_t buffers = 70, per_buffer = 1000;  // 70000 ranges of one element
    std::vector<Buffer<int>> data;
    for (std::size_t b = 0; b < buffers; ++b) data.emplace_back(context, std::vector<int>(2 * per_buffer, 0));
    TaskPool pool(context);
    for (std::size_t b = 0; b < buffers; ++b) {
      for (std::size_t k = 0; k < per_buffer; ++k)
        pool.add([](std::span<int> x) { x[0] = 7; }, write(data[b].slice(2 * k, 1)));
    }
    ASSERT_NO_THROW(pool.wait_all());
    long sum = 0;
    for (auto& buffer : data) {
      for (const int value : buffer.to_vector()) sum += value;
    }
    EXPECT_EQ(sum, 7L * static_cast<long>(buffers * per_buffer));
  }
  std::vector<Buffer<int>> one_each;
  TaskPool pool(context);
  for (std::size_t b = 0; b < 65536; ++b) {
    one_each.emplace_back(context, 1);
    pool.add([](std::span<int> x) { x[0] = 1; }, write(one_each.back()));
  }
  try {
    pool.launch();
    FAIL() << "a pool over 65536 buffers was launched";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::invalid_argument);
    EXPECT_THAT(error.what(), ::testing::HasSubstr("a task pool's tasks touch 65536 buffers; a pool is "
                                                   "ordered by at most 65535: launch them as several pools"));
  }
}

// cause_of(): what a TaskCancelled's cause() says: its message, "null", or "not a std::exception".
std::string cause_of(const TaskCancelled& cancelled) {
  if (cancelled.cause() == nullptr) return "null";
  try {
    std::rethrow_exception(cancelled.cause());
  } catch (const TaskCancelled& inner) {
    return std::string("a TaskCancelled: ") + inner.what();
  } catch (const std::exception& original) {
    return original.what();
  }
  return "not a std::exception";
}

// cancellation_of(): what `wait` threw if it was a TaskCancelled — its cause as cause_of() says it,
// and its message — or {} (`thrown` false) when it returned. Anything else it throws propagates.
struct Cancellation {
  bool thrown = false;
  std::string cause;
  std::string message;
};
template <class Wait>
Cancellation cancellation_of(Wait&& wait) {
  try {
    wait();
  } catch (const TaskCancelled& cancelled) {
    return {true, cause_of(cancelled), cancelled.what()};
  }
  return {};
}

// A pool's wait rethrows a task's own failure over a task's cancellation, whichever ended first: a
// task cancelled because a task outside the pool failed ends at once, the failing one later, and the
// wait reported the cancellation (a differential test expected the pool's own failure).
TEST_P(ErrorsTest, APoolsWaitRethrowsItsOwnTasksFailureBeforeACancellation) {
  Buffer<int> x(*context, 4), y(*context, 4), z(*context, 4);
  Task outside = context->submit(
      TaskOptions{.name = "outside"}, [](std::span<int>) { throw std::runtime_error("outside"); }, write(x));
  TaskPool pool(*context);
  pool.add([](std::span<const int>, std::span<int>) {}, read(x), write(y));  // cancelled at once
  pool.add(
      [](std::span<int>) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        throw std::runtime_error("member");
      },
      write(z));
  try {
    pool.wait_all();
    ADD_FAILURE() << "the pool's failure was not rethrown";
  } catch (const TaskCancelled& cancelled) {
    ADD_FAILURE() << "a cancellation was rethrown over the member's failure: " << cancelled.what();
  } catch (const std::runtime_error& error) {
    EXPECT_STREQ(error.what(), "member");
  }
  EXPECT_NO_THROW(pool.wait_all()) << "rethrown once";
  EXPECT_THROW(outside.wait(), std::runtime_error);
  // With no member failed, the first cancellation is what the wait rethrows.
  TaskPool cancelled_only(*context);
  cancelled_only.add([](std::span<const int>) {}, read(x));
  const Cancellation cancelled = cancellation_of([&] { cancelled_only.wait_all(); });
  EXPECT_TRUE(cancelled.thrown) << "the cancellation was not rethrown";
  EXPECT_EQ(cancelled.cause, "outside");
}

// A pool after a pool: the second one's tasks meet the first one's data per range, as other work
// does — a task reading what a cancelled task of the first pool was to write is cancelled with its
// cause, one reading what the first pool's tasks that ran wrote runs (the second pool cancelled all
// of its tasks that read any range of the first: a differential test, 6 seeds of 3000).
TEST_P(ErrorsTest, APoolAfterAPoolMeetsItsDataPerRange) {
  Buffer<int> x(*context, 4), y(*context, 8), z(*context, 4), w(*context, 4);
  context->spawn(
      TaskOptions{.name = "a"}, [](std::span<int>) { throw std::runtime_error("boom"); }, write(x));
  TaskPool first(*context);
  first.add([](std::span<const int>, std::span<int>) {}, read(x), write(y.slice(0, 4)));  // cancelled
  first.add([](std::span<int> out) { std::fill(out.begin(), out.end(), 3); }, write(y.slice(4, 4)));
  first.launch();
  std::atomic<bool> good_reader_ran{false}, bad_reader_ran{false};
  TaskPool second(*context);
  second.add(
      [&](std::span<const int> in, std::span<int> out) {
        good_reader_ran = true;
        std::copy(in.begin(), in.end(), out.begin());
      },
      read(y.slice(4, 4)), write(z));
  second.add([&](std::span<const int>, std::span<int>) { bad_reader_ran = true; }, read(y.slice(0, 4)),
             write(w));
  const Cancellation cancelled = cancellation_of([&] { second.wait_all(); });
  EXPECT_TRUE(cancelled.thrown) << "the task reading the cancelled task's output was not cancelled";
  EXPECT_EQ(cancelled.cause, "boom") << cancelled.message;
  EXPECT_TRUE(good_reader_ran.load()) << "it reads what a task of the first pool that ran wrote";
  EXPECT_FALSE(bad_reader_ran.load());
  EXPECT_EQ(z.map_read()[0], 3);
  EXPECT_THROW(first.wait_all(), TaskCancelled);
  EXPECT_THROW(context->wait_all(), std::runtime_error) << "a, waited for by nobody";
}

// Regression (PoolMemberReadingAFailedTasksDataCancelledEveryMember): pool members never depend on
// each other, so a failed task's data cancels only the members that read it, with its exception, as
// it would plain tasks. A member that only writes runs, and what it wrote is readable afterwards; so
// does one reading a slice of the same buffer that the failed task did not write. (The gate cancelled
// every member, and every later reader of anything the pool wrote.)
TEST_P(ErrorsTest, APoolCancelsOnlyTheMembersThatReadAFailedTasksData) {
  Buffer<int> x(*context, 8), y(*context, 4), z(*context, 4), w(*context, 4);
  context->spawn([](std::span<int> out) { std::fill(out.begin(), out.end(), 5); }, write(x.slice(4, 4)));
  Task failed = context->submit(
      TaskOptions{.name = "a"}, [](std::span<int>) { throw std::runtime_error("boom"); },
      write(x.slice(0, 4)));
  std::atomic<bool> consumer_ran{false}, writer_ran{false}, slice_reader_ran{false};
  TaskPool pool(*context);
  pool.add(
      [&](std::span<const int>, std::span<int> out) {
        consumer_ran = true;
        std::fill(out.begin(), out.end(), 1);
      },
      read(x.slice(0, 4)), write(y));
  pool.add(
      [&](std::span<int> out) {
        writer_ran = true;
        std::fill(out.begin(), out.end(), 7);
      },
      write(z));
  pool.add(
      [&](std::span<const int> in, std::span<int> out) {
        slice_reader_ran = true;
        std::copy(in.begin(), in.end(), out.begin());
      },
      read(x.slice(4, 4)), write(w));
  const Cancellation cancelled = cancellation_of([&] { pool.wait_all(); });
  EXPECT_TRUE(cancelled.thrown) << "the member reading a's data was not cancelled";
  EXPECT_EQ(cancelled.cause, "boom") << cancelled.message;
  EXPECT_THAT(cancelled.message, ::testing::HasSubstr("because task 'a', which it depends on, failed: boom"));
  EXPECT_FALSE(consumer_ran.load());
  EXPECT_TRUE(writer_ran.load()) << "it reads nothing the failed task wrote";
  EXPECT_TRUE(slice_reader_ran.load()) << "it reads a slice the failed task did not write";
  Task z_reader = context->submit([](std::span<const int> in) { EXPECT_EQ(in[0], 7); }, read(z));
  EXPECT_NO_THROW(z_reader.wait()) << "z holds the data of a member that ran";
  EXPECT_EQ(z.map_read()[3], 7);
  EXPECT_EQ(w.map_read()[0], 5);
  Task y_reader = context->submit([](std::span<const int>) {}, read(y));
  const Cancellation read = cancellation_of([&] { y_reader.wait(); });
  EXPECT_TRUE(read.thrown) << "read what the cancelled member was to write";
  EXPECT_EQ(read.cause, "boom") << read.message;
  EXPECT_THROW(failed.wait(), std::runtime_error);
  EXPECT_NO_THROW(context->wait_all());
}

// launch_half_cancelled_pool(): a pool whose first task writes 1s to x[0, 4) once `go` is set, and
// whose second, reading what the failing task 'a' writes to `input`, is cancelled ("boom"): x[4, 8)
// is the output it was to write.
void launch_half_cancelled_pool(Context& context, TaskPool& pool, Buffer<int>& x, Buffer<int>& input,
                                std::atomic<bool>& go) {
  context.spawn(
      TaskOptions{.name = "a"}, [](std::span<int>) { throw std::runtime_error("boom"); }, write(input));
  pool.add(
      [&go](std::span<int> out) {
        while (!go.load()) std::this_thread::yield();
        std::fill(out.begin(), out.end(), 1);
      },
      write(x.slice(0, 4)));
  pool.add([](std::span<const int>, std::span<int>) {}, read(input), write(x.slice(4, 4)));
  pool.launch();
}

// Regression (APoolsOverwrittenCancelledOutputCancelledItsReaders, differential test): a read of a
// pool's data is cancelled for the part a cancelled task of the pool was to write only while the
// pool is still that part's last writer. Work reading what the pool's other task wrote and, in the
// same range, what a later task wrote over the cancelled task's output runs; a read registered
// before that write is still cancelled. Both for readers registered while the pool runs (its gate
// notes what they read) and after it finished (decided as they register), and for a host mapping.
// (The gate checked the whole range read against the cancelled task's, and cancelled them all.)
TEST_P(ErrorsTest, AReadOfAPoolsCancelledOutputWrittenSinceRuns) {
  for (const bool while_running : {true, false}) {
    SCOPED_TRACE(while_running ? "readers registered while the pool runs" : "after it finished");
    Buffer<int> x(*context, 8), input(*context, 1);
    std::atomic<bool> go{!while_running};
    TaskPool pool(*context);
    launch_half_cancelled_pool(*context, pool, x, input, go);
    if (!while_running) EXPECT_THROW(pool.wait_all(), TaskCancelled);
    Task early = context->submit([](std::span<const int>) {}, read(x));
    context->spawn([](std::span<int> out) { std::fill(out.begin(), out.end(), 2); }, write(x.slice(4, 4)));
    std::vector<int> seen;
    Task late = context->submit([&](std::span<const int> in) { seen.assign(in.begin(), in.end()); }, read(x));
    go = true;
    const Cancellation cancelled = cancellation_of([&] { early.wait(); });
    EXPECT_TRUE(cancelled.thrown) << "it read what the cancelled task was to write";
    EXPECT_EQ(cancelled.cause, "boom") << cancelled.message;
    EXPECT_NO_THROW(late.wait()) << "it read what the pool's task that ran and a later task wrote";
    EXPECT_THAT(seen, ::testing::ElementsAre(1, 1, 1, 1, 2, 2, 2, 2));
    EXPECT_NO_THROW({
      const auto mapped = x.map_read();
      EXPECT_EQ(mapped[0], 1);
      EXPECT_EQ(mapped[7], 2);
    });
    if (while_running) EXPECT_THROW(pool.wait_all(), TaskCancelled);
    EXPECT_THROW(context->wait_all(), std::runtime_error) << "a, waited for by nobody";
  }
}

// A buffer of zero elements is an ordering token (MEMORY.md): a failure reaches its readers through it
// as through any buffer, pool or not. (A pool's member reading a token a failed task wrote ran, and
// a task reading a token a failed pool wrote ran: their empty ranges met no failed range.)
TEST_P(ErrorsTest, AFailureReachesTheReadersOfAZeroElementBufferThroughPools) {
  for (const bool failed_writer_is_a_pool : {false, true}) {
    for (const bool reader_is_a_pool : {false, true}) {
      SCOPED_TRACE(std::string(failed_writer_is_a_pool ? "a pool" : "a task") + " fails, " +
                   (reader_is_a_pool ? "a pool" : "a task") + " reads");
      Buffer<int> token(*context, 0), other(*context, 4);
      const auto fail = [](std::span<int>) { throw std::runtime_error("boom"); };
      TaskPool writers(*context);
      if (failed_writer_is_a_pool) {
        writers.add(fail, write(token));
        writers.launch();
      } else {
        context->spawn(TaskOptions{.name = "a"}, fail, write(token));
      }
      std::atomic<bool> reader_ran{false}, bystander_ran{false};
      const auto reader = [&](std::span<const int>) { reader_ran = true; };
      TaskPool readers(*context);
      Task read_task;
      if (reader_is_a_pool) {
        readers.add(reader, read(token));
        readers.add([&](std::span<int>) { bystander_ran = true; }, write(other));
        readers.launch();
      } else {
        read_task = context->submit(reader, read(token));
      }
      const Cancellation cancelled =
          cancellation_of([&] { reader_is_a_pool ? readers.wait_all() : read_task.wait(); });
      EXPECT_TRUE(cancelled.thrown) << "the reader of the failed writer's token was not cancelled";
      EXPECT_EQ(cancelled.cause, "boom") << cancelled.message;
      EXPECT_FALSE(reader_ran.load());
      if (reader_is_a_pool) EXPECT_TRUE(bystander_ran.load()) << "it reads nothing the failure touched";
      if (failed_writer_is_a_pool) {
        EXPECT_THROW(writers.wait_all(), std::runtime_error);
        EXPECT_NO_THROW(context->wait_all()) << "the pool's wait rethrew its failure";
      } else {
        EXPECT_THROW(context->wait_all(), std::runtime_error) << "a, waited for by nobody";
      }
    }
  }
  // A member cancelled by the failure was to write a token: the token's readers are cancelled, the
  // readers of what the pool's other member wrote run.
  Buffer<int> input(*context, 1), token(*context, 0), other(*context, 4);
  context->spawn(
      TaskOptions{.name = "a"}, [](std::span<int>) { throw std::runtime_error("boom"); }, write(input));
  TaskPool pool(*context);
  pool.add([](std::span<const int>, std::span<int>) {}, read(input), write(token));
  pool.add([](std::span<int> out) { out[0] = 1; }, write(other));
  pool.launch();
  Task token_reader = context->submit([](std::span<const int>) {}, read(token));
  Task other_reader = context->submit([](std::span<const int> in) { EXPECT_EQ(in[0], 1); }, read(other));
  const Cancellation cancelled = cancellation_of([&] { token_reader.wait(); });
  EXPECT_TRUE(cancelled.thrown) << "it reads the token a cancelled member was to write";
  EXPECT_EQ(cancelled.cause, "boom") << cancelled.message;
  EXPECT_NO_THROW(other_reader.wait());
  EXPECT_THROW(pool.wait_all(), TaskCancelled);
  EXPECT_THROW(context->wait_all(), std::runtime_error) << "a, waited for by nobody";
}

// A gate's notes of what its readers read outlive the readers: a reader cancelled by them finishes
// and its record is recycled, and a later reader in the same record must not meet the old notes —
// here one that reads only what the pool's task that ran wrote. (Notes were consulted by record
// address, so it was cancelled too.) Sequential waits with one slot recycle the records at once.
TEST(PoolReaders, ANoteOfAFinishedReaderDoesNotCancelALaterReaderInItsRecord) {
  Context context(make_settings(1));
  Buffer<int> x(context, 8), input(context, 1);
  std::atomic<bool> go{false};
  TaskPool pool(context);
  launch_half_cancelled_pool(context, pool, x, input, go);
  std::vector<Task> noted;  // noted while the pool runs
  for (int i = 0; i < 64; ++i)
    noted.push_back(context.submit([](std::span<const int>) {}, read(x.slice(4, 4))));
  go = true;
  for (Task& reader : noted) EXPECT_THROW(reader.wait(), TaskCancelled);
  noted.clear();
  // A write over the cancelled output lets the trackers drop the readers: their records go back.
  context.submit([](std::span<int> out) { std::fill(out.begin(), out.end(), 2); }, write(x.slice(4, 4)))
      .wait();
  for (int round = 0; round < 200; ++round) {
    Task later = context.submit([](std::span<const int> in) { EXPECT_EQ(in[0], 1); }, read(x.slice(0, 4)));
    EXPECT_NO_THROW(later.wait()) << "round " << round << ": it reads what the pool's task that ran wrote";
  }
  EXPECT_THROW(pool.wait_all(), TaskCancelled);
  EXPECT_THROW(context.wait_all(), std::runtime_error);
}

// Readers of half-cancelled pools' output submitted by three application threads at once, on six
// buffers, while the pools run and after: the notes are taken under each gate's lock by whichever
// thread registers. Every reader of the good half runs and sees it; every reader of the other half is
// cancelled.
TEST(PoolReaders, ReadersFromSeveralThreadsAreEachDecidedByWhatTheyRead) {
  Context context(make_settings(3));
  for (int round = 0; round < 10; ++round) {
    constexpr std::size_t buffers = 6;
    std::vector<Buffer<int>> xs;
    std::vector<std::unique_ptr<TaskPool>> pools;
    std::atomic<bool> go{false};
    for (std::size_t b = 0; b < buffers; ++b) {
      xs.emplace_back(context, 8);
      Buffer<int> input(context, 1);
      pools.push_back(std::make_unique<TaskPool>(context));
      launch_half_cancelled_pool(context, *pools.back(), xs.back(), input, go);
    }
    std::atomic<int> wrong{0};
    std::vector<std::thread> threads;
    for (std::size_t t = 0; t < 3; ++t) {
      threads.emplace_back([&, t] {
        std::vector<std::pair<Task, Task>> readers;
        for (std::size_t i = 0; i < 40; ++i) {
          Buffer<int>& x = xs[(t * 7 + i) % buffers];
          readers.emplace_back(
              context.submit([](std::span<const int> in) { EXPECT_EQ(in[0], 1); }, read(x.slice(0, 4))),
              context.submit([](std::span<const int>) {}, read(x.slice(4, 4))));
        }
        for (auto& [good, cancelled] : readers) {
          try {
            good.wait();
          } catch (...) {
            ++wrong;
          }
          // (A structured binding captured by name needs Clang 16: Debian's 14 refuses it.)
          if (cancellation_of([&reader = cancelled] { reader.wait(); }).cause != "boom") ++wrong;
        }
      });
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // some readers register before it ends
    go = true;
    for (std::thread& thread : threads) thread.join();
    EXPECT_EQ(wrong.load(), 0) << "round " << round;
    for (auto& pool : pools) EXPECT_THROW(pool->wait_all(), TaskCancelled);
    EXPECT_THROW(context.wait_all(), std::runtime_error);
  }
}

// Regression (CancelledPoolGaveItsDependentsATaskCancelledAsCause): past a pool whose member was
// cancelled, dependents are cancelled as behind a plain cancelled task: cause() is the original
// exception, not the member's TaskCancelled; and with none when the cancellation was requested,
// whose message then says a task it depends on was cancelled, not that one failed.
TEST_P(ErrorsTest, DependentsOfACancelledPoolGetTheOriginalCause) {
  {  // cancelled because a task failed
    Buffer<int> x(*context, 4), y(*context, 4);
    Task failed = context->submit(
        TaskOptions{.name = "a"}, [](std::span<int>) { throw std::runtime_error("boom"); }, write(x));
    TaskPool pool(*context);
    pool.add([](std::span<const int>, std::span<int>) {}, read(x), write(y));
    EXPECT_THROW(pool.wait_all(), TaskCancelled);
    Task reader = context->submit([](std::span<const int>) {}, read(y));
    const Cancellation cancelled = cancellation_of([&] { reader.wait(); });
    EXPECT_TRUE(cancelled.thrown) << "read what a cancelled member was to write";
    EXPECT_EQ(cancelled.cause, "boom") << cancelled.message;
    EXPECT_THAT(cancelled.message,
                ::testing::HasSubstr("because task 'a', which it depends on, failed: boom"));
    const Cancellation mapped = cancellation_of([&] { (void)y.map_read(); });
    EXPECT_TRUE(mapped.thrown) << "mapped what a cancelled member was to write";
    EXPECT_EQ(mapped.cause, "boom") << mapped.message;
    EXPECT_THROW(failed.wait(), std::runtime_error);
  }
  {  // cancelled on request
    Buffer<int> held(*context, 1), y(*context, 4), w(*context, 4);
    Task requested;
    {
      auto mapping = held.map_write();  // keeps the task from starting before the cancel
      TaskGroup group(*context);
      requested = group.submit([](std::span<const int>, std::span<int>) {}, read(held), write(y));
      group.cancel();
      mapping.unmap();
      group.wait();
    }
    TaskPool pool(*context);
    pool.add([](std::span<const int>, std::span<int>) {}, read(y), write(w));
    const Cancellation cancelled = cancellation_of([&] { pool.wait_all(); });
    EXPECT_TRUE(cancelled.thrown) << "a member read what a cancelled task was to write";
    EXPECT_EQ(cancelled.cause, "null") << cancelled.message;
    Task reader = context->submit([](std::span<const int>) {}, read(w));
    const Cancellation read = cancellation_of([&] { reader.wait(); });
    EXPECT_TRUE(read.thrown) << "read what a cancelled member was to write";
    EXPECT_EQ(read.cause, "null") << read.message;
    EXPECT_THAT(read.message, ::testing::HasSubstr("because a task it depends on was cancelled"));
    EXPECT_THAT(read.message, ::testing::Not(::testing::HasSubstr("failed")));
  }
  EXPECT_NO_THROW(context->wait_all()) << "the failure was waited for; cancellations are not failures";
}

TEST_P(ErrorsTest, DestroyingContextWithWorkInFlightDrains) {
  std::atomic<int> ran{0};
  {
    Context local(make_settings(workers(), std::get<1>(GetParam())));
    Buffer<int> data(local, 1);
    for (int i = 0; i < 1000; ++i) local.spawn([&](std::span<int>) { ran.fetch_add(1); }, read_write(data));
    local.spawn([] { throw std::runtime_error("unreported failure"); });
  }
  EXPECT_EQ(ran.load(), 1000);
}

TEST_P(ErrorsTest, HandlesOutlivingTheContextFailCleanly) {
  Task task;
  Buffer<int> buffer;
  {
    Context local(make_settings(workers(), std::get<1>(GetParam())));
    buffer = Buffer<int>(local, 4);
    task = local.submit([](std::span<int> b) { b[0] = 1; }, write(buffer));
  }
  EXPECT_TRUE(task.done()) << "the context drained its tasks";
  EXPECT_THROW(buffer.map_read(), Error) << "the buffer's context is gone";
  try {
    buffer.map_read();
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::buffer_misuse);
    EXPECT_NE(std::string(error.what()).find("destroyed"), std::string::npos) << error.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Runtime, ErrorsTest, NERVE_RUNTIME_PARAMS, runtime_param_name);

}  // namespace
}  // namespace nerve::testing

namespace nerve::testing {
namespace {

// A TaskGroup outlives its context, and another thread keeps spawning into it while the context is
// destroyed. Every task either ran before ~Context returned or never runs (its buffers' data is
// freed): the tasks that slipped in while the destruction ended fail the group's wait with
// invalid_argument, later spawns are refused (invalid_argument, or buffer_misuse for the buffer of a
// destroyed context), and nothing hangs — not a submitter
// back-pressured by a full queue that no worker drains any more (eager, depth 2). Before, such tasks
// ran later inside group.wait() on freed buffer data (a crash), or the submitter spun for ever.
TEST(ContextDestruction, SpawnsRacingTheDestructionRunBeforeItEndsOrNever) {
  for (const char* policy : {"locality_aware_stealing", "eager", "heft"}) {
    for (const char* depth : {"1024", "2"}) {
      SCOPED_TRACE(std::string(policy) + ", queue depth " + depth);
      for (int round = 0; round < 6; ++round) {
        Settings settings = make_settings(2);
        settings.set("scheduler.policy", policy);
        settings.set("task_queue.per_device_queue_depth", depth);
        auto context = std::make_unique<Context>(settings);
        auto group = std::make_unique<TaskGroup>(*context);
        Buffer<long> data(*context, 16);
        data.map_write()[0] = 0;
        std::atomic<long> ran{0};
        std::atomic<bool> started{false};
        std::string spawn_error, wait_error;
        std::thread spawner([&, buffer = data] {
          started = true;
          // Bounded: a submitter that never stops would keep the destruction waiting for ever
          // (it waits for every task, including ones submitted meanwhile).
          try {
            for (std::size_t i = 0; i < 20000; ++i)
              group->spawn([&ran](std::span<long> d) { d[0] += 1, ran.fetch_add(1); },
                           read_write(buffer.slice(i % 16, 1)));
          } catch (const Error& error) {
            spawn_error = name(error.code());
          }
          try {
            group->wait();
          } catch (const Error& error) {
            wait_error = name(error.code());
          }
        });
        while (!started) std::this_thread::yield();
        std::this_thread::sleep_for(std::chrono::microseconds(200 * round));
        context.reset();
        const long ran_by_then = ran.load();
        spawner.join();
        EXPECT_EQ(ran.load(), ran_by_then) << "a task ran after its context was destroyed";
        // Refused: the context is gone, or its buffer with it.
        EXPECT_TRUE(spawn_error.empty() || spawn_error == "invalid_argument" ||
                    spawn_error == "buffer_misuse")
            << spawn_error;
        EXPECT_TRUE(wait_error.empty() || wait_error == "invalid_argument") << wait_error;
        group.reset();
      }
    }
  }
}

}  // namespace
}  // namespace nerve::testing
