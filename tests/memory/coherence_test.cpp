// Buffer replicas on separate-memory devices: transfers, invalidation, eviction, flags, errors.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include <gmock/gmock.h>

#include "coherence_support.hpp"

namespace nerve::testing {
namespace {

constexpr std::size_t n = 1024;

TEST(Coherence, DeviceWriteThenHostReadMovesTheDataBack) {
  auto context = context_with_devices(2, 1);
  EXPECT_EQ(context->devices().size(), 2u);
  EXPECT_EQ(context->devices()[1].kind, DeviceKind::test);
  {
    Buffer<int> data(*context, n);
    context->spawn(
        TaskOptions{.device = 1}, [](std::span<int> d) { std::iota(d.begin(), d.end(), 0); }, write(data));
    context->wait_all();
    EXPECT_EQ(bytes_moved(*context, 0, 1), 0u) << "a pure write fetches nothing";
    const auto values = data.to_vector();
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(values[i], static_cast<int>(i));
    EXPECT_EQ(bytes_moved(*context, 1, 0), n * sizeof(int))
        << "the host read brought the device's bytes back";
    data.to_vector();
    EXPECT_EQ(bytes_moved(*context, 1, 0), n * sizeof(int))
        << "the host copy stays valid: no second transfer";
  }
  expect_no_leaks(*context);
}

TEST(Coherence, HostDataIsCopiedOnceToEachDeviceThatReadsIt) {
  auto context = context_with_devices(2, 2);
  std::vector<int> initial(n, 3);
  Buffer<int> input(*context, std::span<const int>(initial));
  Buffer<long> sums(*context, 8);
  for (int round = 0; round < 4; ++round) {
    for (int device = 1; device <= 2; ++device) {
      context->spawn(
          TaskOptions{.device = device},
          [slot = static_cast<std::size_t>(round * 2 + device - 1)](std::span<const int> in,
                                                                    std::span<long> out) {
            out[0] = std::accumulate(in.begin(), in.end(), 0L) + static_cast<long>(slot);
          },
          read(input), write(sums.slice(static_cast<std::size_t>(round * 2 + device - 1), 1)));
    }
  }
  context->wait_all();
  EXPECT_EQ(bytes_moved(*context, 0, 1), n * sizeof(int));
  EXPECT_EQ(bytes_moved(*context, 0, 2), n * sizeof(int));
  const auto values = sums.to_vector();
  for (std::size_t i = 0; i < values.size(); ++i) EXPECT_EQ(values[i], 3L * n + static_cast<long>(i));
}

TEST(Coherence, WriteInvalidatesOtherReplicasAndPeerCopiesServeTheNextReader) {
  auto context = context_with_devices(2, 2);
  Buffer<int> data(*context, n);
  context->spawn(
      TaskOptions{.device = 1}, [](std::span<int> d) { std::fill(d.begin(), d.end(), 7); }, write(data));
  context->spawn(
      TaskOptions{.device = 2},
      [](std::span<int> d) {
        for (int& x : d) x += 1;
      },
      read_write(data));
  context->spawn(
      TaskOptions{.device = 1},
      [](std::span<int> d) {
        for (int& x : d) x *= 2;
      },
      read_write(data));
  EXPECT_EQ(data.to_vector(), std::vector<int>(n, 16));
  EXPECT_EQ(bytes_moved(*context, 1, 2), n * sizeof(int)) << "device 2 read device 1's result directly";
  EXPECT_EQ(bytes_moved(*context, 2, 1), n * sizeof(int)) << "device 1's old replica was invalid";
}

TEST(Coherence, SlicesOnDifferentDevicesKeepIndependentState) {
  auto context = context_with_devices(2, 2);
  Buffer<int> data(*context, n);
  context->spawn([](std::span<int> d) { std::fill(d.begin(), d.end(), 1); }, write(data));
  const std::size_t half = n / 2;
  context->spawn(
      TaskOptions{.device = 1},
      [](std::span<int> d) {
        for (int& x : d) x += 10;
      },
      read_write(data.slice(0, half)));
  context->spawn(
      TaskOptions{.device = 2},
      [](std::span<int> d) {
        for (int& x : d) x += 20;
      },
      read_write(data.slice(half, half)));
  const auto values = data.to_vector();
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(values[i], i < half ? 11 : 21) << i;
  EXPECT_EQ(bytes_moved(*context, 0, 1), half * sizeof(int)) << "only the slice it reads";
  EXPECT_EQ(bytes_moved(*context, 1, 0), half * sizeof(int));
  EXPECT_EQ(bytes_moved(*context, 2, 0), half * sizeof(int));
}

TEST(Coherence, CpuTasksReadDeviceResultsAndLocalityPicksTheDeviceWithTheData) {
  auto context = context_with_devices(2, 1);
  Buffer<int> data(*context, n);
  context->spawn(
      TaskOptions{.device = 1}, [](std::span<int> d) { std::fill(d.begin(), d.end(), 5); }, write(data));
  // No device requested: the data is only on device 1, so nerve runs the reader there.
  std::atomic<bool> ran_on_cpu{true};
  context->spawn(
      [&](std::span<const int> d) {
        ran_on_cpu = context->current_worker() >= 0;
        EXPECT_EQ(d[0], 5);
      },
      read(data));
  context->wait_all();
  EXPECT_FALSE(ran_on_cpu.load()) << "locality: the reader follows its data to the device";
  EXPECT_EQ(bytes_moved(*context, 1, 0), 0u);
  // Explicitly on the CPU: the data comes back first.
  Task cpu = context->submit(
      TaskOptions{.device = 0}, [](std::span<const int> d) { EXPECT_EQ(d[n - 1], 5); }, read(data));
  cpu.wait();
  EXPECT_EQ(bytes_moved(*context, 1, 0), n * sizeof(int));
}

// A device that refuses the size itself (a driver's largest allocation, below the node's limit): the
// error names the node, the buffer and what the node holds, as the limit's own error does; the
// driver's reason stays in it.
TEST(Coherence, ARefusedAllocationSaysWhichBufferAndNode) {
  detail::TestDeviceOptions capped;
  capped.max_allocation = n * sizeof(int) / 2;
  auto context = context_with_devices(2, 1, capped);
  Buffer<int> data(*context, n, BufferOptions{.name = "too_big"});
  try {
    context
        ->submit(
            TaskOptions{.device = 1}, [](std::span<int>) {}, write(data))
        .wait();
    ADD_FAILURE() << "the replica was refused";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::out_of_memory);
    EXPECT_THAT(error.what(), ::testing::HasSubstr("memory node 'test device 1'"));
    EXPECT_THAT(error.what(), ::testing::HasSubstr("'too_big'"));
    EXPECT_THAT(error.what(), ::testing::HasSubstr("allows for one allocation"));
    EXPECT_THAT(error.what(), ::testing::HasSubstr(", 0 bytes in use"));
  }
}

TEST(Coherence, EvictionUnderASmallLimitLosesNothing) {
  detail::TestDeviceOptions small;
  small.memory_limit = 3 * n * sizeof(int);  // room for three replicas
  auto context = context_with_devices(2, 1, small);
  std::vector<Buffer<int>> buffers;
  for (int b = 0; b < 8; ++b) buffers.emplace_back(*context, n);
  for (int b = 0; b < 8; ++b) {
    context->spawn(
        TaskOptions{.device = 1}, [b](std::span<int> d) { std::fill(d.begin(), d.end(), b * 100); },
        write(buffers[static_cast<std::size_t>(b)]));
  }
  context->wait_all();
  for (int b = 0; b < 8; ++b) {
    EXPECT_EQ(buffers[static_cast<std::size_t>(b)].to_vector(), std::vector<int>(n, b * 100))
        << "buffer " << b;
  }
  EXPECT_GE(bytes_moved(*context, 1, 0), 8 * n * sizeof(int))
      << "dirty evictions wrote back, then reads fetched";
}

// Every task's data fits the node, but not two tasks' at once: each waits for the memory the
// others hold, and none fails — however the pins of tasks acquiring at the same moment interleave.
TEST(Coherence, TasksThatFitWaitForMemoryOthersHoldAndNoneFails) {
  detail::TestDeviceOptions small;
  small.memory_limit = 5 * n * sizeof(unsigned) / 2;  // one task's two replicas, and half of a third
  auto context = context_with_devices(2, 2, small);
  constexpr int buffer_count = 8;
  std::vector<Buffer<unsigned>> buffers;  // unsigned: the sums wrap, defined
  std::vector<std::vector<unsigned>> expected;
  for (int b = 0; b < buffer_count; ++b) {
    expected.emplace_back(n, static_cast<unsigned>(b) + 1);
    buffers.emplace_back(*context, std::span<const unsigned>(expected.back()));
  }
  const auto add = [](std::span<unsigned> target, std::span<const unsigned> source) {
    for (std::size_t i = 0; i < target.size(); ++i) target[i] += source[i];
  };
  for (int round = 0; round < 200; ++round) {
    std::vector<Task> tasks;
    for (int k = 0; k < buffer_count / 2; ++k) {
      auto target = static_cast<std::size_t>(2 * k), source = target + 1;
      if (round % 2 != 0) std::swap(target, source);
      tasks.push_back(context->submit(TaskOptions{.device = 1 + (k + round) % 2}, add,
                                      read_write(buffers[target]), read(buffers[source])));
      for (std::size_t i = 0; i < n; ++i) expected[target][i] += expected[source][i];
    }
    for (Task& task : tasks) ASSERT_NO_THROW(task.wait()) << "round " << round;
  }
  for (int b = 0; b < buffer_count; ++b)
    EXPECT_EQ(buffers[static_cast<std::size_t>(b)].to_vector(), expected[static_cast<std::size_t>(b)]);
}

TEST(Coherence, StickyReplicasAreEvictedLast) {
  detail::TestDeviceOptions small;
  small.memory_limit = 2 * n * sizeof(int);
  auto context = context_with_devices(2, 1, small);
  Buffer<int> sticky(*context, n, BufferOptions{.name = "sticky", .sticky = true});
  Buffer<int> a(*context, n);
  Buffer<int> b(*context, n);
  auto touch = [&](Buffer<int>& buffer) {
    context
        ->submit(
            TaskOptions{.device = 1}, [](std::span<int> d) { d[0] = 1; }, write(buffer))
        .wait();
  };
  touch(sticky);  // least recently used of the three...
  touch(a);
  touch(b);  // ...but room for b is made by evicting a
  EXPECT_TRUE(has_replica(*context, sticky, 1));
  EXPECT_FALSE(has_replica(*context, a, 1));
  EXPECT_TRUE(has_replica(*context, b, 1));
}

// Room for two replicas; b then c are on the device, b the least recently used. A task reading a
// and b must make room by evicting c: b, which it needs itself, used to go, to be copied in again at
// once (and, when it was written there, written back first) — more than the minimum the access
// pattern needs (a white-box review).
TEST(Coherence, MakingRoomForATaskNeverEvictsAReplicaThatTaskNeeds) {
  constexpr std::size_t bytes = n * sizeof(int);
  for (const bool b_written_on_device : {false, true}) {
    detail::TestDeviceOptions small;
    small.memory_limit = 2 * bytes + 64;  // and the small output's replica
    auto context = context_with_devices(2, 1, small);
    const std::vector<int> fives(n, 5);
    Buffer<int> a(*context, std::span<const int>(fives));
    Buffer<int> b(*context, std::span<const int>(fives));
    Buffer<int> c(*context, std::span<const int>(fives));
    Buffer<long> out(*context, 2);
    const auto first = [](std::span<const int> x, std::span<long> o) { o[0] = x[0]; };
    if (b_written_on_device) {
      context->spawn(
          TaskOptions{.device = 1}, [](std::span<int> x) { std::fill(x.begin(), x.end(), 7); }, write(b));
    } else {
      context->spawn(TaskOptions{.device = 1}, first, read(b), write(out.slice(0, 1)));
    }
    context->wait_all();
    context->spawn(TaskOptions{.device = 1}, first, read(c), write(out.slice(1, 1)));
    context->wait_all();
    const std::uint64_t in_before = bytes_moved(*context, 0, 1);
    const std::uint64_t back_before = bytes_moved(*context, 1, 0);
    context->spawn(
        TaskOptions{.device = 1},
        [](std::span<const int> x, std::span<int> y) {
          for (std::size_t i = 0; i < y.size(); ++i) y[i] += x[i];
        },
        read(a), read_write(b));
    context->wait_all();
    EXPECT_EQ(bytes_moved(*context, 0, 1) - in_before, bytes)
        << "a alone comes in (b written there: " << b_written_on_device << ")";
    EXPECT_EQ(bytes_moved(*context, 1, 0) - back_before, 0u) << "nothing is written back";
    EXPECT_TRUE(has_replica(*context, b, 1));
    EXPECT_FALSE(has_replica(*context, c, 1));
    EXPECT_EQ(b.to_vector(), std::vector<int>(n, b_written_on_device ? 12 : 10));
  }
}

TEST(Coherence, HostCachedKeepsAValidHostCopyAfterDeviceWrites) {
  auto context = context_with_devices(2, 1);
  Buffer<int> cached(*context, n, BufferOptions{.host_cached = true});
  context->spawn(
      TaskOptions{.device = 1}, [](std::span<int> d) { std::fill(d.begin(), d.end(), 9); }, write(cached));
  context->wait_all();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (bytes_moved(*context, 1, 0) == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  EXPECT_EQ(bytes_moved(*context, 1, 0), n * sizeof(int)) << "written back without any host read";
  EXPECT_EQ(cached.to_vector(), std::vector<int>(n, 9));
  EXPECT_EQ(bytes_moved(*context, 1, 0), n * sizeof(int)) << "the read used the cached host copy";
}

// Two devices write a HOST_CACHED buffer in turn, the first one's copy-back slow: the second's
// copy-back must not land first and then be overwritten with the older bytes.
TEST(Coherence, HostCachedCopyBacksLandInTheOrderTheWritesHappened) {
  auto context = std::make_unique<Context>(make_settings(2));
  detail::TestDeviceOptions slow;
  slow.copy_latency = std::chrono::milliseconds(30);
  context->impl()->add_test_device(slow);
  context->impl()->add_test_device({});
  for (int round = 0; round < 3; ++round) {
    Buffer<int> cached(*context, n, BufferOptions{.host_cached = true});
    context->spawn(
        TaskOptions{.device = 1}, [](std::span<int> d) { std::fill(d.begin(), d.end(), 1); }, write(cached));
    context->spawn(
        TaskOptions{.device = 2}, [](std::span<int> d) { std::fill(d.begin(), d.end(), 2); },
        write(cached.slice(0, n / 2)));
    std::vector<int> expected(n, 1);
    std::fill(expected.begin(), expected.begin() + n / 2, 2);
    EXPECT_EQ(cached.to_vector(), expected) << "round " << round;
  }
}

// One device task writes a HOST_CACHED buffer through two accesses, one inside the other: one
// copy-back carries both (nothing was written in between), not one per access.
TEST(Coherence, ATaskWritingABufferTwiceCopiesItBackOnce) {
  auto context = context_with_devices(2, 1);
  Buffer<int> cached(*context, n, BufferOptions{.host_cached = true});
  context->spawn(
      TaskOptions{.device = 1},
      [](std::span<int> all, std::span<int> part) {
        std::fill(all.begin(), all.end(), 1);
        std::fill(part.begin(), part.end(), 2);
      },
      write(cached), write(cached.slice(n / 4, n / 2)));
  std::vector<int> expected(n, 1);
  std::fill(expected.begin() + n / 4, expected.begin() + 3 * n / 4, 2);
  EXPECT_EQ(cached.to_vector(), expected);
  context->wait_all();
  EXPECT_EQ(bytes_moved(*context, 1, 0), n * sizeof(int));
}

// Two accesses of one device write that overlap without either covering the other: one copy-back
// over their union, not one per access (the second would land the same bytes again under a reader
// that joined the first, or that found them valid after it). A host read of the overlap runs after
// that copy landed, whether it comes while the copy is on its way or later; the reader sees the
// bytes copied back so far. ThreadSanitizer would see a second store racing with the read.
TEST(Coherence, OverlappingWritesOfOneTaskGoBackInOneCopyThatReadersWaitFor) {
  auto context = std::make_unique<Context>(make_settings(2));
  detail::TestDeviceOptions slow;
  slow.copy_latency = std::chrono::milliseconds(30);
  context->impl()->add_test_device(slow);
  for (int round = 0; round < 3; ++round) {
    const std::uint64_t before = bytes_moved(*context, 1, 0);
    Buffer<int> cached(*context, n, BufferOptions{.host_cached = true});
    Buffer<int> later(*context, 1);
    context->spawn(
        TaskOptions{.device = 1},
        [](std::span<int> low, std::span<int> high) {
          std::fill(low.begin(), low.end(), 3);
          std::fill(high.begin(), high.end(), 3);
        },
        write(cached.slice(0, n / 2)), write(cached.slice(n / 4, n / 2)));
    // Ready after the copy-back landed (30 ms), when a second one would still be on its way.
    context->spawn(
        TaskOptions{.device = 0},
        [](std::span<int> d) {
          std::this_thread::sleep_for(std::chrono::milliseconds(45));
          d[0] = 1;
        },
        write(later));
    std::atomic<std::uint64_t> seen_at_once{0};
    std::atomic<std::uint64_t> seen_later{0};
    context->spawn(
        TaskOptions{.device = 0},
        [&](std::span<const int> d) {
          EXPECT_EQ(d[0], 3);
          seen_at_once = bytes_moved(*context, 1, 0) - before;
        },
        read(cached.slice(n / 4, n / 4)));
    context->spawn(
        TaskOptions{.device = 0},
        [&](std::span<const int> d, std::span<const int>) {
          EXPECT_EQ(d[0], 3);
          seen_later = bytes_moved(*context, 1, 0) - before;
        },
        read(cached.slice(n / 4, n / 4)), read(later));
    context->wait_all();
    constexpr std::uint64_t union_bytes = 3 * n / 4 * sizeof(int);  // [0, n/2) and [n/4, 3n/4)
    EXPECT_EQ(seen_at_once.load(), union_bytes) << "round " << round << ": read before the copy-back landed";
    EXPECT_EQ(seen_later.load(), union_bytes) << "round " << round << ": a second copy-back";
  }
}

// Copies in flight keep a buffer whose handles are gone alive like a pending access: the copy-back
// of a HOST_CACHED buffer started when its last task finishes, and the fetch of a device's result
// for a host read. Then the buffer goes: none is left once the copies have landed.
TEST(Coherence, CopiesInFlightKeepABufferWhoseHandlesAreGone) {
  auto context = context_with_devices(2, 1);
  std::atomic<long> seen{0};
  constexpr int rounds = 50;
  for (int round = 0; round < rounds; ++round) {
    {
      Buffer<int> cached(*context, n, BufferOptions{.host_cached = true});
      Buffer<int> plain(*context, n);
      context->spawn(
          TaskOptions{.device = 1}, [](std::span<int> d) { std::fill(d.begin(), d.end(), 9); },
          write(cached));
      context->spawn(
          TaskOptions{.device = 1}, [](std::span<int> d) { std::fill(d.begin(), d.end(), 7); }, write(plain));
      context->spawn(
          TaskOptions{.device = 0}, [&seen](std::span<const int> d) { seen.fetch_add(d[0] + d[n - 1]); },
          read(plain));
    }  // both handles go while the tasks and their copies are pending
    context->wait_all();
  }
  EXPECT_EQ(seen.load(), rounds * 14L) << "the host read saw the device's result";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (live_buffers(*context) != 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  EXPECT_EQ(live_buffers(*context), 0u) << "a buffer outlived its handles, tasks and copies";
}

TEST(Coherence, OutOfMemoryFailsTheTaskWithAClearError) {
  detail::TestDeviceOptions small;
  small.memory_limit = 1000;
  auto context = context_with_devices(2, 1, small);
  Buffer<int> big(*context, n);
  Task task = context->submit(
      TaskOptions{.device = 1}, [](std::span<int> d) { d[0] = 1; }, write(big));
  Task after = context->submit(
      TaskOptions{.device = 0}, [](std::span<const int>) {}, read(big));
  try {
    task.wait();
    FAIL() << "the replica cannot fit";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::out_of_memory);
    const std::string message = error.what();
    EXPECT_NE(message.find("memory node 'test device 1'"), std::string::npos) << message;
    EXPECT_NE(message.find("4096"), std::string::npos) << message;
    EXPECT_NE(message.find("limit 1000"), std::string::npos) << message;
  }
  EXPECT_THROW(after.wait(), TaskCancelled) << "the reader of the failed write is cancelled";
  EXPECT_NO_THROW(context->wait_all()) << "task.wait() reported the failure (once)";
  // The context is still usable.
  Buffer<int> small_buffer(*context, 10);
  context
      ->submit(
          TaskOptions{.device = 1}, [](std::span<int> d) { d[0] = 2; }, write(small_buffer))
      .wait();
  EXPECT_EQ(small_buffer.to_vector()[0], 2);
}

// A task nerve places itself never goes to a device whose memory, even empty, cannot hold its
// replicas: the device holding most of its input is left out, and the CPU workers run it instead of
// it failing there with out_of_memory — under either policy that places by locality. Sent to that
// device with TaskOptions::device, it still fails, saying so.
TEST(Coherence, APlacedTaskWhoseDataCanNeverFitTheDeviceWithItsInputRunsOnTheCpu) {
  for (const SchedulerPolicy policy : {SchedulerPolicy::locality_aware_stealing, SchedulerPolicy::eager}) {
    Context context(make_settings(2, policy));
    context.impl()->add_test_device(detail::TestDeviceOptions{.memory_limit = 3 * n * sizeof(int)});
    Buffer<int> first(context, n), second(context, n), on_host(context, std::vector<int>(n, 1));
    Buffer<long> sum(context, 1);
    for (Buffer<int>* each : {&first, &second}) {
      context.spawn(
          TaskOptions{.device = 1}, [](std::span<int> d) { std::fill(d.begin(), d.end(), 5); }, write(*each));
    }
    context.wait_all();
    // Two thirds of its input is on the device, but its four replicas would take 3n ints and a long.
    const auto add_all = [&](std::span<const int> a, std::span<const int> b, std::span<const int> c,
                             std::span<long> out) {
      EXPECT_GE(context.current_worker(), 0) << "it ran on the device";
      out[0] = std::accumulate(a.begin(), a.end(), 0L) + std::accumulate(b.begin(), b.end(), 0L) +
               std::accumulate(c.begin(), c.end(), 0L);
    };
    EXPECT_NO_THROW(context.submit(add_all, read(first), read(second), read(on_host), write(sum)).wait());
    EXPECT_EQ(sum.to_vector()[0], 11L * n);
    try {
      context.submit(TaskOptions{.device = 1}, add_all, read(first), read(second), read(on_host), write(sum))
          .wait();
      ADD_FAILURE() << "sent to the device, its data cannot fit";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::out_of_memory);
      EXPECT_THAT(error.what(), ::testing::HasSubstr("the task needs 12296 bytes there in all"));
    }
    context.wait_all();
  }
}

// A buffer of zero elements is valid (MEMORY.md): tasks on it run with empty spans on the CPU and
// on a device, its mappings are empty, and it orders tasks as any buffer does.
TEST(Coherence, ABufferOfZeroElementsRunsItsTasksWithEmptySpans) {
  auto context = context_with_devices(2, 1);
  Buffer<int> empty(*context, 0);
  std::vector<int> order;
  for (const int device : {0, 1, 0}) {
    context->spawn(
        TaskOptions{.device = device},
        [&order, device](std::span<int> data) {
          EXPECT_TRUE(data.empty());
          order.push_back(device);
        },
        read_write(empty));
  }
  context->wait_all();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 0})) << "read-write accesses of one buffer run in order";
  EXPECT_EQ(empty.map_read().size(), 0u);
  EXPECT_EQ(empty.to_vector().size(), 0u);
  EXPECT_EQ(context->stats().bytes_transferred, 0u);
}

