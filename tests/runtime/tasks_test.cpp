// Tasks through the public C++ API: submission, inferred dependencies, slices, explicit edges,
// nested submission and waiting inside tasks — on every worker count and policy.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <future>
#include <memory>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gmock/gmock.h>

#include "runtime_test.hpp"
#include "support/fork_join.hpp"

namespace nerve::testing {
namespace {

TEST_P(RuntimeTest, WorkerCountIsConfigured) { EXPECT_EQ(context->worker_count(), workers()); }

TEST_P(RuntimeTest, SubmitRunsEveryTaskOnce) {
  std::atomic<int> count{0};
  for (int i = 0; i < 10000; ++i) context->spawn([&] { count.fetch_add(1, std::memory_order_relaxed); });
  context->wait_all();
  EXPECT_EQ(count.load(), 10000);
}

TEST_P(RuntimeTest, TaskHandleWaitAndStatus) {
  std::atomic<bool> ran{false};
  Task task = context->submit([&] { ran = true; });
  task.wait();
  EXPECT_TRUE(ran.load());
  EXPECT_TRUE(task.done());
  EXPECT_EQ(task.status(), TaskStatus::succeeded);
  EXPECT_EQ(task.error(), nullptr);
}

TEST_P(RuntimeTest, ReadAfterWriteSeesTheWrite) {
  Buffer<int> value(*context, 1);
  for (int round = 0; round < 200; ++round) {
    context->spawn([round](std::span<int> v) { v[0] = round; }, write(value));
    context->spawn([round](std::span<const int> v) { ASSERT_EQ(v[0], round); }, read(value));
  }
  context->wait_all();
}

// A closure aligned beyond max_align_t lives on the heap, and is given back with the alignment it
// was allocated with on every path: run, discarded at submission, dropped with an unlaunched pool.
// (ASan reports a mismatched alignment as a new-delete-type-mismatch.)
TEST_P(RuntimeTest, OverAlignedClosuresKeepTheirAlignmentOnEveryPath) {
  struct alignas(128) Wide {
    double value[4];
  };
  std::atomic<int> ran{0};
  Wide wide{{1, 2, 3, 4}};
  for (int i = 0; i < 8; ++i) {
    context->spawn([&ran, wide] {
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(&wide) % alignof(Wide), 0u);
      EXPECT_EQ(wide.value[3], 4.0);
      ran.fetch_add(1);
    });
  }
  context->wait_all();
  EXPECT_EQ(ran.load(), 8);
  Buffer<int> gone(*context, 1);
  Buffer<int> kept = std::move(gone);  // `gone` is now an empty handle: submitting over it is refused
  EXPECT_THROW(context->spawn([wide](std::span<int>) { (void)wide; }, write(gone)), Error);
  {
    TaskPool pool(*context);
    pool.add([&ran, wide] { ran.fetch_add(static_cast<int>(wide.value[0])); });
  }  // never launched: its task is discarded
  context->wait_all();
  EXPECT_EQ(ran.load(), 8);
}

TEST_P(RuntimeTest, ReadWriteChainIsSequential) {
  Buffer<long> counter(*context, 1);
  context->spawn([](std::span<long> c) { c[0] = 0; }, write(counter));
  for (int i = 0; i < 5000; ++i) context->spawn([](std::span<long> c) { c[0] += 1; }, read_write(counter));
  EXPECT_EQ(counter.to_vector()[0], 5000);
}

// A finishing task releases its successors in batches (task_graph.hpp); counts around the batch
// size must release every one of them exactly once, after the writer and before the next writer.
TEST_P(RuntimeTest, AWriterReleasesEveryReaderBehindItOnce) {
  for (const int readers : {7, 8, 9, 17, 40}) {
    Buffer<int> data(*context, 1);
    std::atomic<bool> all_submitted{false};
    // The writer stays unfinished until every reader has registered its edge to it (bounded, so
    // that a thread which runs it before that cannot hang).
    context->spawn(
        [&](std::span<int> d) {
          const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
          while (!all_submitted.load() && std::chrono::steady_clock::now() < until) std::this_thread::yield();
          d[0] = readers;
        },
        write(data));
    std::vector<std::atomic<int>> runs(static_cast<std::size_t>(readers));
    for (int i = 0; i < readers; ++i) {
      context->spawn(
          [&, i](std::span<const int> d) {
            EXPECT_EQ(d[0], readers) << "a reader ran before the writer it follows";
            runs[static_cast<std::size_t>(i)].fetch_add(1);
          },
          read(data));
    }
    std::atomic<int> seen_by_next_writer{-1};
    context->spawn(
        [&](std::span<int> d) {
          int done = 0;
          for (const auto& count : runs) done += count.load();
          seen_by_next_writer = done;
          d[0] = -1;
        },
        write(data));
    all_submitted = true;
    context->wait_all();
    for (int i = 0; i < readers; ++i)
      EXPECT_EQ(runs[static_cast<std::size_t>(i)].load(), 1) << "reader " << i;
    EXPECT_EQ(seen_by_next_writer.load(), readers) << "the next writer ran before the readers it follows";
  }
}

TEST_P(RuntimeTest, WriteAfterReadWaitsForReaders) {
  Buffer<int> data(*context, 1);
  context->spawn([](std::span<int> d) { d[0] = 7; }, write(data));
  std::atomic<int> readers_done{0};
  for (int i = 0; i < 16; ++i) {
    context->spawn(
        [&](std::span<const int> d) {
          std::this_thread::sleep_for(std::chrono::microseconds(200));
          EXPECT_EQ(d[0], 7);
          readers_done.fetch_add(1);
        },
        read(data));
  }
  context->spawn(
      [&](std::span<int> d) {
        EXPECT_EQ(readers_done.load(), 16) << "a writer ran before the readers it must follow";
        d[0] = 8;
      },
      write(data));
  EXPECT_EQ(data.to_vector()[0], 8);
}

TEST_P(RuntimeTest, ConcurrentReadersOverlap) {
  if (workers() < 2) GTEST_SKIP() << "needs two workers";
  Buffer<int> data(*context, 1);
  std::atomic<int> inside{0};
  std::atomic<int> most{0};
  std::atomic<bool> gave_up{false};
  for (int i = 0; i < 8; ++i) {
    context->spawn(
        [&](std::span<const int>) {
          const int now = inside.fetch_add(1) + 1;
          int seen = most.load();
          while (now > seen && !most.compare_exchange_weak(seen, now)) {
          }
          // Wait for a second reader to come in: generous, since a loaded CI machine may not run
          // the other worker for tens of milliseconds; serialised readers would all time out.
          const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
          while (most.load() < 2 && !gave_up && std::chrono::steady_clock::now() < until)
            std::this_thread::yield();
          if (most.load() < 2) gave_up = true;
          inside.fetch_sub(1);
        },
        read(data));
  }
  context->wait_all();
  EXPECT_GE(most.load(), 2) << "readers of one buffer must be able to run at the same time";
}

TEST_P(RuntimeTest, DisjointSlicesDoNotConflict) {
  if (workers() < 2) GTEST_SKIP() << "needs two workers";
  Buffer<int> data(*context, 2);
  std::atomic<int> inside{0};
  std::atomic<bool> overlapped{false};
  for (int half = 0; half < 2; ++half) {
    context->spawn(
        [&](std::span<int> part) {
          if (inside.fetch_add(1) == 1) overlapped = true;
          // Long enough for a loaded machine to run the other worker; the loop ends once it does.
          const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
          while (!overlapped && std::chrono::steady_clock::now() < until) std::this_thread::yield();
          part[0] = 1;
          inside.fetch_sub(1);
        },
        write(data.slice(static_cast<std::size_t>(half), 1)));
  }
  context->wait_all();
  EXPECT_TRUE(overlapped.load()) << "writers of disjoint slices were serialised";
}

TEST_P(RuntimeTest, OverlappingSlicesAreOrdered) {
  Buffer<int> data(*context, 100);
  context->spawn([](std::span<int> d) { std::fill(d.begin(), d.end(), 1); }, write(data));
  // Writers of [0,60) and [40,100) overlap on [40,60): the second runs after the first.
  context->spawn(
      [](std::span<int> d) {
        for (int& x : d) x *= 2;
      },
      read_write(data.slice(0, 60)));
  context->spawn(
      [](std::span<int> d) {
        for (int& x : d) x += 10;
      },
      read_write(data.slice(40, 60)));
  context->spawn(
      [](std::span<int> d) {
        for (int& x : d) x *= 3;
      },
      read_write(data));
  const auto result = data.to_vector();
  for (int i = 0; i < 100; ++i) {
    const int expected = i < 40 ? 6 : (i < 60 ? 36 : 33);
    ASSERT_EQ(result[static_cast<std::size_t>(i)], expected) << "element " << i;
  }
}

TEST_P(RuntimeTest, ExplicitAfterEdges) {
  std::atomic<int> order{0};
  int first_seen = -1;
  int second_seen = -1;
  Task first = context->submit([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    first_seen = order.fetch_add(1);
  });
  Task second = context->submit(TaskOptions{.name = "second", .after = {first}},
                                [&] { second_seen = order.fetch_add(1); });
  second.wait();
  EXPECT_EQ(first_seen, 0);
  EXPECT_EQ(second_seen, 1);
}

TEST_P(RuntimeTest, NestedForkJoinFibonacci) {
  long result = 0;
  Task root = context->submit([&] { result = fork_join_fib(*context, 20); });
  root.wait();
  EXPECT_EQ(result, 6765);
  EXPECT_EQ(fork_join_fib(*context, 18), 2584) << "fork-join from the application thread";
}

TEST_P(RuntimeTest, WaitInsideTaskRunsOtherWorkInsteadOfDeadlocking) {
  // More waiting tasks than workers: each waits for a child it submitted. Without helping, the
  // workers would all block and the children would never run.
  std::atomic<int> children{0};
  for (int i = 0; i < 64; ++i) {
    context->spawn([&] {
      Task child = context->submit([&] { children.fetch_add(1); });
      child.wait();
    });
  }
  context->wait_all();
  EXPECT_EQ(children.load(), 64);
}

TEST_P(RuntimeTest, ParallelForCoversRangeExactlyOnce) {
  std::vector<std::atomic<int>> hits(100003);
  parallel_for(*context, 0, hits.size(), 0, [&](std::size_t i) { hits[i].fetch_add(1); });
  for (std::size_t i = 0; i < hits.size(); ++i) ASSERT_EQ(hits[i].load(), 1) << i;
  std::atomic<std::size_t> covered{0};
  parallel_for(*context, 10, 1010, 7, [&](std::size_t begin, std::size_t end) {
    EXPECT_LE(end - begin, 7u);
    covered.fetch_add(end - begin);
  });
  EXPECT_EQ(covered.load(), 1000u);
}

// Loop bounds of signed types work, and a negative one is an error: converted to std::size_t it was a
// huge index and the loop silently ran nothing (black-box audit).
TEST_P(RuntimeTest, ParallelLoopsTakeSignedBoundsAndRefuseNegativeOnes) {
  std::atomic<long> sum{0};
  parallel_for(*context, int{2}, long{12}, 0, [&](std::size_t i) { sum.fetch_add(static_cast<long>(i)); });
  EXPECT_EQ(sum.load(), 65);
  const auto add = [](long a, long b) { return a + b; };
  const auto map = [](std::size_t b, std::size_t e) { return static_cast<long>(e - b); };
  EXPECT_EQ(parallel_reduce(*context, short{0}, 100u, 7, 0L, map, add), 100);
  EXPECT_EQ(parallel_reduce<long>(*context, 0, 10, 1, 0, map, add), 10);
  try {
    parallel_for(*context, -5, 5, 0, [](std::size_t) {});
    FAIL() << "a negative begin was accepted";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::invalid_argument);
    EXPECT_THAT(error.what(), ::testing::HasSubstr("parallel_for: begin is negative (-5)"));
  }
  try {
    (void)parallel_reduce(*context, 0, -1LL, 0, 0L, map, add);
    FAIL() << "a negative end was accepted";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), ::testing::HasSubstr("parallel_reduce: end is negative (-1)"));
  }
  EXPECT_THROW(parallel_for(*context, 0, 10, -1, [](std::size_t) {}), Error) << "a negative grain";
  enum { count = 10 };  // unscoped enumerators still work as bounds
  std::atomic<int> calls{0};
  parallel_for(*context, 0, count, 1, [&](std::size_t) { calls.fetch_add(1); });
  EXPECT_EQ(calls.load(), 10);
}

