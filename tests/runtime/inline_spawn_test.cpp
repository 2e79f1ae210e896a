// Back-pressure on fork-join spawns: once an application thread's queue is past
// task_queue.per_device_queue_depth, its next spawns of plain closures run at once, inside spawn(),
// in slot 0 (ContextImpl::begin_spawn), until the workers have taken the queue down to half the
// depth. Each such task must behave as a queued one would: run once, on its own copy of the closure,
// with current_worker() 0, its exception kept for wait_all().
#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "support/runtime_fixture.hpp"

namespace nerve::testing {
namespace {

constexpr int depth = 16;

Settings back_pressured(const char* policy, bool record_tasks = false) {
  Settings settings;
  settings.use_environment(false);
  settings.set("parallel.thread_pool_size", "2");
  settings.set("scheduler.policy", policy);
  settings.set("task_queue.per_device_queue_depth", std::to_string(depth));
  settings.set("gpu.devices", "none");
  if (record_tasks) settings.set("perf.record_tasks", "true");
  return settings;
}

// BlockedWorker occupies the one worker of a 2-slot context until release(), so that whatever the
// submitter queues stays queued. It sleeps rather than spins: the machine may have two cores.
class BlockedWorker {
 public:
  explicit BlockedWorker(Context& context) {
    context.spawn([this] {
      started_ = true;
      while (!released_) std::this_thread::sleep_for(std::chrono::microseconds(200));
    });
    while (!started_) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  void release() { released_ = true; }

 private:
  std::atomic<bool> started_{false};
  std::atomic<bool> released_{false};
};

// Which spawn() call the submitting thread is inside, and what each task saw when it ran.
struct SpawnLog {
  std::atomic<int> inside_spawn{-1};
  std::vector<int> ran_inside;  // per task: the spawn() the submitter was in, -2 if elsewhere
  std::vector<int> worker;
  std::atomic<int> runs{0};
  explicit SpawnLog(int tasks) : ran_inside(static_cast<std::size_t>(tasks), -3), worker(ran_inside) {}
};

void spawn_logged(Context& context, SpawnLog& log, int tasks) {
  const std::thread::id submitter = std::this_thread::get_id();
  for (int i = 0; i < tasks; ++i) {
    log.inside_spawn = i;
    context.spawn([&log, &context, i, submitter] {
      const auto at = static_cast<std::size_t>(i);
      log.ran_inside[at] = std::this_thread::get_id() == submitter ? log.inside_spawn.load() : -2;
      log.worker[at] = context.current_worker();
      log.runs.fetch_add(1);
    });
    log.inside_spawn = -1;
  }
}

TEST(InlineSpawn, SpawnsPastTheDepthRunAtOnceInSlotZeroAndTheQueuedOnesWaitForTheWorkers) {
  for (const char* policy : {"locality_aware_stealing"}) {
    Context context(back_pressured(policy));
    BlockedWorker blocked(context);
    constexpr int tasks = 300;
    SpawnLog log(tasks);
    spawn_logged(context, log, tasks);
    // The worker is blocked: everything that ran so far ran on the submitter.
    const int ran_on_submitter = log.runs.load();
    EXPECT_GE(ran_on_submitter, tasks - depth - depth / 8 - 2) << policy << ": the queue grew past its depth";
    int inline_runs = 0;
    for (int i = 0; i < tasks; ++i) {
      const auto at = static_cast<std::size_t>(i);
      if (log.ran_inside[at] == -3) continue;  // still queued
      // Run at once, not taken from the queue: inside its own spawn(), in slot 0.
      EXPECT_EQ(log.ran_inside[at], i) << policy << ": task " << i << " ran inside another spawn()";
      EXPECT_EQ(log.worker[at], 0) << policy << ": task " << i;
      ++inline_runs;
    }
    EXPECT_EQ(inline_runs, ran_on_submitter);
    EXPECT_EQ(context.current_worker(), -1) << policy << ": slot 0 was not given back";
    blocked.release();
    context.wait_all();
    EXPECT_EQ(log.runs.load(), tasks) << policy;
    for (std::size_t at = 0; at < log.worker.size(); ++at) {
      EXPECT_GE(log.worker[at], 0) << policy << ": task " << at << " ran outside the workers";
    }
    std::uint64_t tasks_run = 0;
    for (const auto& worker : context.stats().workers) tasks_run += worker.tasks_run;
    EXPECT_EQ(tasks_run, static_cast<std::uint64_t>(tasks + 1)) << policy << ": the tasks run are counted";
    expect_no_leaks(context);
  }
}

// Below the depth nothing runs on the submitter, before or after a stretch of back-pressure: a task
// may wait for what its submitter does after spawn() returns.
TEST(InlineSpawn, AQueueBackUnderItsDepthQueuesAgain) {
  Context context(back_pressured("locality_aware_stealing"));
  {
    BlockedWorker blocked(context);
    SpawnLog log(200);
    spawn_logged(context, log, 200);
    ASSERT_GT(log.runs.load(), 100);
    blocked.release();
    context.wait_all();
  }
  std::atomic<bool> flag{false};
  std::atomic<int> saw_flag{0};
  for (int i = 0; i < depth / 2; ++i) {
    context.spawn([&] {
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (!flag && std::chrono::steady_clock::now() < give_up)
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      if (flag) saw_flag.fetch_add(1);
    });
  }
  flag = true;
  context.wait_all();
  EXPECT_EQ(saw_flag.load(), depth / 2) << "a spawn ran at once although its queue was short";
}

// Any other submission ends a stretch of spawns run at once: after one, handles queued below the
// depth and then a plain spawn leave that spawn queued (it waits for what its submitter does after
// spawn() returns: run inside it, it would wait 2 s for nothing). Found by review: the flag outlived
// the stretch, and the spawn ran at once with 12 tasks queued.
TEST(InlineSpawn, AnotherSubmissionEndsTheStretchOfSpawnsRunAtOnce) {
  Context context(back_pressured("locality_aware_stealing"));
  {
    BlockedWorker blocked(context);
    SpawnLog log(100);
    spawn_logged(context, log, 100);
    ASSERT_GT(log.runs.load(), 50);  // ended running them at once
    blocked.release();
    context.wait_all();
  }
  const std::thread::id submitter = std::this_thread::get_id();
  std::atomic<bool> go{false};
  std::atomic<bool> in_spawn{false};
  std::atomic<int> ran_inside_spawn{0};
  const auto waits_for_go = [&] {
    if (std::this_thread::get_id() == submitter && in_spawn) ran_inside_spawn.fetch_add(1);
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (!go && std::chrono::steady_clock::now() < give_up)
      std::this_thread::sleep_for(std::chrono::microseconds(100));
  };
  std::vector<Task> handles;
  handles.push_back(context.submit(waits_for_go));  // the worker takes it and waits in it
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  for (int i = 0; i < depth - 4; ++i) handles.push_back(context.submit(waits_for_go));  // below the depth
  in_spawn = true;
  context.spawn(waits_for_go);
  in_spawn = false;
  go = true;
  context.wait_all();
  EXPECT_EQ(ran_inside_spawn.load(), 0) << "a spawn to a queue below its depth ran inside spawn()";
}

// A spawn run at once is a task for what its body does: a submission there past
// task_queue.max_in_flight goes on (running the task it submitted if that is the newest), as inside
// any task, instead of waiting for the count to fall — here behind work that waits for the body.
// Found by review: without a frame for it, the body's submission helped run P, which waits for the
// body, on the body's own stack.
TEST(InlineSpawn, ASubmissionInsideASpawnRunAtOnceIsATasksSubmission) {
  Settings settings = back_pressured("locality_aware_stealing");
  settings.set("task_queue.max_in_flight", "64");
  Context context(settings);
  Buffer<int> data(context, 4);
  BlockedWorker blocked(context);
  const std::thread::id submitter = std::this_thread::get_id();
  std::atomic<bool> claimed{false};
  std::atomic<bool> flag{false};
  std::atomic<bool> p_saw_flag{false};
  std::atomic<int> body_worker{-2};
  for (int i = 0; i < 300; ++i) {
    context.spawn([&] {
      // The first task run at once plays the body; the others do nothing.
      if (std::this_thread::get_id() != submitter || claimed.exchange(true)) return;
      body_worker = context.current_worker();
      blocked.release();
      context.spawn(
          [&](std::span<int>) {  // P: waits for what the body does after its submissions
            const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(3);
            while (!flag && std::chrono::steady_clock::now() < give_up)
              std::this_thread::sleep_for(std::chrono::microseconds(100));
            p_saw_flag = flag.load();
          },
          write(data));
      for (int k = 0; k < 100; ++k) context.spawn([](std::span<const int>) {}, read(data));
      flag = true;
    });
  }
  blocked.release();
  context.wait_all();
  ASSERT_TRUE(claimed.load()) << "no spawn ran at once";
  EXPECT_EQ(body_worker.load(), 0);
  EXPECT_TRUE(p_saw_flag.load()) << "the body's submission ran P, which waits for the body, under it";
  // wait_all() inside such a spawn would wait for the spawn itself: refused, as inside any task.
  std::atomic<int> refused{0};
  std::atomic<int> ran_on_submitter{0};
  BlockedWorker again(context);
  for (int i = 0; i < 100; ++i) {
    context.spawn([&] {
      if (std::this_thread::get_id() != submitter) return;
      ran_on_submitter.fetch_add(1);
      try {
        context.wait_all();
      } catch (const Error& error) {
        if (error.code() == ErrorCode::invalid_argument) refused.fetch_add(1);
      }
    });
  }
  again.release();
  context.wait_all();
  EXPECT_GT(ran_on_submitter.load(), 50);
  EXPECT_EQ(refused.load(), ran_on_submitter.load());
}

// While the submitter holds a mapping its spawns stay queued: run at once on its thread, a body
// mapping the same data would be refused (this thread's mapping), where a queued task waits for
// the unmap. Found by review: 82 of 100 such bodies failed with buffer_misuse.
TEST(InlineSpawn, NothingRunsAtOnceWhileTheSubmitterHoldsAMapping) {
  Context context(back_pressured("locality_aware_stealing"));
  Buffer<int> data(context, 4);
  std::atomic<int> mapped{0};
  {
    BlockedWorker blocked(context);
    auto writing = data.map_write();
    writing.span()[0] = 5;
    for (int i = 0; i < 100; ++i) {
      context.spawn([&] {
        if (data.map_read().span()[0] == 5) mapped.fetch_add(1);
      });
    }
    writing.unmap();
    blocked.release();
    EXPECT_NO_THROW(context.wait_all());
  }
  EXPECT_EQ(mapped.load(), 100);
}

// A closure is copied into its task, so a mutable lambda spawned as an lvalue starts afresh in every
// task, run at once or not; an rvalue is moved.
TEST(InlineSpawn, EachTaskRunsItsOwnCopyOfTheClosure) {
  Context context(back_pressured("locality_aware_stealing"));
  BlockedWorker blocked(context);
  std::atomic<int> first_calls{0};
  std::atomic<int> later_calls{0};
  auto counting = [n = 0, &first_calls, &later_calls]() mutable {
    (++n == 1 ? first_calls : later_calls).fetch_add(1);
  };
  for (int i = 0; i < 200; ++i) context.spawn(counting);
  EXPECT_GT(first_calls.load(), 150) << "the spawns past the depth did not run at once";
  std::vector<int> moved_from_sizes;
  for (int i = 0; i < 50; ++i) {
    std::vector<int> payload(100, i);
    context.spawn([payload = std::move(payload), i] {
      if (payload.size() != 100 || payload.front() != i) throw std::runtime_error("payload lost");
    });
  }
  blocked.release();
  context.wait_all();  // rethrows a lost payload
  EXPECT_EQ(first_calls.load(), 200);
  EXPECT_EQ(later_calls.load(), 0) << "a task ran the caller's closure, or another task's, not its copy";
  counting();  // the caller's own closure was never called either
  EXPECT_EQ(first_calls.load(), 201);
}

// What a task run at once throws is kept for wait_all(), like a queued task's; the spawns go on.
TEST(InlineSpawn, AnExceptionOfATaskRunAtOnceReachesWaitAll) {
  Context context(back_pressured("locality_aware_stealing"));
  BlockedWorker blocked(context);
  std::atomic<int> ran{0};
  for (int i = 0; i < 200; ++i) {
    context.spawn([&ran, i] {
      ran.fetch_add(1);
      if (i == 150) throw std::runtime_error("task 150 failed");
    });
  }
  EXPECT_GE(ran.load(), 150) << "task 150 was queued, not run at once";
  blocked.release();
  try {
    context.wait_all();
    FAIL() << "wait_all() did not rethrow";
  } catch (const std::runtime_error& error) {
    EXPECT_STREQ(error.what(), "task 150 failed");
  }
  EXPECT_EQ(ran.load(), 200) << "the other tasks still run";
  EXPECT_NO_THROW(context.wait_all()) << "a failure is reported once";
}

// A closure whose copy throws makes spawn() throw, as it does for a queued task, and gives slot 0 back.
struct ThrowingCopy {
  std::atomic<int>* calls;
  bool throw_on_copy = false;
  ThrowingCopy(std::atomic<int>* c, bool t) : calls(c), throw_on_copy(t) {}
  ThrowingCopy(const ThrowingCopy& other) : calls(other.calls), throw_on_copy(other.throw_on_copy) {
    if (throw_on_copy) throw std::runtime_error("copy failed");
  }
  void operator()() const { calls->fetch_add(1); }
};

TEST(InlineSpawn, AClosureWhoseCopyThrowsMakesSpawnThrowAndGivesSlotZeroBack) {
  Context context(back_pressured("locality_aware_stealing"));
  BlockedWorker blocked(context);
  std::atomic<int> calls{0};
  const ThrowingCopy fine(&calls, false);
  for (int i = 0; i < 100; ++i) context.spawn(fine);  // past the depth: the last ones run at once
  ASSERT_GE(calls.load(), 100 - depth - depth / 8 - 2);
  const ThrowingCopy failing(&calls, true);
  EXPECT_THROW(context.spawn(failing), std::runtime_error);
  std::atomic<int> in_slot_zero{0};
  context.spawn([&] { in_slot_zero = context.current_worker() == 0 ? 1 : -1; });
  EXPECT_EQ(in_slot_zero.load(), 1) << "slot 0 was still taken after the failed copy";
  blocked.release();
  context.wait_all();
  EXPECT_EQ(calls.load(), 100);
  expect_no_leaks(context);
}

// Recording every task (perf.record_tasks) keeps every spawn a recorded task, and eager's first come,
// first served queue runs nothing out of turn: no spawn runs at once.
TEST(InlineSpawn, NothingRunsAtOnceWhileTasksAreRecordedOrUnderEager) {
  for (const bool eager : {false, true}) {
    Context context(back_pressured(eager ? "eager" : "locality_aware_stealing", !eager));
    BlockedWorker blocked(context);
    SpawnLog log(200);
    spawn_logged(context, log, 200);
    // The submitter may help, but with tasks from the queue: mostly older ones than the spawn() it
    // is in (the queue is run down from past the depth to half of it, newest first).
    int ran_in_own_spawn = 0;
    for (std::size_t at = 0; at < log.ran_inside.size(); ++at) {
      ran_in_own_spawn += log.ran_inside[at] == static_cast<int>(at) ? 1 : 0;
    }
    EXPECT_LT(ran_in_own_spawn, log.runs.load() / 2 + 1) << (eager ? "eager" : "recorded");
    blocked.release();
    context.wait_all();
    EXPECT_EQ(log.runs.load(), 200);
    if (!eager) {
      EXPECT_EQ(context.stats().task_records.size(), 201u) << "a task ran unrecorded";
    }
  }
}

}  // namespace
}  // namespace nerve::testing