// A task sent to a device its data can never fit fails before it evicts anything: emptying the
// device would write its dirty replicas back and the next task there would copy them in again, and
// the message would describe the emptied node instead of what it held.
TEST(Coherence, ATaskThatCanNeverFitTheDeviceFailsWithoutEvictingIt) {
  Context context(make_settings(2, SchedulerPolicy::locality_aware_stealing));
  context.impl()->add_test_device(detail::TestDeviceOptions{.memory_limit = 3 * n * sizeof(int)});
  Buffer<int> first(context, n), second(context, n), big(context, 4 * n);
  for (Buffer<int>* each : {&first, &second}) {
    context.spawn(
        TaskOptions{.device = 1}, [](std::span<int> d) { std::fill(d.begin(), d.end(), 5); }, write(*each));
  }
  context.wait_all();
  try {
    context
        .submit(
            TaskOptions{.device = 1}, [](std::span<int>) {}, read_write(big))
        .wait();
    ADD_FAILURE() << "sent to the device, its data cannot fit";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::out_of_memory);
    EXPECT_THAT(error.what(),
                ::testing::HasSubstr(std::to_string(2 * n * sizeof(int)) + " in use by 2 replica(s)"));
  }
  EXPECT_EQ(bytes_moved(context, 1, 0), 0u) << "the device's dirty replicas were written back";
  context
      .submit(
          TaskOptions{.device = 1}, [](std::span<int> d) { d[0] += 1; }, read_write(first))
      .wait();
  EXPECT_EQ(bytes_moved(context, 0, 1), 0u) << "the device's replica was copied in again";
  EXPECT_EQ(first.to_vector()[0], 6);
  context.wait_all();
}