TEST_P(RuntimeTest, ParallelReduceSumsAndIsDeterministic) {
  std::vector<double> values(50000);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = 1.0 / static_cast<double>(i + 1);
  auto sum = [&] {
    return parallel_reduce(
        *context, 0, values.size(), 64, 0.0,
        [&](std::size_t b, std::size_t e) {
          return std::accumulate(values.begin() + static_cast<long>(b), values.begin() + static_cast<long>(e),
                                 0.0);
        },
        [](double a, double b) { return a + b; });
  };
  const double first = sum();
  EXPECT_NEAR(first, 11.397003949278, 1e-9);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(sum(), first) << "same bits on every run";
  EXPECT_EQ(parallel_reduce(
                *context, 5, 5, 1, 42, [](std::size_t, std::size_t) { return 0; },
                [](int a, int b) { return a + b; }),
            42);
}

// Over [0, 1000) with grain 500 the calling thread runs [0, 500) and a spawned piece [500, 1000).
// With a worker thread beside the caller, the caller's chunk throws only once the spawned piece has
// thrown and its task has ended (the completed-task count says so): the spawned piece's exception is
// the first. With one slot the spawned piece runs only when the caller waits, so the caller's is.
// Regression: the caller's own exception was rethrown whichever came first.
template <class Run>
void expect_first_exception_rethrown(Context& context, unsigned workers, Run&& run) {
  const std::uint64_t completed_before = context.stats().tasks_completed;
  auto caller_piece = [&] {
    if (workers > 1) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (context.stats().tasks_completed == completed_before) {
        if (std::chrono::steady_clock::now() > deadline) {
          ADD_FAILURE() << "the spawned piece never ran beside the calling thread";
          break;
        }
        std::this_thread::yield();
      }
    }
    throw std::runtime_error("caller");
  };
  auto spawned_piece = [] { throw std::runtime_error("spawned"); };
  try {
    run(caller_piece, spawned_piece);
    ADD_FAILURE() << "nothing was rethrown";
  } catch (const std::runtime_error& error) {
    EXPECT_STREQ(error.what(), workers > 1 ? "spawned" : "caller");
  }
}

