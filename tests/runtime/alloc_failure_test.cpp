// Allocation failure on the submitting thread: every submission path (plain tasks, kernel calls, task
// pools, handles, buffers) is run with its N-th heap allocation failing, for every N until it needs
// no more. Each attempt must either succeed or throw std::bad_alloc, and lose nothing: no task record,
// buffer or kernel reference may outlive the sweep, and the tasks that were accepted must all run.
//
// This executable replaces the global operator new (a countdown per thread), so it is a test binary
// of its own: the other suites keep the real allocator.
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <new>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "nerve/nerve.h"

#include "support/failing_allocations.hpp"
#include "support/runtime_fixture.hpp"

namespace nerve::testing {
namespace {

constexpr long max_sweep = 400;  // no submission path allocates this often

// sweep() runs `attempt` with its first, second, ... allocation failing until an attempt succeeds
// with no failure left to inject; returns how many attempts threw.
template <class Attempt>
int sweep(Attempt&& attempt) {
  int failures = 0;
  for (long n = 0; n < max_sweep; ++n) {
    allocations_before_failure = n;
    bool threw = false;
    try {
      attempt();
    } catch (const std::bad_alloc&) {
      threw = true;
      ++failures;
    }
    const bool injected = allocations_before_failure == -1;
    allocations_before_failure = -1;
    if (!injected) {
      EXPECT_FALSE(threw);
      return failures;
    }
  }
  ADD_FAILURE() << "a submission allocated more than " << max_sweep << " times";
  return failures;
}

// A coroutine that awaits one task; its steps may run on the sweeping thread (which may fail them).
CoTask<> add_one_later(Context& context, Buffer<int>& data) {
  co_await context.submit([](std::span<int> x) { x[0] += 1; }, read_write(data.slice(200, 8)));
}

class AllocationFailure : public ::testing::TestWithParam<unsigned> {};

TEST_P(AllocationFailure, EverySubmissionPathFailsCleanlyAndLosesNothing) {
  std::atomic<long> ran{0};
  long accepted = 0;
  Kernel add_one("add_one");
  add_one.cpu([&ran](const KernelArgs& args) {
    for (int& each : args.span<int>(0)) each += args.value<int>(0);
    ran.fetch_add(1);
  });
  const long kernel_refs = add_one.shared_state().use_count();
  {
    Context context(make_settings(GetParam()));
    Buffer<int> a(context, 256), b(context, 256);
    const auto count = [&](int line, auto&& submit) {
      const int failures = sweep([&] {
        submit();
        ++accepted;
      });
      EXPECT_GT(failures, 0) << "line " << line << ": the sweep injected no failure: it tests nothing";
    };
    // Plain tasks with and without accesses, with a handle, in a group.
    count(__LINE__, [&] { context.spawn([&ran] { ran.fetch_add(1); }); });
    // One access to a whole buffer allocates nothing once the thread has its state (the predecessors
    // registration meets are kept on its stack): there is no failure to inject, and none may be needed.
    EXPECT_EQ(sweep([&] {
                context.spawn([&ran](std::span<int>) { ran.fetch_add(1); }, read_write(a));
                ++accepted;
              }),
              0);
    count(__LINE__, [&] {
      Task task = context.submit([&ran](std::span<const int>, std::span<int>) { ran.fetch_add(1); }, read(a),
                                 write(b.slice(0, 128)));
      task.wait();
    });
    // A write after many unfinished readers: more predecessors than a record holds inline. A gate
    // task holds the readers back (bounded, so a thread that runs it itself cannot hang).
    {
      Buffer<int> c(context, 64);
      std::atomic<bool> open{false};
      // The gate reads `open`, which this block owns: it must have finished before the block ends.
      Task gate = context.submit(
          [&ran, &open](std::span<int>) {
            const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
            while (!open.load() && std::chrono::steady_clock::now() < until) std::this_thread::yield();
            ran.fetch_add(1);
          },
          write(c));
      ++accepted;
      for (int i = 0; i < 20; ++i) {
        context.spawn([&ran](std::span<const int>) { ran.fetch_add(1); }, read(c.slice(i, 2)));
        ++accepted;
      }
      count(__LINE__, [&] {
        context.spawn([&ran](std::span<int>, std::span<int>) { ran.fetch_add(1); }, write(c),
                      read_write(a.slice(0, 16)));
      });
      // The write merged c's segments: a read that splits them again finds the room the segments
      // had, and its reader fits a segment's inline readers, so it may allocate nothing.
      sweep([&] {
        context.spawn([&ran](std::span<const int>) { ran.fetch_add(1); }, read(c.slice(3, 30)));
        ++accepted;
      });
      open.store(true);
      gate.wait();
    }
    // Kernel calls, with values.
    count(__LINE__, [&] { context.spawn(add_one, read_write(b), value(1)); });
    // A pool: members added under failure, then launched.
    {
      TaskPool pool(context, 1);
      long members = 0;
      sweep([&] {
        pool.add([&ran](std::span<int>) { ran.fetch_add(1); }, read_write(a.slice(0, 64)));
        ++members;
      });
      for (int i = 0; i < 40; ++i) {  // past the reserved room: the members' vector grows
        sweep([&] {
          pool.add([&ran](std::span<int>) { ran.fetch_add(1); }, read_write(a.slice(64, 64)));
          ++members;
        });
      }
      EXPECT_GT(sweep([&] { pool.launch(); }), 0);  // a failed launch leaves the pool unlaunched
      pool.wait_all();
      accepted += members;
    }
    // Host mappings behind unfinished readers.
    for (int i = 0; i < 8; ++i) context.spawn([&ran](std::span<const int>) { ran.fetch_add(1); }, read(a));
    accepted += 8;
    sweep([&] {
      auto mapped = a.map_read_write();
      mapped[0] += 1;
    });
    // A task group.
    {
      TaskGroup group(context);
      sweep([&] {  // the fork-join path may allocate nothing at all
        group.spawn([&ran] { ran.fetch_add(1); });
        ++accepted;
      });
      // b's segments were split and merged before: the split finds their room, and may allocate nothing.
      sweep([&] {
        group.spawn([&ran](std::span<int>) { ran.fetch_add(1); }, read_write(b.slice(128, 8)));
        ++accepted;
      });
      group.wait();
    }
    // parallel_for and parallel_reduce: on success every index once; on failure none twice.
    sweep([&] {
      std::vector<std::atomic<int>> hits(64);
      try {
        parallel_for(context, 0, hits.size(), 1, [&](std::size_t i) { hits[i].fetch_add(1); });
      } catch (...) {
        for (auto& hit : hits) EXPECT_LE(hit.load(), 1);
        throw;
      }
      for (auto& hit : hits) EXPECT_EQ(hit.load(), 1);
    });
    sweep([&] {
      const long sum = parallel_reduce(
          context, 0, 64, 1, 0L,
          [](std::size_t begin, std::size_t end) {
            long partial = 0;
            for (std::size_t i = begin; i < end; ++i) partial += static_cast<long>(i);
            return partial;
          },
          [](long x, long y) { return x + y; });
      EXPECT_EQ(sum, 64 * 63 / 2);
    });
    // Coroutines: the frame, the launch, the awaited submission.
    sweep([&] { launch(context, add_one_later(context, a)).wait(); });
    // Buffers made under failure.
    count(__LINE__, [&] {
      Buffer<double> scratch(context, 1000);
      context.spawn(
          [&ran](std::span<double> x) {
            x[0] = 1;
            ran.fetch_add(1);
          },
          write(scratch));
    });
    context.wait_all();
    EXPECT_EQ(ran.load(), accepted) << "an accepted task did not run, or a refused one did";
    a = Buffer<int>();
    b = Buffer<int>();
    expect_no_leaks(context);
  }
  EXPECT_EQ(add_one.shared_state().use_count(), kernel_refs) << "a kernel reference leaked";
}

// With perf.record_tasks the submitting thread also records each edge (its log and the edge list
// allocate): a failure there must not leave a task in the graph that the submission then discards,
// nor the trackers of a multi-buffer task locked.
TEST_P(AllocationFailure, RecordingEdgesUnderFailureLosesNothing) {
  std::atomic<long> ran{0};
  long accepted = 0;
  Settings settings = make_settings(GetParam());
  settings.set("perf.record_tasks", "true");
  {
    Context context(settings);
    Buffer<int> a(context, 16), b(context, 16);
    std::atomic<bool> open{false};
    // A writer of both buffers held unfinished, so that every later access gets an edge to it.
    context.spawn(
        [&](std::span<int>, std::span<int>) {
          const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
          while (!open.load() && std::chrono::steady_clock::now() < until) std::this_thread::yield();
          ran.fetch_add(1);
        },
        write(a), write(b));
    ++accepted;
    for (int round = 0; round < 4; ++round) {
      sweep([&] {
        context.spawn([&ran](std::span<const int>, std::span<const int>) { ran.fetch_add(1); }, read(a),
                      read(b));
        ++accepted;
      });
      sweep([&] {
        context.spawn([&ran](std::span<const int>) { ran.fetch_add(1); }, read(a.slice(0, 4)));
        ++accepted;
      });
    }
    open.store(true);
    context.spawn([&ran](std::span<int>) { ran.fetch_add(1); }, write(a));  // the trackers are unlocked
    ++accepted;
    context.wait_all();
    EXPECT_EQ(ran.load(), accepted) << "an accepted task did not run, or a refused one did";
    a = Buffer<int>();
    b = Buffer<int>();
    expect_no_leaks(context);
  }
}

INSTANTIATE_TEST_SUITE_P(Workers, AllocationFailure, ::testing::Values(1u, 2u));

// The C API: a call that runs out of memory returns NULL or NERVE_ERROR_OUT_OF_MEMORY (never a crash
// or another status), a consumed task is not leaked, and every task whose submission said NERVE_OK runs.
// sweep_c() is sweep() for calls that report instead of throwing: `attempt` returns whether it worked.
template <class Attempt>
int sweep_c(Attempt&& attempt) {
  int failures = 0;
  for (long n = 0; n < max_sweep; ++n) {
    allocations_before_failure = n;
    nerve_clear_last_error();
    const bool worked = attempt();
    const bool injected = allocations_before_failure == -1;
    allocations_before_failure = -1;
    if (!worked) {
      ++failures;
      EXPECT_EQ(nerve_last_status(), NERVE_ERROR_OUT_OF_MEMORY) << nerve_last_error();
    }
    if (!injected) {
      EXPECT_TRUE(worked) << nerve_last_error();
      return failures;
    }
  }
  ADD_FAILURE() << "a C call allocated more than " << max_sweep << " times";
  return failures;
}

TEST(AllocationFailureCApi, TasksBuffersAndPoolsReportOutOfMemoryAndLoseNothing) {
  nerve_context_config_t config = NERVE_CONTEXT_CONFIG_DEFAULT;
  config.use_environment = 0;
  config.thread_pool_size = 2;
  const char* settings[] = {"gpu.devices=none"};
  config.settings = settings;
  config.setting_count = 1;
  nerve_context_t* ctx = nerve_init_with_config(&config);
  ASSERT_NE(ctx, nullptr) << nerve_last_error();
  std::atomic<long> ran{0};
  long accepted = 0;
  const nerve_kernel_fn count_run = +[](void* desc, nerve_device_t, nerve_stream_t) {
    static_cast<std::atomic<long>*>(desc)->fetch_add(1);
  };
  nerve_buffer_t* shared = nerve_buffer_alloc(ctx, 4096, NERVE_DEVICE_ANY, 0);
  ASSERT_NE(shared, nullptr) << nerve_last_error();
  const auto submit_one = [&](nerve_buffer_t* buffer, std::size_t offset) {
    nerve_task_t* task = nerve_task_create(count_run, &ran);
    if (task == nullptr) return false;
    if (nerve_task_add_access(task, buffer, NERVE_ACCESS_READ_WRITE, offset, 64) != NERVE_OK ||
        nerve_task_set_name(task, "swept") != NERVE_OK) {
      nerve_task_destroy(task);
      return false;
    }
    return nerve_task_submit(ctx, task, NERVE_DEVICE_ANY) == NERVE_OK;  // consumes the task
  };
  EXPECT_GT(sweep_c([&] {
              if (!submit_one(shared, 0)) return false;
              ++accepted;
              return true;
            }),
            0);
  EXPECT_GT(sweep_c([&] {  // a buffer made, used and freed while its task may still run
              nerve_buffer_t* buffer = nerve_buffer_alloc(ctx, 256, NERVE_DEVICE_ANY, 0);
              if (buffer == nullptr) return false;
              const bool submitted = submit_one(buffer, 64);
              EXPECT_EQ(nerve_buffer_free(buffer), NERVE_OK);
              if (submitted) ++accepted;
              return submitted;
            }),
            0);
  nerve_task_pool_t* pool = nerve_task_pool_create(ctx, 1);
  ASSERT_NE(pool, nullptr) << nerve_last_error();
  long members = 0;
  for (int i = 0; i < 20; ++i) {
    sweep_c([&] {
      void* desc = nerve_task_pool_alloc_desc(pool);
      if (desc == nullptr) return false;
      nerve_task_t* task = nerve_task_create(count_run, &ran);
      if (task == nullptr) return false;
      if (nerve_task_add_access(task, shared, NERVE_ACCESS_READ, 128, 64) != NERVE_OK) {
        nerve_task_destroy(task);
        return false;
      }
      if (nerve_task_pool_submit(pool, task) != NERVE_OK) return false;
      ++members;
      return true;
    });
  }
  EXPECT_EQ(nerve_task_pool_wait_all(pool), NERVE_OK) << nerve_last_error();
  nerve_task_pool_destroy(pool);
  accepted += members;
  EXPECT_EQ(nerve_wait_all(ctx), NERVE_OK) << nerve_last_error();
  EXPECT_EQ(ran.load(), accepted) << "an accepted task did not run, or a refused one did";
  EXPECT_EQ(nerve_buffer_free(shared), NERVE_OK);
  nerve_shutdown(ctx);
}

}  // namespace
}  // namespace nerve::testing