// A device replica is the whole buffer, so a buffer larger than the device never goes there, not
// even one slice at a time. Slice tasks that nerve places run on the CPU workers — although another
// input, whole on the device, would draw them there — and one sent there fails, saying why.
TEST(Coherence, SlicesOfABufferLargerThanTheDeviceRunOnTheCpuWhenPlaced) {
  auto context = context_with_devices(2, 1, detail::TestDeviceOptions{.memory_limit = 2 * n * sizeof(int)});
  Buffer<int> stream(*context, std::vector<int>(4 * n, 1), BufferOptions{.name = "stream"});
  Buffer<int> steps(*context, n / 2);
  context->spawn(
      TaskOptions{.device = 1}, [](std::span<int> d) { std::fill(d.begin(), d.end(), 1); }, write(steps));
  context->wait_all();
  const auto step = [](std::span<const int> by, std::span<int> chunk) {
    for (int& value : chunk) value += by[0];
  };
  std::vector<Task> tasks;
  for (std::size_t offset = 0; offset < 4 * n; offset += n / 4)
    tasks.push_back(context->submit(step, read(steps), read_write(stream.slice(offset, n / 4))));
  for (Task& task : tasks) EXPECT_NO_THROW(task.wait());
  EXPECT_EQ(stream.to_vector(), std::vector<int>(4 * n, 2));
  EXPECT_FALSE(has_replica(*context, stream, 1));
  try {
    context->submit(TaskOptions{.device = 1}, step, read(steps), read_write(stream.slice(0, n / 4))).wait();
    ADD_FAILURE() << "sent to the device, its slice needs the whole buffer there";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::out_of_memory);
    EXPECT_THAT(error.what(), ::testing::HasSubstr("'stream'"));
    EXPECT_THAT(error.what(), ::testing::HasSubstr("the whole buffer, even for a task on a slice"));
  }
  context->wait_all();
}