TEST_P(RuntimeTest, ParallelForRethrowsTheFirstExceptionNotTheCallersOwn) {
  expect_first_exception_rethrown(*context, workers(), [&](auto& caller_piece, auto& spawned_piece) {
    parallel_for(*context, 0, 1000, 500, [&](std::size_t begin, std::size_t) {
      if (begin == 0) caller_piece();
      spawned_piece();
    });
  });
}

TEST_P(RuntimeTest, ParallelReduceRethrowsTheFirstExceptionNotTheCallersOwn) {
  expect_first_exception_rethrown(*context, workers(), [&](auto& caller_piece, auto& spawned_piece) {
    (void)parallel_reduce(
        *context, 0, 1000, 500, 0,
        [&](std::size_t begin, std::size_t) -> int {
          if (begin == 0) caller_piece();
          spawned_piece();
          return 0;
        },
        [](int a, int b) { return a + b; });
  });
}

// A body that throws for every index: the loop rethrows one exception and logs one line counting
// the others — not one line per piece, naming a task group the caller never made (10,000 pieces
// gave 4,095 such lines).
TEST_P(RuntimeTest, ParallelLoopsLogTheExceptionsTheyDropAsOneCount) {
  constexpr std::size_t count = 2000;
  const auto run_logged = [](auto&& loop) {
    ::testing::internal::CaptureStderr();
    std::string rethrown;
    try {
      loop();
    } catch (const std::runtime_error& error) {
      rethrown = error.what();
    }
    return std::pair{rethrown, ::testing::internal::GetCapturedStderr()};
  };
  const auto [for_rethrown, for_log] = run_logged([&] {
    parallel_for(*context, 0, count, 1,
                 [](std::size_t i) { throw std::runtime_error("bad " + std::to_string(i)); });
  });
  EXPECT_THAT(for_rethrown, ::testing::StartsWith("bad "));
  EXPECT_THAT(for_log, ::testing::Not(::testing::HasSubstr("task group"))) << for_log.substr(0, 500);
  EXPECT_THAT(for_log, ::testing::HasSubstr("parallel_for: " + std::to_string(count - 1) +
                                            " more exceptions were thrown by its body"));
  EXPECT_EQ(std::count(for_log.begin(), for_log.end(), '\n'), 1) << for_log.substr(0, 500);

  const auto [reduce_rethrown, reduce_log] = run_logged([&] {
    (void)parallel_reduce(
        *context, 0, count, 1, 0,
        [](std::size_t i, std::size_t) -> int { throw std::runtime_error("bad " + std::to_string(i)); },
        [](int a, int b) { return a + b; });
  });
  EXPECT_THAT(reduce_rethrown, ::testing::StartsWith("bad "));
  EXPECT_THAT(reduce_log, ::testing::HasSubstr("parallel_reduce: " + std::to_string(count - 1) +
                                               " more exceptions were thrown by its body"));
  EXPECT_EQ(std::count(reduce_log.begin(), reduce_log.end(), '\n'), 1) << reduce_log.substr(0, 500);

  // One exception: nothing to log.
  const auto [one_rethrown, one_log] = run_logged([&] {
    parallel_for(*context, 0, count, 1, [](std::size_t i) {
      if (i == 7) throw std::runtime_error("bad 7");
    });
  });
  EXPECT_EQ(one_rethrown, "bad 7");
  EXPECT_EQ(one_log, "");
}

TEST_P(RuntimeTest, SubmissionFromManyApplicationThreads) {
  Buffer<long> counter(*context, 1);
  context->spawn([](std::span<long> c) { c[0] = 0; }, write(counter));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 500; ++i) context->spawn([](std::span<long> c) { c[0] += 1; }, read_write(counter));
      context->wait_all();
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(counter.to_vector()[0], 2000);
}

TEST_P(RuntimeTest, LargeClosuresAndManyAccesses) {
  std::vector<Buffer<int>> buffers;
  for (int i = 0; i < 6; ++i) buffers.emplace_back(*context, 4);
  std::array<long, 32> payload{};
  payload.fill(3);
  context->spawn(
      [payload](std::span<int> a, std::span<int> b, std::span<int> c, std::span<int> d, std::span<int> e,
                std::span<int> f) {
        for (auto span : {a, b, c, d, e, f})
          std::fill(span.begin(), span.end(), static_cast<int>(payload[0]));
      },
      write(buffers[0]), write(buffers[1]), write(buffers[2]), write(buffers[3]), write(buffers[4]),
      write(buffers[5]));
  for (auto& buffer : buffers) EXPECT_EQ(buffer.to_vector(), std::vector<int>(4, 3));
}

// Accesses that repeat buffers in any order: the submission locks each distinct buffer once, in
// address order — sorted on the stack up to 8 accesses, in a vector past that — and the task still
// waits for each buffer's writer.
TEST_P(RuntimeTest, RepeatedBuffersInFewAndManyAccesses) {
  std::vector<Buffer<int>> in;
  for (int i = 0; i < 3; ++i) in.emplace_back(*context, 8);
  Buffer<int> out(*context, 2);
  Kernel sum("sum_slices");
  sum.cpu([](const KernelArgs& args) {
    int total = 0;
    for (std::size_t k = 0; k + 1 < args.access_count(); ++k)
      for (const int v : args.span<const int>(k)) total += v;
    args.span<int>(args.access_count() - 1)[0] = total;
  });
  for (int round = 1; round <= 3; ++round) {
    for (auto& buffer : in) {
      context->spawn(
          [round](std::span<int> d) {
            std::this_thread::sleep_for(std::chrono::microseconds(200));
            std::fill(d.begin(), d.end(), round);
          },
          write(buffer));
    }
    // 5 accesses over 3 buffers, out of address order (8 ints read in all), then 12 over 3 (24 read).
    context->spawn(sum, read(in[2].slice(0, 2)), read(in[0].slice(0, 2)), read(in[2].slice(2, 2)),
                   read(in[1].slice(0, 2)), write(out.slice(0, 1)));
    context->spawn(sum, read(in[1].slice(0, 2)), read(in[0].slice(0, 2)), read(in[2].slice(0, 2)),
                   read(in[1].slice(2, 2)), read(in[0].slice(2, 2)), read(in[2].slice(2, 2)),
                   read(in[1].slice(4, 2)), read(in[0].slice(4, 2)), read(in[2].slice(4, 2)),
                   read(in[1].slice(6, 2)), read(in[0].slice(6, 2)), write(out.slice(1, 1)));
    EXPECT_EQ(out.to_vector(), (std::vector<int>{8 * round, 22 * round})) << "round " << round;
  }
}