// A task that fails because its data cannot fit never runs; what its closure holds is released.
TEST(Coherence, ATaskFailedForMemoryReleasesItsClosure) {
  detail::TestDeviceOptions small;
  small.memory_limit = 1000;
  auto context = context_with_devices(2, 1, small);
  Buffer<int> big(*context, n);
  auto token = std::make_shared<int>(0);
  Task task = context->submit(
      TaskOptions{.device = 1}, [token](std::span<int> d) { d[0] = *token; }, write(big));
  EXPECT_THROW(task.wait(), Error);
  EXPECT_EQ(token.use_count(), 1) << "the failed task's closure still holds its captures";
  context->wait_all();
}

TEST(Coherence, UnknownDeviceIsAnErrorAtSubmit) {
  auto context = context_with_devices(1, 1);
  try {
    context->spawn(TaskOptions{.name = "misplaced", .device = 5}, [] {});
    FAIL();
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(error.what()).find("misplaced"), std::string::npos) << error.what();
  }
  context->wait_all();
  expect_no_leaks(*context);
}

TEST(Coherence, MappingWaitsForDeviceWritersAndWriteMappingInvalidatesDevices) {
  auto context = context_with_devices(2, 1);
  Buffer<int> data(*context, n);
  context->spawn(
      TaskOptions{.device = 1}, [](std::span<int> d) { std::fill(d.begin(), d.end(), 4); }, write(data));
  {
    auto mapped = data.map_read_write();
    EXPECT_EQ(mapped[7], 4);
    mapped[7] = 40;
  }
  Task check = context->submit(
      TaskOptions{.device = 1},
      [](std::span<const int> d) {
        EXPECT_EQ(d[7], 40) << "the device replica was invalidated by the write mapping";
      },
      read(data));
  check.wait();
  EXPECT_EQ(bytes_moved(*context, 0, 1), n * sizeof(int));
}