// The first application thread to submit pushes into a deque of its own. Its tasks must still run
// while it does not wait (workers steal them), be run by another thread's wait (with a single slot
// only that thread can), and outlive the thread that submitted them.
TEST_P(RuntimeTest, TheSubmittersTasksRunWhileItDoesNotWait) {
  if (workers() < 2) GTEST_SKIP() << "only the waiting thread runs tasks with one slot";
  std::atomic<int> ran{0};
  for (int i = 0; i < 100; ++i) context->spawn([&ran] { ran.fetch_add(1); });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (ran.load() != 100 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  EXPECT_EQ(ran.load(), 100) << "the workers did not take the submitting thread's tasks";
  context->wait_all();  // the tasks hold `ran`: none may outlive this body, even after a failure
}

TEST_P(RuntimeTest, AnotherThreadsWaitRunsTheSubmittersTasks) {
  std::atomic<int> ran{0};
  context->spawn([&ran] { ran.fetch_add(1); });  // this thread now owns the submitter deque
  for (int i = 0; i < 299; ++i) context->spawn([&ran] { ran.fetch_add(1); });
  std::thread waiter([&] { context->wait_all(); });
  waiter.join();
  EXPECT_EQ(ran.load(), 300);
}

TEST_P(RuntimeTest, TasksLeftByASubmitterThatExitedStillRun) {
  std::atomic<int> ran{0};
  std::thread submitter([&] {
    for (int i = 0; i < 300; ++i) context->spawn([&ran] { ran.fetch_add(1); });
  });
  submitter.join();
  context->spawn([&ran] { ran.fetch_add(1); });  // borrows the master slot's deque
  context->wait_all();
  EXPECT_EQ(ran.load(), 301);
}

// A thread's state in a context goes back to the context when the thread exits, and the next thread
// to come takes it over under the context's lock — not by inheriting the exited thread's id, which the
// system gives to a later thread with nothing ordering the two threads' uses of the state (under
// ThreadSanitizer: races on the state's record cache and deque when short-lived threads started by
// different parents used one context). The threads' tasks all run and count.
TEST_P(RuntimeTest, AnExitedThreadsStateGoesToTheNextThreadInOrder) {
  const auto handed_back = [this] {
    detail::ContextImpl& impl = *context->impl();
    std::lock_guard lock(impl.threads_mutex);
    return impl.released_states.size();
  };
  std::thread first([&] { context->submit([] {}).wait(); });
  first.join();
  EXPECT_EQ(handed_back(), 1u);
  const std::size_t states = context->impl()->thread_count.load();
  std::thread second([&] { context->submit([] {}).wait(); });
  second.join();
  EXPECT_EQ(context->impl()->thread_count.load(), states);  // the first one's state, taken over

  std::atomic<int> ran{0};
  std::vector<std::thread> parents;
  for (int p = 0; p < 3; ++p) {
    parents.emplace_back([&] {
      for (int k = 0; k < 20; ++k) {
        std::thread child([&] {
          context->submit([&ran] { ran.fetch_add(1, std::memory_order_relaxed); }).wait();
          Buffer<int> data(*context, 4);
          context->submit([](std::span<int> v) { v[0] = 1; }, write(data)).wait();
        });
        child.join();
      }
    });
  }
  for (std::thread& parent : parents) parent.join();
  context->wait_all();
  EXPECT_EQ(ran.load(), 60);
  EXPECT_LE(context->impl()->thread_count.load(), states + 3);  // at most one per parent's child at once
}

// A thread_local destroyed after the thread handed its states back may use the context again (here:
// releasing a Task): that state is handed back too, not left tied to the exited thread's id.
TEST_P(RuntimeTest, AStateUsedByALateThreadLocalDestructorIsHandedBackToo) {
  const auto ids_known = [this] {
    detail::ContextImpl& impl = *context->impl();
    std::lock_guard lock(impl.threads_mutex);
    return impl.threads_by_id.size();
  };
  context->submit([] {}).wait();  // this thread's own state first
  const std::size_t before = ids_known();
  for (int i = 0; i < 10; ++i) {
    std::thread short_lived([&] {
      // Constructed before the thread's first use of the context, so destroyed after the hand-back.
      thread_local std::optional<Task> last;
      last.reset();
      last.emplace(context->submit([] {}));
      last->wait();
    });
    short_lived.join();
  }
  EXPECT_EQ(ids_known(), before) << "an exited thread's id still holds a state";
}

// Records are recycled without being constructed again: a record that carried a failure, a name,
// accesses and dependency edges must hand none of them to the tasks that reuse it. (A stale failure
// would turn a cancellation on request, which a group does not report, into a reported one.)
TEST_P(RuntimeTest, ARecycledRecordCarriesNothingOver) {
  Buffer<int> data(*context, 4);
  context->spawn([](std::span<int> d) { std::fill(d.begin(), d.end(), 0); }, write(data));
  std::atomic<int> ran{0};
  for (int round = 0; round < 200; ++round) {
    {
      TaskOptions named;
      named.name = "failing";
      Task failing = context->submit(
          named, [](std::span<int>) { throw std::runtime_error("boom"); }, read_write(data.slice(0, 1)));
      EXPECT_THROW(failing.wait(), std::runtime_error);
    }  // its record is free once both the runtime and this handle let go
    context->submit([](std::span<int> d) { d[0] = 1; }, write(data.slice(0, 1))).wait();
    TaskGroup cancelled(*context);
    cancelled.cancel();
    for (int i = 0; i < 8; ++i) cancelled.spawn([&ran] { ran.fetch_add(1); });
    ASSERT_NO_THROW(cancelled.wait()) << "round " << round << ": a cancellation reported an earlier failure";
    TaskGroup group(*context);
    for (int i = 0; i < 8; ++i) group.spawn([&ran] { ran.fetch_add(1); });
    ASSERT_NO_THROW(group.wait()) << "round " << round;
  }
  EXPECT_EQ(data.to_vector()[0], 1);
  EXPECT_EQ(ran.load(), 200 * 8) << "only the uncancelled groups' tasks run";
}

// Blocking waits nested inside tasks run other tasks on the same stack: nested ever deeper they stop
// with an error naming the depth before the stack overflows (100,000 levels was a SIGSEGV), and the
// error reaches the outermost wait; the context then works on.
void nest_waits(Context& context, int depth) {
  if (depth == 0) return;
  TaskGroup group(context);
  group.spawn([&context, depth] { nest_waits(context, depth - 1); });
  group.wait();
}

TEST(NestedWaits, TooDeepIsAnErrorNotAStackOverflow) {
  for (const unsigned workers : {1u, 2u}) {
    Context context(make_settings(workers));
    try {
      context.submit([&context] { nest_waits(context, 100'000); }).wait();
      ADD_FAILURE() << "100,000 nested waits fit the stack";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::out_of_memory);
      EXPECT_THAT(error.what(), ::testing::HasSubstr("inside a task nested")) << error.what();
    }
    std::atomic<int> ran{0};
    nest_waits(context, 50);  // a modest depth still works
    context.submit([&ran] { ran.fetch_add(1); }).wait();
    EXPECT_EQ(ran.load(), 1);
  }
}

// A thread with a small stack (here 192 KiB, under the 256 KiB most stacks keep back) still runs
// nested tasks that submit and wait: it keeps back a quarter of its stack, not more than it has.
TEST(NestedWaits, ASmallStackStillNests) {
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "the sanitizers' frames fill a 192 KiB stack on their own";
#endif
  Context context(make_settings(1));  // the waiting thread runs the tasks (worker slot 0)
  struct Run {
    Context* context;
    bool ok = false;
    std::string error;
  } run{&context};
  pthread_attr_t attributes;
  pthread_attr_init(&attributes);
  pthread_attr_setstacksize(&attributes, 192 * 1024);
  pthread_t thread;
  const auto body = [](void* argument) -> void* {
    auto* r = static_cast<Run*>(argument);
    try {
      r->context->submit([r] { nest_waits(*r->context, 3); }).wait();
      r->ok = true;
    } catch (const std::exception& error) {
      r->error = error.what();
    }
    return nullptr;
  };
  ASSERT_EQ(pthread_create(&thread, &attributes, body, &run), 0);
  pthread_attr_destroy(&attributes);
  pthread_join(thread, nullptr);
  EXPECT_TRUE(run.ok) << run.error;
}

// Besides the workers, exactly 4096 application threads may use a context at once (docs/CONFIG.md):
// the 4097th is refused, whichever it is (4097 were let in: the count gave the limit the slot of the
// application thread that waits, which is no worker's). A thread that exits frees its place.
TEST(ApplicationThreads, AContextTakesExactly4096AtOnce) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "4097 threads under ThreadSanitizer";
#endif
  constexpr std::size_t allowed = 4096;
  Context context(make_settings(2));
  struct Shared {
    Context* context;
    std::atomic<std::size_t> admitted{0};
    std::atomic<std::size_t> refused{0};
    std::atomic<std::size_t> arrived{0};
    std::atomic<bool> leave{false};
  } shared{&context};
  const auto body = [](void* argument) -> void* {
    auto* s = static_cast<Shared*>(argument);
    try {
      s->context->spawn([] {});
      s->admitted.fetch_add(1);
    } catch (const Error&) {
      s->refused.fetch_add(1);
    }
    s->arrived.fetch_add(1);
    s->leave.wait(false);  // asleep: 4096 threads polling would flood the scheduler
    return nullptr;
  };
  pthread_attr_t attributes;
  pthread_attr_init(&attributes);
  pthread_attr_setstacksize(&attributes, 256 * 1024);  // 4096 default stacks would reserve 32 GiB
  std::vector<pthread_t> threads(allowed);
  std::size_t started = 0;
  for (; started < allowed; ++started) {
    if (pthread_create(&threads[started], &attributes, body, &shared) != 0) break;
  }
  pthread_attr_destroy(&attributes);
  while (shared.arrived.load() < started) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  bool main_refused = false;
  std::string message;
  if (started == allowed) {
    try {
      context.spawn([] {});  // this thread's first use: the 4097th
    } catch (const Error& error) {
      main_refused = true;
      message = error.what();
    }
  }
  shared.leave.store(true);
  shared.leave.notify_all();
  for (std::size_t i = 0; i < started; ++i) pthread_join(threads[i], nullptr);
  ASSERT_EQ(started, allowed) << "the machine would not start 4096 threads";
  EXPECT_EQ(shared.admitted.load(), allowed);
  EXPECT_EQ(shared.refused.load(), 0u);
  EXPECT_TRUE(main_refused) << "a 4097th application thread was let in";
  EXPECT_THAT(message, ::testing::HasSubstr("more than 4096 application threads"));
  context.spawn([] {});  // their places are free again
  context.wait_all();
}

// A forked child that lets the parent's context go (a return from main) leaves it as it is instead
// of joining worker threads it does not have (that crashed it), and may make a context of its own.
TEST(ContextFork, AChildDestroyingTheParentsContextEndsCleanly) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP()
      << "the child makes threads after a multi-threaded fork, which ThreadSanitizer does not support";
#elif defined(__SANITIZE_ADDRESS__)
  // The child allocates; GCC 12's libasan takes no allocator locks around fork (LLVM added that
  // handler in 2023, llvm-project#75290): a parent thread inside the allocator at the fork leaves
  // the child stuck (1 run in 4 of test_runtime under ASan hung here).
  GTEST_SKIP() << "AddressSanitizer's allocator is not fork-safe in this toolchain";
#endif
  // Its devices too (an OpenCL one, where present, has threads of its own): with `gpu.devices: none`
  // the child did not crash.
  Settings settings = make_settings(2);
  settings.set("gpu.devices", "all");
  auto inherited = std::make_unique<Context>(settings);
  // What was made from it goes with it in the child: a buffer (its memory is the parent's pools'
  // and devices') and a group whose task is still pending (the child has no worker to run it).
  auto buffer = std::make_unique<Buffer<int>>(*inherited, std::vector<int>{5});
  std::atomic<bool> release{false};
  auto group = std::make_unique<TaskGroup>(*inherited);
  group->spawn([&release] {
    while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  });
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    group.reset();
    buffer.reset();
    inherited.reset();
    int status = 1;
    {
      Context own(make_settings(2));
      Buffer<int> counter(own, std::vector<int>{0});
      for (int i = 0; i < 10; ++i) own.spawn([](std::span<int> c) { ++c[0]; }, read_write(counter));
      if (counter.to_vector()[0] == 10) status = 0;
    }
    std::_Exit(status);
  }
  int status = 0;
  pid_t ended = 0;
  for (int tick = 0; tick < 2000 && ended == 0; ++tick) {  // 20 s: a child that hangs fails the test
    ended = waitpid(child, &status, WNOHANG);
    if (ended == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (ended == 0) {
    kill(child, SIGKILL);
    waitpid(child, &status, 0);
    release.store(true);
    FAIL() << "the child hung letting the parent's context and its objects go";
  }
  ASSERT_EQ(ended, child);
  EXPECT_TRUE(WIFEXITED(status)) << "the child died of signal "
                                 << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child's own context did not run its tasks";
  release.store(true);
  group->wait();
  EXPECT_EQ(buffer->to_vector()[0], 5);
  Buffer<int> value(*inherited, std::vector<int>{1});
  inherited->spawn([](std::span<int> v) { v[0] += 1; }, read_write(value));
  EXPECT_EQ(value.to_vector()[0], 2) << "the parent's context is unaffected";
}

// A forked child that only calls exit() ends, whatever the parent's other threads held at the fork:
// its main thread handed its state back to the parent's context at exit, taking locks that another
// thread of the parent (here ones that keep registering and leaving) may have held at the fork, for
// ever in the child (hung within the first 3 forks).
TEST(ContextFork, AChildThatExitsDoesNotWaitForLocksOfTheParentsThreads) {
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "fork() of a multi-threaded process under the sanitizers (see above)";
#endif
  Context context(make_settings(2));
  context.spawn([] {});
  context.wait_all();  // this thread is registered: its state is handed back at exit
  std::atomic<bool> stop{false};
  std::vector<std::thread> churn;
  for (int i = 0; i < 2; ++i) {
    churn.emplace_back([&] {
      while (!stop.load()) std::thread([&] { context.spawn([] {}); }).join();  // register, hand back
    });
  }
  int hung = 0;
  for (int fork_number = 0; fork_number < 200 && hung == 0; ++fork_number) {
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) std::exit(0);  // runs the main thread's thread_local destructors
    pid_t ended = 0;
    int status = 0;
    for (int tick = 0; tick < 500 && ended == 0; ++tick) {  // 5 s
      ended = waitpid(child, &status, WNOHANG);
      if (ended == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (ended == 0) {
      ++hung;
      kill(child, SIGKILL);
      waitpid(child, &status, 0);
    }
  }
  stop = true;
  for (std::thread& thread : churn) thread.join();
  context.wait_all();
  EXPECT_EQ(hung, 0) << "a child hung in exit()";
}

// HeldSlots: both slots of a two-slot context run `hold` in a task body — slot 1 a task the worker
// took, slot 0 an application thread's wait running the task it waits for — until end() joins them.
class HeldSlots {
 public:
  HeldSlots(Context& context, std::function<void()> hold) : hold_(std::move(hold)) {
    const auto body = [this] {
      started_.fetch_add(1);
      hold_();
    };
    on_worker_.emplace(context.submit(body));
    wait_started(1);
    in_master_ = std::thread([&context, body] { context.submit(body).wait(); });
    wait_started(2);
  }
  HeldSlots(const HeldSlots&) = delete;
  HeldSlots& operator=(const HeldSlots&) = delete;
  ~HeldSlots() { end(); }
  void end() {
    if (in_master_.joinable()) in_master_.join();
    if (on_worker_) on_worker_->wait();
  }

 private:
  void wait_started(int count) const {
    while (started_.load() < count) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::function<void()> hold_;
  std::atomic<int> started_{0};
  std::optional<Task> on_worker_;
  std::thread in_master_;
};

constexpr const char* stall_warning = "a thread without a worker slot has waited ";

// A thread without a slot that waits for tasks no slot can run — every slot is inside a body blocked
// outside nerve, here on a future that only the test sets — is a hang nerve cannot break (the pool is
// fixed, as OpenMP's team and oneTBB's arena). It says why, once, instead of hanging silently (an
// OpenMP team inside tasks whose threads waited on nerve, or a future set by a thread waiting on
// nerve, hung without a word). The 5 s before the warning is shortened for the test.
TEST(StalledWait, AWaitThatNoSlotCanServeSaysWhyOnce) {
  Context context(make_settings(2));
  context.impl()->scheduler.stalled_wait_warning = std::chrono::milliseconds(200);
  std::promise<void> release;
  const std::shared_future<void> released = release.get_future().share();
  ::testing::internal::CaptureStderr();
  HeldSlots held(context, [released] { released.wait(); });
  // A third thread: no slot left to run the task it waits for.
  std::atomic<bool> done{false};
  std::thread waiter([&] {
    context.submit([] {}).wait();
    done.store(true);
  });
  std::string logged;
  for (int tick = 0; tick < 1000 && logged.find(stall_warning) == std::string::npos; ++tick) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (tick % 50 == 49) {  // the captured text so far, and capture on
      logged += ::testing::internal::GetCapturedStderr();
      ::testing::internal::CaptureStderr();
    }
  }
  EXPECT_FALSE(done.load());
  release.set_value();
  waiter.join();
  held.end();
  EXPECT_TRUE(done.load());
  logged += ::testing::internal::GetCapturedStderr();
  ASSERT_NE(logged.find(stall_warning), std::string::npos) << logged;
  EXPECT_NE(logged.find("all 2 slots ran task bodies blocked outside nerve"), std::string::npos) << logged;
  EXPECT_EQ(logged.find(stall_warning, logged.find(stall_warning) + 1), std::string::npos) << "warned twice";
}

// A wait that long, while the slots make progress (long tasks, each finishing), says nothing.
TEST(StalledWait, AWaitForBusySlotsThatFinishTasksSaysNothing) {
  Context context(make_settings(2));
  context.impl()->scheduler.stalled_wait_warning = std::chrono::milliseconds(50);
  ::testing::internal::CaptureStderr();
  TaskGroup busy(context);
  std::thread in_master([&] {
    for (int i = 0; i < 40; ++i)
      busy.spawn([] { std::this_thread::sleep_for(std::chrono::milliseconds(20)); });
    busy.wait();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::thread waiter([&] { context.submit([] {}).wait(); });
  waiter.join();
  in_master.join();
  const std::string logged = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(logged.find(stall_warning), std::string::npos) << logged;
}

// Slots busy computing (running, not blocked) for longer than the watch are not a stall: nothing said.
TEST(StalledWait, AWaitBehindLongComputationsSaysNothing) {
  Context context(make_settings(2));
  context.impl()->scheduler.stalled_wait_warning = std::chrono::milliseconds(100);
  ::testing::internal::CaptureStderr();
  HeldSlots held(context, [] {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(600);
    volatile std::uint64_t sink = 0;
    while (std::chrono::steady_clock::now() < until) sink = sink + 1;
  });
  std::thread waiter([&] { context.submit([] {}).wait(); });
  waiter.join();
  held.end();
  const std::string logged = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(logged.find(stall_warning), std::string::npos) << logged;
}

// A stalled wait polled with short timeouts (wait_for in a loop) is one wait to the watch: it warns.
TEST(StalledWait, APolledWaitThatNoSlotCanServeSaysWhy) {
  Context context(make_settings(2));
  context.impl()->scheduler.stalled_wait_warning = std::chrono::milliseconds(200);
  std::promise<void> release;
  const std::shared_future<void> released = release.get_future().share();
  ::testing::internal::CaptureStderr();
  HeldSlots held(context, [released] { released.wait(); });
  std::atomic<int> polls{0};
  std::thread waiter([&] {
    Task task = context.submit([] {});
    while (!task.wait_for(std::chrono::milliseconds(50))) polls.fetch_add(1);
  });
  while (polls.load() < 12) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  release.set_value();
  waiter.join();
  held.end();
  const std::string logged = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(logged.find(stall_warning), std::string::npos) << logged;
}

// waited_status(): the child's wait status, or -1 when it had not ended after `seconds` (killed).
int waited_status(pid_t child, int seconds) {
  int status = 0;
  for (int tick = 0; tick < seconds * 100; ++tick) {
    if (waitpid(child, &status, WNOHANG) == child) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(child, SIGKILL);
  waitpid(child, &status, 0);
  return -1;
}

// A child forked inside a task body is inside no task of its own: the contexts it makes work, their
// wait_all() included (it was refused as "inside a task of another context").
TEST(ContextFork, AChildForkedInATaskUsesContextsOfItsOwn) {
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "fork() of a multi-threaded process under the sanitizers (see above)";
#endif
  Context context(make_settings(2));
  pid_t child = -1;
  context
      .submit([&child] {
        child = fork();
        if (child != 0) return;
        int status = 1;
        try {
          Context own(make_settings(2));
          Buffer<int> counter(own, std::vector<int>{0});
          for (int i = 0; i < 10; ++i) own.spawn([](std::span<int> c) { ++c[0]; }, read_write(counter));
          own.wait_all();
          if (counter.to_vector()[0] == 10) status = 0;
        } catch (const std::exception& error) {
          std::fprintf(stderr, "child: %s\n", error.what());
          status = 2;
        }
        std::_Exit(status);
      })
      .wait();
  ASSERT_GT(child, 0);
  const int status = waited_status(child, 20);
  ASSERT_NE(status, -1) << "the child hung";
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "2: its context refused it (the message is on stderr)";
}

// A child forked in a task body that returns is back in the parent's worker loop, which no thread of
// the child can wake: it says so and exits with status 1 instead of waiting for ever (it hung).
TEST(ContextFork, AChildBackInTheParentsWorkerLoopExitsInsteadOfHanging) {
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "fork() of a multi-threaded process under the sanitizers (see above)";
#endif
  Context context(make_settings(2));
  int pipe_ends[2];
  ASSERT_EQ(pipe(pipe_ends), 0);
  std::atomic<pid_t> child{-1};
  TaskGroup group(context);
  std::atomic<bool> forked{false};
  // On the worker: the caller waits on a flag, not in the group (it would run the task itself).
  group.spawn([&] {
    const pid_t made = fork();
    if (made == 0) {
      dup2(pipe_ends[1], STDERR_FILENO);
      return;
    }
    child.store(made);
    forked.store(true);
  });
  while (!forked.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  group.wait();
  close(pipe_ends[1]);
  ASSERT_GT(child.load(), 0);
  const int status = waited_status(child.load(), 20);
  std::string said;
  char bytes[256];
  for (ssize_t got = 0; (got = ::read(pipe_ends[0], bytes, sizeof bytes)) > 0;)
    said.append(bytes, static_cast<std::size_t>(got));
  close(pipe_ends[0]);
  ASSERT_NE(status, -1) << "the child hung in the parent's worker loop";
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 1);
  EXPECT_THAT(said, ::testing::HasSubstr("was forked inside a task body and now waits in its parent"));
}

// The same from a wait nested inside a task (its sleeps are bounded: it hung, waking ~900 times a
// second): a worker's task waits for a group, and a member run under that wait forks and returns.
TEST(ContextFork, AChildBackInANestedWaitOfTheParentExitsInsteadOfHanging) {
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "fork() of a multi-threaded process under the sanitizers (see above)";
#endif
  Context context(make_settings(2));
  std::atomic<pid_t> child{-1};
  std::atomic<bool> forked{false};
  std::atomic<bool> blocker_started{false};
  std::atomic<bool> release{false};
  TaskGroup outer(context);
  outer.spawn([&] {  // on the worker
    TaskGroup inner(context);
    inner.spawn([&] {  // taken by the master (below): unfinished in the child, which has no master
      blocker_started.store(true);
      while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
    while (!blocker_started.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    inner.spawn([&] {  // run by this task's own wait
      const pid_t made = fork();
      if (made == 0) return;
      child.store(made);
      forked.store(true);
    });
    inner.wait();
  });
  std::thread master([&] { outer.wait(); });  // takes slot 0 and steals the blocker
  while (!forked.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const int status = waited_status(child.load(), 20);
  release.store(true);
  master.join();
  ASSERT_NE(status, -1) << "the child hung in the parent's nested wait";
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 1);
}

// A child forked outside any task that uses the parent's context (unsupported, but it may work:
// here another thread of the child wakes its main thread) is not taken for one forked in a task.
TEST(ContextFork, AChildForkedOutsideTasksIsNotEndedForSleepingInTheParentsContext) {
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "fork() of a multi-threaded process under the sanitizers (see above)";
#endif
  Context context(make_settings(1));
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int status = 1;
    try {
      Buffer<int> data(context, std::vector<int>{1});
      std::atomic<bool> mapped{false};
      std::thread waker([&] {  // holds a mapping the task waits for, then lets it go
        auto held = data.map_write();
        held[0] = 2;
        mapped.store(true);
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      });
      while (!mapped.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      int seen = 0;
      // Nothing to run until the unmap: this thread sleeps in the parent's scheduler meanwhile.
      context.submit([&seen](std::span<const int> value) { seen = value[0]; }, read(data)).wait();
      waker.join();
      if (seen == 2) status = 0;
    } catch (...) {
    }
    std::_Exit(status);
  }
  const int status = waited_status(child, 20);
  ASSERT_NE(status, -1) << "the child hung";
  ASSERT_TRUE(WIFEXITED(status)) << "the child died of signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

INSTANTIATE_TEST_SUITE_P(Runtime, RuntimeTest, NERVE_RUNTIME_PARAMS, runtime_param_name);

}  // namespace
}  // namespace nerve::testing