// try_map never waits, not for a copy back from a device either (it used to block for the copy,
// running other tasks meanwhile): it asks for the data and returns nothing; once the copy is done a
// later try_map maps it. A write-only try_map needs no copy.
// A try_map() over data a failed task wrote throws TaskCancelled, as map() does, also when part of
// the range is valid only on a device. It asked for a copy back instead and returned nothing, and
// that prefetch, registered with the caller's mode, was cancelled: after try_map(read_write) the
// whole range counted as failed (as after a failed map_read_write) while the caller had been told
// nothing (a reviewer's random-program fuzzer). After a throwing try_map(read) nothing else is failed.
TEST(Coherence, ATryMapOverFailedDataThrowsAsMapDoes) {
  auto context = std::make_unique<Context>(make_settings(2));
  context->impl()->add_test_device(detail::TestDeviceOptions{});
  // 0..999, then [500, 600) written by a failed task and [0, 32) = 7 valid only on the device.
  const auto failed_and_on_the_device = [&context] {
    Buffer<int> data(*context, 1000);
    {
      auto mapped = data.map_write();
      std::iota(mapped.begin(), mapped.end(), 0);
    }
    Task failed = context->submit([](std::span<int>) { throw std::runtime_error("boom"); },
                                  read_write(data.slice(500, 100)));
    EXPECT_THROW(failed.wait(), std::runtime_error);
    context
        ->submit(
            TaskOptions{.device = 1}, [](std::span<int> d) { std::fill(d.begin(), d.end(), 7); },
            write(data.slice(0, 32)))
        .wait();
    return data;
  };
  for (const Access mode : {Access::read, Access::read_write}) {
    Buffer<int> data = failed_and_on_the_device();
    EXPECT_THROW((void)data.try_map(mode), TaskCancelled)
        << "the mapping would read what the failed task wrote";
    EXPECT_THROW((void)data.slice(500, 10).map_read(), TaskCancelled);
    if (mode == Access::read_write) {  // as after a failed map_read_write (buffer.hpp)
      EXPECT_THROW((void)data.slice(40, 10).map_read(), TaskCancelled);
      continue;
    }
    for (const auto& [offset, expected] : {std::pair{0, 7}, std::pair{40, 40}, std::pair{700, 700}}) {
      try {
        auto clean = data.slice(offset, 10).map_read();
        EXPECT_EQ(clean[0], expected) << "offset " << offset;
      } catch (const std::exception& error) {
        ADD_FAILURE() << "bytes at " << offset << " that no failed task wrote: " << error.what();
      }
    }
  }
  // Without failed data in its range, a try_map(read_write) that asks for the copy marks nothing.
  Buffer<int> data = failed_and_on_the_device();
  std::optional<Mapped<int>> mapped;
  for (int polls = 0; !mapped && polls < 20000; ++polls) {
    mapped = data.slice(0, 400).try_map(Access::read_write);
    if (!mapped) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_TRUE(mapped.has_value()) << "the copy asked for never arrived";
  EXPECT_EQ((*mapped)[0], 7);
  EXPECT_EQ((*mapped)[40], 40);
  mapped->unmap();
  EXPECT_NO_THROW((void)data.slice(700, 10).map_read());
}

TEST(Coherence, TryMapDoesNotWaitForACopyBackFromADevice) {
  auto context = std::make_unique<Context>(make_settings(1));
  detail::TestDeviceOptions slow;
  slow.copy_latency = std::chrono::milliseconds(300);
  context->impl()->add_test_device(slow);
  for (const bool host_cached : {false, true}) {
    Buffer<int> data(*context, 256, BufferOptions{.host_cached = host_cached});
    context
        ->submit(
            TaskOptions{.device = 1}, [](std::span<int> d) { std::fill(d.begin(), d.end(), 6); }, write(data))
        .wait();
    std::atomic<bool> other_ran{false};
    context->spawn([&] { other_ran = true; });  // one slot: only a waiting caller would run it
    const auto start = std::chrono::steady_clock::now();
    EXPECT_FALSE(data.try_map(Access::read).has_value()) << "host_cached " << host_cached;
    EXPECT_FALSE(data.try_map(Access::read_write).has_value()) << "still in flight";
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(250))
        << "try_map waited for the copy";
    EXPECT_FALSE(other_ran.load()) << "try_map ran a task";
    std::optional<Mapped<int>> mapped;
    for (int polls = 0; !mapped && polls < 20000; ++polls) {
      mapped = data.try_map(Access::read);
      if (!mapped) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ASSERT_TRUE(mapped.has_value()) << "the copy asked for never arrived";
    EXPECT_EQ((*mapped)[0], 6);
    EXPECT_EQ((*mapped)[255], 6);
    mapped->unmap();
    context->wait_all();
    EXPECT_TRUE(other_ran.load());
  }
  Buffer<int> written(*context, 256);
  context
      ->submit(
          TaskOptions{.device = 1}, [](std::span<int> d) { std::fill(d.begin(), d.end(), 1); },
          write(written))
      .wait();
  auto overwrite = written.try_map(Access::write);
  ASSERT_TRUE(overwrite.has_value()) << "a write mapping needs no copy";
  overwrite->unmap();
  // A write mapping waits for a HOST_CACHED buffer's copy-back still landing on the host (it would
  // overwrite what the mapping writes): try_map is busy instead of waiting. It waited 300 ms.
  Buffer<int> cached(*context, 256, BufferOptions{.host_cached = true});
  context
      ->submit(
          TaskOptions{.device = 1}, [](std::span<int> d) { std::fill(d.begin(), d.end(), 2); }, write(cached))
      .wait();
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(cached.try_map(Access::write).has_value()) << "the copy-back is in flight";
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(250))
      << "try_map(write) waited for the copy-back";
  std::optional<Mapped<int>> later;
  for (int polls = 0; !later && polls < 20000; ++polls) {
    later = cached.try_map(Access::write);
    if (!later) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_TRUE(later.has_value()) << "busy for good";
  (*later)[0] = 3;
  later->unmap();
  EXPECT_EQ(cached.to_vector()[0], 3) << "the copy-back landed before the mapping's write";
  EXPECT_EQ(cached.to_vector()[1], 2);
}

}  // namespace
}  // namespace nerve::testing
