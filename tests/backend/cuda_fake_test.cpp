// The CUDA backend's host-side logic on a fake driver (no GPU needed): pools, streams and their
// priorities, the event pool, completion flags, peer and staged copies, managed memory with hints and
// prefetches, launch errors, and whole contexts running kernels on simulated CUDA devices.
#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>

#include <gmock/gmock.h>

#include "nerve/cuda.hpp"

#include "backend/cuda/allocators.hpp"
#include "backend/cuda/device.hpp"
#include "backend/cuda/device_pools.hpp"
#include "backend/cuda/engine.hpp"
#include "backend/cuda/event_pool.hpp"
#include "backend/cuda/stream_set.hpp"
#include "cuda_support.hpp"
#include "perf/perf_test.hpp"

namespace nerve::testing {
namespace {

using detail::MemoryNode;
using detail::cuda::Advice;
using detail::cuda::BlockKind;
using detail::cuda::CompletionMode;
using detail::cuda::CudaBlockAllocator;
using detail::cuda::CudaMemoryNode;
using detail::cuda::CudaMemoryOptions;
using detail::cuda::Engine;
using detail::cuda::EventPool;
using detail::cuda::FakeDriver;
using detail::cuda::FakeOptions;
using detail::cuda::Operation;
using detail::cuda::StreamOrderedPool;
using detail::cuda::StreamSet;
using memory::DeviceArena;
using memory::DeviceArenaOptions;

// --- parts

TEST(CudaEventPool, ReusesEventsInsteadOfCreatingOnePerOperation) {
  FakeDriver driver;
  {
    EventPool pool(driver, 0);
    for (int i = 0; i < 1000; ++i) pool.release(pool.acquire());
    EXPECT_EQ(driver.calls("create_event"), 1u);
    std::vector<void*> held;
    for (int i = 0; i < 8; ++i) held.push_back(pool.acquire());
    EXPECT_EQ(pool.created(), 8u);
    EXPECT_EQ(pool.in_use(), 8u);
    for (void* event : held) pool.release(event);
    EXPECT_EQ(pool.in_use(), 0u);
  }
  EXPECT_EQ(driver.live_events(), 0u) << "the pool destroys its events";
}

TEST(CudaStreamSet, ReservesHighPriorityStreamsForHighPriorityTasks) {
  FakeDriver driver;
  StreamSet streams(driver, 0, 4, 2);
  ASSERT_EQ(streams.size(), 4u);
  std::map<void*, int> priority;
  for (const auto& record : driver.records("create_stream")) priority[record.stream] = record.detail;
  EXPECT_EQ(priority[streams.stream(0)], -5);
  EXPECT_EQ(priority[streams.stream(1)], -5);
  EXPECT_EQ(priority[streams.stream(2)], 0);
  for (int i = 0; i < 16; ++i) {
    EXPECT_TRUE(streams.is_high_priority(streams.pick_for_task(100)));
    EXPECT_FALSE(streams.is_high_priority(streams.pick_for_task(0)));
    EXPECT_FALSE(streams.is_high_priority(streams.pick_for_task(-100)));
  }
  // Copies have a stream per direction, apart from the tasks' streams.
  const std::set<void*> copy_streams = {streams.copy_stream(true), streams.copy_stream(false)};
  EXPECT_EQ(copy_streams.size(), 2u);
  for (std::size_t i = 0; i < streams.size(); ++i) EXPECT_EQ(copy_streams.count(streams.stream(i)), 0u);
  EXPECT_EQ(priority[streams.copy_stream(true)], 0) << "ordinary priority";
  // Reserving every stream keeps one ordinary; without a reservation high-priority tasks share.
  StreamSet all(driver, 0, 2, 16);
  EXPECT_EQ(all.reserved_high(), 1u);
  StreamSet none(driver, 0, 2, 0);
  EXPECT_FALSE(none.is_high_priority(none.pick_for_task(100)));
}

TEST(CudaDeviceArena, SubAllocatesBigBlocksAndCoalescesFreedRanges) {
  FakeDriver driver;
  {
    DeviceArena arena(std::make_unique<CudaBlockAllocator>(driver, BlockKind::device, 0, 1, "fake device"),
                      DeviceArenaOptions{.chunk_bytes = std::size_t{1} << 20});
    std::vector<void*> pieces;
    for (int i = 0; i < 64; ++i) {
      void* piece = arena.allocate(1000 + static_cast<std::size_t>(i));
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(piece) % arena.alignment(), 0u);
      pieces.push_back(piece);
    }
    EXPECT_EQ(driver.calls("malloc"), 1u) << "64 small allocations come from one driver block";
    for (std::size_t i = 0; i < pieces.size(); i += 2) arena.deallocate(pieces[i], 1000 + i);
    for (std::size_t i = 1; i < pieces.size(); i += 2) arena.deallocate(pieces[i], 1000 + i);
    // Everything coalesced back into one range: the whole chunk fits again without a new block.
    void* whole = arena.allocate(std::size_t{1} << 20);
    EXPECT_EQ(driver.calls("malloc"), 1u);
    arena.deallocate(whole, std::size_t{1} << 20);
    // A request larger than a chunk gets a chunk of its own; compact() returns the empty ones.
    void* big = arena.allocate(std::size_t{3} << 20);
    EXPECT_EQ(driver.calls("malloc"), 2u);
    arena.deallocate(big, std::size_t{3} << 20);
    EXPECT_EQ(arena.stats().bytes_in_use, 0u);
    EXPECT_GT(arena.compact(), 0u);
    EXPECT_EQ(arena.chunks(), 0u);
  }
  EXPECT_EQ(driver.live_device_allocations(), 0u);
}

TEST(CudaDeviceArena, AFullDeviceIsOutOfMemoryNotACrash) {
  FakeDriver driver(FakeOptions{.devices = 1, .memory_bytes = std::size_t{8} << 20});
  DeviceArena arena(std::make_unique<CudaBlockAllocator>(driver, BlockKind::device, 0, 1, "fake device"),
                    DeviceArenaOptions{.chunk_bytes = std::size_t{4} << 20});
  void* first = arena.allocate(std::size_t{3} << 20);
  void* second = arena.allocate(std::size_t{3} << 20);
  try {
    (void)arena.allocate(std::size_t{3} << 20);
    FAIL() << "the device is full";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::out_of_memory);
    EXPECT_NE(std::string(error.what()).find("fake device"), std::string::npos) << error.what();
  }
  EXPECT_EQ(arena.try_allocate(std::size_t{3} << 20), nullptr);
  arena.deallocate(first, std::size_t{3} << 20);
  arena.deallocate(second, std::size_t{3} << 20);
  // Empty chunks are given back when a request needs the room.
  void* large = arena.allocate(std::size_t{7} << 20);
  arena.deallocate(large, std::size_t{7} << 20);
}

TEST(CudaStreamOrderedPool, AllocatesThroughTheDriversPool) {
  FakeDriver driver;
  {
    StreamOrderedPool pool(driver, 0,
                           std::make_unique<CudaBlockAllocator>(driver, BlockKind::device, 0, 1, "d"),
                           std::size_t{1} << 20);
    void* a = pool.allocate(4096);
    EXPECT_EQ(driver.calls("malloc_async"), 1u);
    EXPECT_EQ(driver.calls("malloc"), 0u);
    EXPECT_THROW((void)pool.allocate(std::size_t{1} << 20), Error) << "over the limit";
    pool.deallocate(a, 4096);
    EXPECT_EQ(driver.calls("free_async"), 1u);
    EXPECT_EQ(pool.stats().bytes_in_use, 0u);
  }
  EXPECT_EQ(driver.live_streams(), 0u);
}

TEST(CudaManagedMemory, NeverAsksForMoreThanIsFree) {
  FakeDriver driver;
  CudaBlockAllocator managed(driver, BlockKind::managed, 0, 1, "managed memory of fake");
  driver.set_free_bytes(0, std::size_t{1} << 20);
  try {
    (void)managed.allocate_block(std::size_t{2} << 20, 0);
    FAIL() << "more than is free";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::out_of_memory);
    EXPECT_NE(std::string(error.what()).find("only 1048576 bytes free"), std::string::npos) << error.what();
  }
  EXPECT_EQ(driver.calls("malloc_managed"), 0u) << "the driver was never asked";
  void* block = managed.allocate_block(std::size_t{512} << 10, 0);
  EXPECT_EQ(driver.calls("malloc_managed"), 1u);
  managed.free_block(block, std::size_t{512} << 10);
}

// As in CUDA, an event may be destroyed while a record of it is still queued on a stream; the queued
// work still runs (here when the stream is destroyed). An engine destroys its event pool before its
// streams, and the fake driver's queued record wrote into the freed event (ThreadSanitizer saw it in
// CI's run; AddressSanitizer sees it here every time).
TEST(CudaFakeDriver, AnEventDestroyedWhileRecordedLeavesTheQueuedRecordHarmless) {
  FakeDriver driver(FakeOptions{.hold_work = true});
  const auto stream = driver.create_stream(0, 0);
  const auto event = driver.create_event(0);
  driver.record_event(event, stream);
  driver.stream_wait_event(stream, event);
  driver.destroy_event(event);
  driver.destroy_stream(0, stream);  // runs the record and the wait
  EXPECT_EQ(driver.calls("destroy_stream"), 1u);
}

struct Done {
  std::atomic<int> count{0};
  static bool finish(Engine&, Operation& op) {
    static_cast<Done*>(op.owner)->count.fetch_add(1);
    return true;
  }
};

void wait_for(const std::atomic<int>& count, int expected) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (count.load() < expected && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::microseconds(50));
}

TEST(CudaEngine, CompletesThroughTheFlagTheDeviceWrites) {
  auto driver = std::make_shared<FakeDriver>(FakeOptions{.hold_work = true});
  Done done;
  {
    Engine engine(driver, 0, 2, 0, 8, CompletionMode::flag);
    for (int i = 0; i < 3; ++i) {
      Operation* op = engine.acquire();
      op->owner = &done;
      op->finish = &Done::finish;
      engine.arm(op, engine.streams().stream(0));
      engine.watch(op);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(done.count.load(), 0) << "the device has not run the work: no flag is written";
    driver->run_pending();
    wait_for(done.count, 3);
    EXPECT_EQ(done.count.load(), 3);
    EXPECT_EQ(engine.flag_completions(), 3u);
    EXPECT_EQ(driver->calls("write_flag"), 3u);
  }
  EXPECT_EQ(driver->live_events(), 0u);
  EXPECT_EQ(driver->live_device_allocations(), 0u) << "the flag array is freed";
}

TEST(CudaEngine, EventModeQueriesEvents) {
  auto driver = std::make_shared<FakeDriver>(FakeOptions{.hold_work = true});
  Done done;
  Engine engine(driver, 0, 1, 0, 8, CompletionMode::event);
  Operation* op = engine.acquire();
  op->owner = &done;
  op->finish = &Done::finish;
  engine.arm(op, engine.streams().stream(0));
  engine.watch(op);
  driver->run_pending();
  wait_for(done.count, 1);
  EXPECT_EQ(done.count.load(), 1);
  EXPECT_EQ(engine.event_completions(), 1u);
  EXPECT_EQ(driver->calls("write_flag"), 0u);
}

// --- whole contexts on fake CUDA devices

Kernel make_scale() {
  Kernel scale("scale");
  const CpuKernel body = [](const KernelArgs& args) {
    for (float& each : args.span<float>(0)) each *= args.value<float>(0);
  };
  scale.cpu(body);
  cuda::attach(scale, cpu_launcher(body));
  return scale;
}

Kernel make_sum() {  // y += x
  Kernel sum("sum");
  const CpuKernel body = [](const KernelArgs& args) {
    const auto x = args.span<const float>(0);
    const auto y = args.span<float>(1);
    for (std::size_t i = 0; i < y.size(); ++i) y[i] += x[i];
  };
  sum.cpu(body);
  cuda::attach(sum, cpu_launcher(body));
  return sum;
}

TEST(CudaFakeContext, KernelsRunAndDataComesBackThroughPinnedStaging) {
  FakeCuda cuda;
  {
    Context context(FakeCuda::settings(2));
    {
      ASSERT_EQ(context.devices().size(), 3u) << "the CPU workers and two fake CUDA devices";
      EXPECT_EQ(context.devices()[1].kind, DeviceKind::cuda);
      const Kernel scale = make_scale();
      Buffer<float> x(context, std::vector<float>(4096, 1.0f));
      context.submit(TaskOptions{.device = 1}, scale, read_write(x), value(3.0f)).wait();
      EXPECT_EQ(x.to_vector(), std::vector<float>(4096, 3.0f));
      EXPECT_GE(cuda.driver->calls("host_alloc"), 1u) << "pinned staging and completion flags";
      EXPECT_GE(cuda.driver->records("copy").size(), 2u);
      const auto counters = context.impl()->devices[0]->counters();
      EXPECT_EQ(counters.launches, 1u);
    }  // buffers and kernels go before the leak check
    expect_no_leaks(context);
  }
  EXPECT_EQ(cuda.driver->live_device_allocations(), 0u) << "every block, pinned or device, was freed";
  EXPECT_EQ(cuda.driver->live_streams(), 0u);
  EXPECT_EQ(cuda.driver->live_events(), 0u);
}

// A copy ending on one device may start one on another: a HOST_CACHED buffer written on GPU 2, then
// on GPU 1, queues GPU 1's copy-back behind GPU 2's. Shutdown stopped the devices' engines one after
// the other, so GPU 2's copy-back, landing after GPU 1's engine had stopped, started GPU 1's on it:
// that copy never completed, and its buffer kept the whole context alive (its streams, events and
// blocks leaked). Every device is now idle at once before any engine stops; an engine that has
// stopped refuses an operation instead of keeping it for ever.
TEST(CudaShutdown, ACopyOneDeviceStartsOnAnotherWhileTheContextShutsDownCompletes) {
  FakeCuda cuda;
  detail::cuda::Stream first_out = nullptr;  // GPU 1's stream of copies to the host
  {
    auto context = std::make_unique<Context>(FakeCuda::settings(2));
    auto* first = dynamic_cast<detail::cuda::CudaDevice*>(context->impl()->devices[0].get());
    auto* second = dynamic_cast<detail::cuda::CudaDevice*>(context->impl()->devices[1].get());
    ASSERT_TRUE(first != nullptr && second != nullptr);
    first_out = first->engine().streams().copy_stream(false);
    Kernel fill("fill");
    cuda::attach(fill, cpu_launcher([](const KernelArgs& args) {
                   for (float& each : args.span<float>(0)) each = args.value<float>(0);
                 }));
    {
      Buffer<float> x(*context, 1024, BufferOptions{.host_cached = true});
      cuda.driver->hold_stream(second->engine().streams().copy_stream(false));  // GPU 2's copies out
      context->submit(TaskOptions{.device = 2}, fill, write(x), value(1.0f)).wait();
      context->submit(TaskOptions{.device = 1}, fill, write(x), value(2.0f)).wait();
    }
    std::thread gpu([&] {  // GPU 2's copy-back lands while the context shuts down
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      cuda.driver->release_stream();
    });
    context.reset();
    gpu.join();
  }
  const auto copies = cuda.driver->records("copy");
  EXPECT_TRUE(std::any_of(copies.begin(), copies.end(), [&](const auto& copy) {
    return copy.stream == first_out;
  })) << "GPU 1's copy-back never reached the device";
  EXPECT_EQ(cuda.driver->live_streams(), 0u) << "the context was not destroyed";
  EXPECT_EQ(cuda.driver->live_device_allocations(), 0u);
  EXPECT_EQ(cuda.driver->live_events(), 0u);
}

TEST(CudaShutdown, AStoppedEngineRefusesACopyRatherThanKeepIt) {
  auto driver = std::make_shared<FakeDriver>(FakeOptions{.devices = 2});
  CudaMemoryOptions options;
  options.limit_bytes = std::size_t{1} << 20;
  CudaMemoryNode a(1, "A", std::make_shared<Engine>(driver, 0, 2, 0, 8, CompletionMode::flag), options);
  CudaMemoryNode b(2, "B", std::make_shared<Engine>(driver, 1, 2, 0, 8, CompletionMode::flag), options);
  std::byte* source = b.try_allocate(4096);
  std::byte* destination = a.try_allocate(4096);
  a.drain();
  struct Ignored final : detail::CopyCompletion {
    void copy_done(bool, const std::string&) noexcept override {
      ADD_FAILURE() << "a copy on a stopped engine";
    }
  } completion;
  try {
    MemoryNode::copy(b, source, a, destination, 4096, completion);
    ADD_FAILURE() << "the stopped engine took the copy";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), ::testing::HasSubstr("started after its engine stopped"));
  }
  EXPECT_EQ(a.wait_idle(), 0u) << "nothing was started";
  a.deallocate(destination, 4096);
  b.deallocate(source, 4096);
}

// The device runs its streams' work later, on another thread (as a GPU does): copies beyond
// gpu.max_pending_transfers wait for a place, and everything still completes through the flags.
TEST(CudaFakeContext, HeldWorkCompletesAndCopiesRespectMaxPendingTransfers) {
  FakeCuda cuda(FakeOptions{.devices = 1, .hold_work = true});
  std::atomic<bool> done{false};
  std::thread device([&] {
    while (!done.load()) {
      cuda.driver->run_pending();
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  });
  {
    Settings settings = FakeCuda::settings(2);
    settings.set("gpu.max_pending_transfers", "1");
    Context context(settings);
    {
      const Kernel scale = make_scale();
      std::vector<Buffer<float>> buffers;
      for (int i = 0; i < 8; ++i) buffers.emplace_back(context, std::vector<float>(1024, 1.0f));
      for (auto& buffer : buffers)
        context.spawn(TaskOptions{.device = 1}, scale, read_write(buffer), value(2.0f));
      context.wait_all();
      for (auto& buffer : buffers) EXPECT_EQ(buffer.to_vector(), std::vector<float>(1024, 2.0f));
      const auto counters = context.impl()->devices[0]->counters();
      EXPECT_EQ(counters.peak_copies_in_flight, 1u);
      EXPECT_GT(counters.copies_deferred, 0u) << "eight buffers went to the device at once";
    }
    expect_no_leaks(context);
  }
  done = true;
  device.join();
}

// A kernel launched behind another on its stream starts on the device when that one is done: its
// run time (its record's start, what heft's models learn) counts from there, not from its launch —
// whether the completion thread sees the first done before the second runs, or both done at once (a
// loaded machine's completion thread can miss a whole kernel: CI under ThreadSanitizer did).
TEST(CudaFakeContext, AQueuedKernelsTimeCountsFromWhenItsStreamWasFree) {
  for (const bool seen_between : {true, false}) {
    FakeCuda cuda(FakeOptions{.devices = 1, .hold_work = true});
    Settings settings = FakeCuda::settings(2);
    settings.set("gpu.stream_count", "1");
    settings.set("perf.record_tasks", "true");
    Context context(settings);
    Kernel touch("touch");
    cuda::attach(touch, cpu_launcher([](const KernelArgs& args) { args.span<float>(0)[0] = 1.0f; }));
    Buffer<float> x(context, 16), y(context, 16);
    const auto wait_for_launches = [&](std::uint64_t events) {
      while (cuda.driver->calls("record_event") < events)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    };
    const std::uint64_t armed = cuda.driver->calls("record_event");
    const std::size_t held_before = cuda.driver->held_work();
    Task first = context.submit(TaskOptions{.name = "first", .device = 1}, touch, write(x));
    wait_for_launches(armed + 1);  // its completion event is the last thing its launch enqueues
    const std::size_t first_work = cuda.driver->held_work() - held_before;
    Task second = context.submit(TaskOptions{.name = "second", .device = 1}, touch, write(y));
    wait_for_launches(armed + 2);
    // Both are launched; the device runs the first 300 ms later, and the second right after it.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    if (seen_between) {
      EXPECT_EQ(cuda.driver->run_pending(first_work), first_work);
      first.wait();
      EXPECT_FALSE(second.done()) << "its work is still held";
    }
    cuda.driver->run_pending();
    second.wait();
    const nlohmann::json stats = dump_stats(context);
    std::map<std::string, double> run_ms;
    for (const auto& record : stats["tasks"]["records"])
      run_ms[record["name"]] = (record["end_ns"].get<double>() - record["start_ns"].get<double>()) / 1e6;
    EXPECT_GE(run_ms["first"], 300.0) << "the first ran from its launch";
    EXPECT_LT(run_ms["second"], 150.0) << "the second from the first's end, not from its own launch"
                                       << (seen_between ? "" : " (both found done in one pass)");
  }
}

// gpu.max_pending_transfers bounds each direction apart: with a bound of 1 and an upload in flight,
// a download still starts at once (one gate for both made the directions take turns).
TEST(CudaFakeContext, UploadsInFlightDoNotHoldBackADownload) {
  FakeCuda cuda(FakeOptions{.devices = 1, .hold_work = true});
  Settings settings = FakeCuda::settings(2);
  settings.set("gpu.max_pending_transfers", "1");
  Context context(settings);
  const Kernel scale = make_scale();
  const auto run_until = [&](const Task& task) {
    while (!task.done()) {
      cuda.driver->run_pending();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  };
  Buffer<float> on_device(context, std::vector<float>(1024, 1.0f)),
      on_host(context, std::vector<float>(1024, 1.0f));
  run_until(context.submit(TaskOptions{.device = 1}, scale, read_write(on_device), value(3.0f)));
  const std::size_t copies = cuda.driver->records("copy").size();
  Task upload = context.submit(TaskOptions{.device = 1}, scale, read_write(on_host), value(2.0f));
  std::vector<float> downloaded;
  std::thread reader([&] { downloaded = on_device.to_vector(); });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (cuda.driver->records("copy").size() < copies + 2 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(cuda.driver->records("copy").size(), copies + 2) << "the download waited for the upload's place";
  std::atomic<bool> stop{false};
  std::thread device([&] {  // the device runs from now on
    while (!stop.load()) {
      cuda.driver->run_pending();
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  });
  upload.wait();
  reader.join();
  EXPECT_EQ(downloaded, std::vector<float>(1024, 3.0f));
  EXPECT_EQ(on_host.to_vector(), std::vector<float>(1024, 2.0f));
  stop = true;
  device.join();
}

TEST(CudaFakeContext, EventsComeFromAPoolNotOnePerTask) {
  FakeCuda cuda;
  Context context(FakeCuda::settings(2));
  {
    const Kernel scale = make_scale();
    Buffer<float> x(context, std::vector<float>(256, 1.0f));
    constexpr int tasks = 300;
    for (int i = 0; i < tasks; ++i)
      context.spawn(TaskOptions{.device = 1}, scale, read_write(x), value(1.0f));
    context.wait_all();
    EXPECT_LT(cuda.driver->calls("create_event"), 40u) << "at most one per operation in flight";
    EXPECT_EQ(context.impl()->devices[0]->counters().events_live, 0u);
  }  // buffers and kernels go before the leak check
  expect_no_leaks(context);
}

TEST(CudaFakeContext, HighPriorityTasksGoToTheReservedStreams) {
  FakeCuda cuda(FakeOptions{.devices = 1});
  Settings settings = FakeCuda::settings(2);
  settings.set("gpu.stream_count", "4").set("scheduler.gpu_stream_priorities", "0:1");
  Context context(settings);
  {
    std::mutex mutex;
    std::vector<std::pair<int, void*>> launches;  // (task priority, stream)
    Kernel note("note");
    cuda::attach(note, [&](const KernelArgs& args, int, void* stream) {
      std::lock_guard lock(mutex);
      launches.emplace_back(args.value<int>(0), stream);
    });
    Buffer<float> a(context, 64), b(context, 64);
    for (int i = 0; i < 20; ++i) {
      const int priority = i % 2 == 0 ? Priority::high : Priority::normal;
      context.spawn(TaskOptions{.device = 1, .priority = priority}, note, read(i % 2 == 0 ? a : b),
                    value(priority));
    }
    context.wait_all();
    std::map<void*, int> stream_priority;
    for (const auto& record : cuda.driver->records("create_stream"))
      stream_priority[record.stream] = record.detail;
    ASSERT_EQ(launches.size(), 20u);
    std::set<void*> high_streams, normal_streams;
    for (const auto& [priority, stream] : launches) {
      if (priority == Priority::high) {
        EXPECT_EQ(stream_priority.at(stream), -5) << "a high-priority task on an ordinary stream";
        high_streams.insert(stream);
      } else {
        EXPECT_EQ(stream_priority.at(stream), 0) << "an ordinary task on the reserved stream";
        normal_streams.insert(stream);
      }
    }
    EXPECT_EQ(high_streams.size(), 1u);
    EXPECT_EQ(normal_streams.size(), 3u) << "ordinary tasks round robin over the other three";
  }  // buffers and kernels go before the leak check
  expect_no_leaks(context);
}

class CudaPeerAccess : public ::testing::TestWithParam<bool> {};

TEST_P(CudaPeerAccess, DeviceToDeviceCopiesGoDirectOrThroughPinnedHost) {
  const bool peer_access = GetParam();
  FakeCuda cuda;
  Settings settings = FakeCuda::settings(2);
  settings.set("gpu.peer_access", peer_access ? "true" : "false");
  Context context(settings);
  {
    const Kernel scale = make_scale(), sum = make_sum();
    Buffer<float> x(context, std::vector<float>(1024, 2.0f)), y(context, std::vector<float>(1024, 1.0f));
    context.submit(TaskOptions{.device = 1}, scale, read_write(x), value(2.0f));   // x valid only on device 1
    context.submit(TaskOptions{.device = 2}, sum, read(x), read_write(y)).wait();  // x: device 1 -> 2
    EXPECT_EQ(y.to_vector(), std::vector<float>(1024, 5.0f));
    const auto destination = context.impl()->devices[1]->counters();
    if (peer_access) {
      EXPECT_GE(destination.peer_copies, 1u);
      EXPECT_EQ(destination.staged_copies, 0u);
      EXPECT_GE(cuda.driver->records("copy_peer").size(), 1u);
      EXPECT_GE(cuda.driver->calls("enable_peer_access"), 1u);
      EXPECT_TRUE(context.impl()->devices[1]->can_access_peer(*context.impl()->devices[0]));
    } else {
      EXPECT_EQ(destination.peer_copies, 0u);
      EXPECT_GE(destination.staged_copies, 1u);
      EXPECT_TRUE(cuda.driver->records("copy_peer").empty());
      EXPECT_GE(cuda.driver->calls("stream_wait_event"), 1u)
          << "the destination waits on the device, not the host";
      EXPECT_FALSE(context.impl()->devices[1]->can_access_peer(*context.impl()->devices[0]));
    }
  }  // buffers and kernels go before the leak check
  expect_no_leaks(context);
}

TEST(CudaPeerAccessFake, DevicesThatCannotReachEachOtherStage) {
  FakeCuda cuda(FakeOptions{.peer_access = false});
  Context context(FakeCuda::settings(2));  // gpu.peer_access = true, but the driver says no
  const Kernel scale = make_scale(), sum = make_sum();
  Buffer<float> x(context, std::vector<float>(512, 1.0f)), y(context, std::vector<float>(512, 0.0f));
  context.submit(TaskOptions{.device = 1}, scale, read_write(x), value(4.0f));
  context.submit(TaskOptions{.device = 2}, sum, read(x), read_write(y)).wait();
  EXPECT_EQ(y.to_vector(), std::vector<float>(512, 4.0f));
  EXPECT_TRUE(cuda.driver->records("copy_peer").empty());
  EXPECT_GE(context.impl()->devices[1]->counters().staged_copies, 1u);
}

INSTANTIATE_TEST_SUITE_P(PeerAccess, CudaPeerAccess, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "enabled" : "disabled"; });

struct UnifiedCase {
  const char* name;
  bool unified, prefetch, hints;
};
// GoogleTest prints a parameter without PrintTo byte by byte, padding included (valgrind: uninitialised).
void PrintTo(const UnifiedCase& c, std::ostream* out) { *out << c.name; }

class CudaUnifiedMemory : public ::testing::TestWithParam<UnifiedCase> {};

TEST_P(CudaUnifiedMemory, ManagedBuffersGetPrefetchesAndHintsAsConfigured) {
  const UnifiedCase& c = GetParam();
  FakeCuda cuda(FakeOptions{.devices = 1});
  Settings settings = FakeCuda::settings(2);
  settings.set("gpu.unified_memory", c.unified ? "true" : "false")
      .set("gpu.async_prefetch", c.prefetch ? "true" : "false")
      .set("gpu.cache_hints", c.hints ? "true" : "false");
  Context context(settings);
  {
    std::mutex mutex;
    std::vector<void*> launch_streams;
    Kernel sum("sum");
    cuda::attach(sum, [&](const KernelArgs& args, int, void* stream) {
      {
        std::lock_guard lock(mutex);
        launch_streams.push_back(stream);
      }
      const auto x = args.span<const float>(0);
      const auto y = args.span<float>(1);
      for (std::size_t i = 0; i < y.size(); ++i) y[i] += x[i];
    });
    Buffer<float> x(context, std::vector<float>(1024, 1.0f)), y(context, std::vector<float>(1024, 1.0f));
    context.submit(TaskOptions{.device = 1}, sum, read(x), read_write(y)).wait();
    context.submit(TaskOptions{.device = 1}, sum, read(x), read_write(y)).wait();
    EXPECT_EQ(y.to_vector(), std::vector<float>(1024, 3.0f));
    EXPECT_EQ(cuda.driver->calls("malloc_managed") > 0, c.unified);
    EXPECT_EQ(cuda.driver->calls("malloc") > 0, !c.unified);
    const auto prefetches = cuda.driver->records("prefetch");
    const auto advice = cuda.driver->records("advise");
    if (c.unified && c.prefetch) {
      ASSERT_EQ(prefetches.size(), 4u) << "two accesses, two tasks";
      for (const auto& each : prefetches) {
        EXPECT_EQ(each.device, 0);
        EXPECT_EQ(each.bytes, 4096u);
        EXPECT_TRUE(std::find(launch_streams.begin(), launch_streams.end(), each.stream) !=
                    launch_streams.end())
            << "prefetched on the task's own stream, ahead of its launch";
      }
    } else {
      EXPECT_TRUE(prefetches.empty());
    }
    if (c.unified && c.hints) {
      ASSERT_EQ(advice.size(), 2u) << "each range is advised once, not per task";
      EXPECT_EQ(advice[0].detail, static_cast<int>(Advice::read_mostly));
      EXPECT_EQ(advice[1].detail, static_cast<int>(Advice::preferred_location));
    } else {
      EXPECT_TRUE(advice.empty());
    }
  }  // buffers and kernels go before the leak check
  expect_no_leaks(context);
}

INSTANTIATE_TEST_SUITE_P(Keys, CudaUnifiedMemory,
                         ::testing::Values(UnifiedCase{"device_memory", false, true, true},
                                           UnifiedCase{"managed", true, true, true},
                                           UnifiedCase{"managed_no_prefetch", true, false, true},
                                           UnifiedCase{"managed_no_hints", true, true, false}),
                         [](const auto& info) { return std::string(info.param.name); });

// gpu.pin_host_buffers: a buffer of 1 MiB and more is page-locked on its first transfer, once (for
// every device of the driver, slices included), and DMA'd in place ever after; a small one goes
// through staging; the registration ends with the buffer. Off: nothing is registered.
class CudaHostPinning : public ::testing::TestWithParam<bool> {};

TEST_P(CudaHostPinning, LargeHostBuffersArePageLockedOnTheirFirstTransfer) {
  const bool pin = GetParam();
  FakeCuda cuda;
  {
    Settings settings = FakeCuda::settings(2);
    settings.set("gpu.pin_host_buffers", pin ? "true" : "false");
    Context context(settings);
    {
      const Kernel scale = make_scale();
      constexpr std::size_t large = (std::size_t{4} << 20) / sizeof(float);  // 4 MiB
      Buffer<float> x(context, std::vector<float>(large, 1.0f));
      Buffer<float> small(context, std::vector<float>(1024, 1.0f));  // 4 KiB
      for (int round = 0; round < 3; ++round) {                      // to the device and back each round
        context.submit(TaskOptions{.device = 1}, scale, read_write(x), value(2.0f));
        context.submit(TaskOptions{.device = 1}, scale, read_write(small), value(2.0f));
        EXPECT_EQ(x.to_vector()[large - 1], static_cast<float>(2 << round));
        EXPECT_EQ(small.to_vector()[0], static_cast<float>(2 << round));
      }
      // Written on the host (the device's copy is stale), then a slice on the device: only the
      // slice moves, in place too.
      x.map_write()[large / 2] = 16.0f;
      context.submit(TaskOptions{.device = 1}, scale, read_write(x.slice(large / 2, 1024)), value(0.5f))
          .wait();
      const std::vector<float> result = x.to_vector();
      EXPECT_EQ(result[large / 2], 8.0f);
      EXPECT_EQ(result[large / 2 + 1], 4.0f);
      EXPECT_EQ(result[large / 2 + 1024], 8.0f);
      std::uint64_t pinned_copies = 0;
      for (const auto& device : context.impl()->devices) pinned_copies += device->counters().pinned_copies;
      const detail::HostPinningStats pinning = context.impl()->host_memory.pinning().stats();
      if (pin) {
        EXPECT_EQ(cuda.driver->calls("host_register"), 1u) << "x once; the small buffer is staged";
        EXPECT_EQ(pinning.pinned_bytes, large * sizeof(float));
        EXPECT_EQ(cuda.driver->registered_host_bytes(), large * sizeof(float));
        EXPECT_EQ(pinned_copies, 6u) << "x in once and out after each round, its slice in and out: in place";
      } else {
        EXPECT_EQ(cuda.driver->calls("host_register"), 0u);
        EXPECT_EQ(pinning.pinned_bytes, 0u);
        EXPECT_EQ(pinned_copies, 0u);
      }
    }  // the buffers go: x's registration with it
    // Once the last task has let go of x too (it may still hold x for a moment after wait() returns,
    // which a loaded machine's test run caught): expect_no_leaks() waits for that.
    expect_no_leaks(context);
    EXPECT_EQ(cuda.driver->registered_host_bytes(), 0u);
    EXPECT_EQ(context.impl()->host_memory.pinning().stats().pinned_allocations, 0u);
  }
  EXPECT_EQ(cuda.driver->calls("host_unregister"), pin ? 1u : 0u);
  EXPECT_EQ(cuda.driver->calls("host_unregister_unknown"), 0u);
}

INSTANTIATE_TEST_SUITE_P(Keys, CudaHostPinning, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "pinned" : "staged";
                         });

// A driver that refuses to page-lock (a locked-memory limit): asked once per buffer, the copies go
// through staging, the data is right.
TEST(CudaHostPinningRefused, CopiesGoThroughStagingAndTheDriverIsNotAskedAgain) {
  FakeCuda cuda(FakeOptions{.devices = 1, .refuse_host_register = true});
  Context context(FakeCuda::settings(2));
  const Kernel scale = make_scale();
  constexpr std::size_t large = (std::size_t{2} << 20) / sizeof(float);
  Buffer<float> x(context, std::vector<float>(large, 1.0f));
  for (int round = 0; round < 3; ++round) {
    context.submit(TaskOptions{.device = 1}, scale, read_write(x), value(2.0f));
    EXPECT_EQ(x.to_vector()[0], static_cast<float>(2 << round));
  }
  EXPECT_EQ(cuda.driver->calls("host_register"), 1u);
  EXPECT_EQ(context.impl()->host_memory.pinning().stats().failures, 1u);
  EXPECT_EQ(context.impl()->devices[0]->counters().pinned_copies, 0u);
}

// A page-locked buffer still alive when its context goes: unregistered while the driver is there.
TEST(CudaHostPinningAfterContext, ABufferOutlivingItsContextIsUnregisteredWithTheDevice) {
  FakeCuda cuda(FakeOptions{.devices = 1});
  std::optional<Buffer<float>> survivor;
  {
    Context context(FakeCuda::settings(2));
    const Kernel scale = make_scale();
    survivor.emplace(context, std::vector<float>((std::size_t{1} << 20) / sizeof(float), 1.0f));
    context.submit(TaskOptions{.device = 1}, scale, read_write(*survivor), value(2.0f)).wait();
    EXPECT_EQ(cuda.driver->calls("host_register"), 1u);
  }
  EXPECT_EQ(cuda.driver->registered_host_bytes(), 0u);
  EXPECT_EQ(cuda.driver->calls("host_unregister"), 1u);
  survivor.reset();
  EXPECT_EQ(cuda.driver->calls("host_unregister_unknown"), 0u);
}

TEST(CudaFakeContext, ALaunchErrorFailsTheTask) {
  FakeCuda cuda(FakeOptions{.devices = 1});
  Context context(FakeCuda::settings(2));
  const Kernel scale = make_scale();
  Buffer<float> x(context, std::vector<float>(64, 1.0f));
  cuda.driver->fail_next_launch();
  Task failed = context.submit(TaskOptions{.device = 1}, scale, read_write(x), value(2.0f));
  try {
    failed.wait();
    FAIL() << "the launch failed";
  } catch (const std::exception& error) {
    EXPECT_NE(std::string(error.what()).find("cudaErrorLaunchFailure"), std::string::npos) << error.what();
  }
  context.submit(TaskOptions{.device = 1}, scale, write(x), value(0.0f)).wait();  // recovers
}

TEST(CudaFakeContext, NoDeviceMeansNoCudaDeviceAndAReason) {
  FakeCuda cuda(FakeOptions{.devices = 0});
  Context context(FakeCuda::settings(1).set("gpu.devices", "all"));
  for (const DeviceInfo& device : context.devices()) EXPECT_NE(device.backend, "cuda-fake");
  EXPECT_NE(cuda.backend->unavailable_reason().find("no CUDA-capable device"), std::string::npos)
      << cuda.backend->unavailable_reason();
}

// Usability (BACKENDS.md review): a kernel with only a CUDA implementation, submitted where the CUDA
// backend found no device, was refused with "implements none of this context's devices (cpu, ...)"
// alone, though the context knew why there is no CUDA device (gpu.devices=cuda reports it). The
// error now gives that reason; with gpu.devices = none it says that no accelerator was opened.
TEST(CudaFakeContext, ACudaOnlyKernelWithoutACudaDeviceSaysWhyThereIsNone) {
  if (cuda_device_reason().empty()) GTEST_SKIP() << "a real CUDA device is here and runs the kernel";
  FakeCuda cuda(FakeOptions{.devices = 0});
  Kernel only_cuda("only_cuda");
  cuda::attach(only_cuda, cpu_launcher([](const KernelArgs&) {}));
  const auto refusal = [&](Context& context) {
    Buffer<float> x(context, 4);
    try {
      context.spawn(only_cuda, write(x));
      ADD_FAILURE() << "no device runs the kernel";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::invalid_argument);
      return std::string(error.what());
    }
    return std::string();
  };
  {
    Context context(FakeCuda::settings(1).set("gpu.devices", "all"));
    const std::string message = refusal(context);
    EXPECT_NE(message.find("kernel 'only_cuda' implements none of this context's devices ("),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("it has an implementation for cuda devices, and the backend '"), std::string::npos)
        << message;
    // Every CUDA backend without a device says why: the built-in one too, where nerve has it.
    EXPECT_NE(message.find("the backend 'cuda-fake' found no device: " + cuda.backend->unavailable_reason()),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("no CUDA-capable device"), std::string::npos) << message;
  }
  {
    Context context(FakeCuda::settings(1).set("gpu.devices", "none"));
    const std::string message = refusal(context);
    EXPECT_NE(message.find("implements none of this context's devices (cpu): it has an implementation for "
                           "cuda devices, and gpu.devices is none (no accelerator was opened)"),
              std::string::npos)
        << message;
  }
}

// Audit F2: gpu.devices naming a backend that is there but found no device was refused as if no
// backend had that name. It is still refused, saying the backend exists and why it has no device.
TEST(CudaFakeContext, GpuDevicesNamingABackendWithoutDevicesSaysWhy) {
  FakeCuda cuda(FakeOptions{.devices = 0});
  try {
    Context context(FakeCuda::settings(1));  // gpu.devices = cuda-fake
    FAIL() << "gpu.devices selects nothing";
  } catch (const ConfigError& error) {
    const std::string message = error.what();
    EXPECT_EQ(error.key(), "gpu.devices");
    EXPECT_NE(message.find("the backend 'cuda-fake' is in this build but found no device, and says why: "),
              std::string::npos)
        << message;
    EXPECT_NE(message.find(cuda.backend->unavailable_reason()), std::string::npos) << message;
    EXPECT_NE(message.find("no CUDA-capable device"), std::string::npos) << message;
    EXPECT_EQ(message.find("no accelerator or backend is named like"), std::string::npos) << message;
  }
  // A name no backend has keeps the message that says so.
  try {
    Context context(FakeCuda::settings(1).set("gpu.devices", "cuda-fak"));
    FAIL() << "gpu.devices selects nothing";
  } catch (const ConfigError& error) {
    EXPECT_NE(std::string(error.what()).find("no accelerator or backend is named like 'cuda-fak'"),
              std::string::npos)
        << error.what();
  }
}

// A GPU that another backend lists too (NVIDIA's OpenCL driver) at the same PCI address.
class TwinBackend final : public detail::Backend {
 public:
  std::string name() const override { return "twin"; }
  std::vector<DeviceInfo> enumerate(const Topology&) override {
    DeviceInfo info;
    info.kind = DeviceKind::opencl;
    info.name = "the same GPU through OpenCL";
    info.pci_bus_id = "0000:65:00.0";
    return {info};
  }
  std::unique_ptr<detail::Device> open(std::size_t, const detail::DeviceOpenOptions&) override {
    throw Error(ErrorCode::internal, "the OpenCL twin was opened");
  }
};

TEST(CudaFakeContext, AGpuListedByTwoBackendsIsOpenedThroughCudaOnly) {
  FakeCuda cuda(FakeOptions{.devices = 1, .pci_bus_id = "0000:65:00.0"});
  struct Registered {
    std::shared_ptr<TwinBackend> twin = std::make_shared<TwinBackend>();
    Registered() { detail::register_backend(twin); }
    ~Registered() { detail::unregister_backend(twin.get()); }
  } registered;
  {
    Context context(FakeCuda::settings(1).set("gpu.devices", "all"));
    int fake = 0;
    for (const DeviceInfo& device : context.devices()) {
      EXPECT_NE(device.backend, "twin");
      fake += device.backend == "cuda-fake" ? 1 : 0;
    }
    EXPECT_EQ(fake, 1);
  }
  // Asked for by name, the OpenCL view of it is opened (and this one refuses).
  EXPECT_THROW(Context(FakeCuda::settings(1).set("gpu.devices", "twin")), Error);
}

// Memory nodes go by their devices' names, which two devices may share (two GPUs of one model): a
// later one adds its number, so that no message names two nodes alike.
TEST(CudaFakeContext, MemoryNodesOfDevicesOfOneNameHaveNamesOfTheirOwn) {
  FakeCuda first, second;  // two backends of the same name, whose devices are named alike
  Context context(FakeCuda::settings(1));
  const auto& devices = context.impl()->devices;
  ASSERT_EQ(devices.size(), 4u);
  EXPECT_EQ(devices[0]->memory().name(), devices[0]->info().name);
  EXPECT_EQ(devices[1]->memory().name(), devices[1]->info().name);
  EXPECT_EQ(devices[2]->info().name, devices[0]->info().name);
  EXPECT_EQ(devices[2]->memory().name(), devices[0]->info().name + " (device 3)");
  EXPECT_EQ(devices[3]->memory().name(), devices[1]->info().name + " (device 4)");
}

TEST(CudaRuntime, ReportsDevicesOrWhyNot) {
  const std::string why = cuda_device_reason();
  if (!why.empty()) {
    std::cout << "[ INFO     ] no CUDA device: " << why << "\n";
    EXPECT_FALSE(why.empty());
  }
  // A context with every device never fails because CUDA has none.
  Settings settings = make_settings(1);
  settings.set("gpu.devices", "all");
  EXPECT_NO_THROW(Context{settings});
}

TEST(CudaAttach, RejectsAnEmptyLauncher) {
  Kernel kernel("k");
  EXPECT_THROW(cuda::attach(kernel, cuda::Launcher{}), Error);
  cuda::attach(kernel, [](const KernelArgs&, int, void*) {});
  EXPECT_TRUE(kernel.implements(DeviceKind::cuda));
}

// --- failure paths and staged device-to-device copies

// Two CUDA memory nodes (fake devices 0 and 1) without a context: copies between them, driven by
// the destination as the runtime drives them.
struct TwoCudaNodes {
  explicit TwoCudaNodes(FakeOptions fake, CudaMemoryOptions options = {})
      : driver(std::make_shared<FakeDriver>(std::move(fake))) {
    options.limit_bytes = std::size_t{64} << 20;
    for (unsigned d = 0; d < 2; ++d) {
      nodes[d] = std::make_unique<CudaMemoryNode>(
          d + 1, "fake GPU " + std::to_string(d),
          std::make_shared<Engine>(driver, static_cast<int>(d), 2, 0, 8, CompletionMode::flag), options);
    }
  }
  std::shared_ptr<FakeDriver> driver;
  std::unique_ptr<CudaMemoryNode> nodes[2];
};

// The outcome of one copy, and the device work still held when it was reported.
struct CopyOutcome final : detail::CopyCompletion {
  explicit CopyOutcome(FakeDriver& fake) : driver(fake) {}
  void copy_done(bool success, const std::string& why) noexcept override {
    ok = success;
    error = why;
    held_when_done = driver.held_work();
    done.store(1);
  }
  // wait(): with hold_work, the test plays the device until the copy is reported.
  void wait() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (done.load() == 0 && std::chrono::steady_clock::now() < deadline) {
      driver.run_pending(1);  // one operation at a time: the streams interleave
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    ASSERT_EQ(done.load(), 1) << "the copy was never reported";
  }
  FakeDriver& driver;
  std::atomic<int> done{0};
  bool ok = false;
  std::string error;
  std::size_t held_when_done = 0;
};

// DevicePump: a thread that runs the fake devices' held work, as a GPU would, until it goes (also
// when a failed expectation leaves the test early).
class DevicePump {
 public:
  explicit DevicePump(FakeDriver& driver)
      : thread_([this, &driver] {
          while (!stop_.load()) {
            driver.run_pending();
            std::this_thread::sleep_for(std::chrono::microseconds(200));
          }
        }) {}
  ~DevicePump() {
    stop_.store(true);
    thread_.join();
  }
  DevicePump(const DevicePump&) = delete;
  DevicePump& operator=(const DevicePump&) = delete;

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

std::vector<std::byte> pattern(std::size_t bytes) {
  std::vector<std::byte> data(bytes);
  for (std::size_t i = 0; i < bytes; ++i) data[i] = static_cast<std::byte>((i * 7 + i / 4096) & 0xff);
  return data;
}

TEST(CudaStagedPeerCopy, ACopyLargerThanTheStagingPoolGoesInPiecesThroughTwoBuffers) {
  CudaMemoryOptions options;
  options.staging_piece_bytes = 4096;
  options.staging_limit_bytes = 4 * 4096;
  TwoCudaNodes gpus(FakeOptions{.peer_access = false, .hold_work = true}, options);
  const std::size_t bytes = 10 * 4096 + 100;  // 11 pieces, the last a short one
  const std::vector<std::byte> data = pattern(bytes);
  std::byte* source = gpus.nodes[0]->try_allocate(bytes);
  std::byte* destination = gpus.nodes[1]->try_allocate(bytes);
  ASSERT_NE(source, nullptr);
  ASSERT_NE(destination, nullptr);
  std::memcpy(source, data.data(), bytes);  // fake device memory is host memory
  CopyOutcome outcome(*gpus.driver);
  MemoryNode::copy(*gpus.nodes[0], source, *gpus.nodes[1], destination, bytes, outcome);
  EXPECT_EQ(gpus.nodes[1]->staging().stats().bytes_in_use, 2 * 4096u) << "two pieces' buffers, not the copy";
  outcome.wait();
  EXPECT_TRUE(outcome.ok) << outcome.error;
  EXPECT_EQ(std::memcmp(destination, data.data(), bytes), 0) << "no piece overwrote a buffer still going in";
  EXPECT_EQ(gpus.driver->records("copy").size(), 22u)
      << "each piece out of the source and into the destination";
  EXPECT_EQ(gpus.nodes[1]->staging().stats().bytes_in_use, 0u);
  EXPECT_EQ(gpus.nodes[1]->engine().snapshot().staged_copies, 1u);
  EXPECT_TRUE(gpus.driver->records("copy_peer").empty());
  gpus.nodes[0]->deallocate(source, bytes);
  gpus.nodes[1]->deallocate(destination, bytes);
}

TEST(CudaStagedPeerCopy, AnExhaustedStagingPoolCopiesThroughHostMemoryInsteadOfFailing) {
  CudaMemoryOptions options;
  options.staging_piece_bytes = 4096;
  options.staging_limit_bytes = 4 * 4096;
  TwoCudaNodes gpus(FakeOptions{.peer_access = false}, options);
  const std::size_t bytes = 3 * 4096;
  const std::vector<std::byte> data = pattern(bytes);
  std::byte* source = gpus.nodes[0]->try_allocate(bytes);
  std::byte* destination = gpus.nodes[1]->try_allocate(bytes);
  std::memcpy(source, data.data(), bytes);
  {
    // Every staging buffer is taken (by copies in flight, say).
    memory::StagingBuffer hog = gpus.nodes[1]->staging().acquire(4 * 4096);
    CopyOutcome outcome(*gpus.driver);
    MemoryNode::copy(*gpus.nodes[0], source, *gpus.nodes[1], destination, bytes, outcome);
    outcome.wait();
    EXPECT_TRUE(outcome.ok) << outcome.error;
    EXPECT_EQ(std::memcmp(destination, data.data(), bytes), 0);
  }
  gpus.nodes[0]->deallocate(source, bytes);
  gpus.nodes[1]->deallocate(destination, bytes);
}

TEST(CudaStagedPeerCopy, AFailureAfterHalfACopyWasEnqueuedWaitsForItBeforeReportingIt) {
  TwoCudaNodes gpus(FakeOptions{.peer_access = false, .hold_work = true});
  const std::size_t bytes = 8192;
  std::byte* source = gpus.nodes[0]->try_allocate(bytes);
  std::byte* destination = gpus.nodes[1]->try_allocate(bytes);
  // The copy out of the source is enqueued; the destination's wait for it fails.
  gpus.driver->fail_next_call("stream_wait_event");
  CopyOutcome outcome(*gpus.driver);
  MemoryNode::copy(*gpus.nodes[0], source, *gpus.nodes[1], destination, bytes, outcome);
  outcome.wait();
  EXPECT_FALSE(outcome.ok);
  EXPECT_NE(outcome.error.find("stream_wait_event failed"), std::string::npos) << outcome.error;
  EXPECT_EQ(outcome.held_when_done, 0u)
      << "the staging buffer went back to the pool while a DMA into it was still queued";
  EXPECT_EQ(gpus.nodes[1]->staging().stats().bytes_in_use, 0u);
  gpus.nodes[0]->deallocate(source, bytes);
  gpus.nodes[1]->deallocate(destination, bytes);
}

// The audit's case: a replica larger than the 256 MiB staging pool (the audit's was 300 MiB) read on
// another GPU without peer access, while the devices run their work on a thread of their own.
TEST(CudaStagedPeerCopy, AReplicaLargerThanThePoolReachesAGpuWithoutPeerAccess) {
  FakeCuda cuda(FakeOptions{
      .devices = 2, .memory_bytes = std::size_t{1} << 30, .peer_access = false, .hold_work = true});
  DevicePump pump(*cuda.driver);
  {
    Context context(FakeCuda::settings(2));
    {
      Kernel fill("fill");
      cuda::attach(fill, cpu_launcher([](const KernelArgs& args) {
                     for (float& each : args.span<float>(0)) each = args.value<float>(0);
                   }));
      const Kernel sum = make_sum();
      const std::size_t n = (std::size_t{260} << 20) / sizeof(float);
      Buffer<float> x(context, n), y(context, n);
      context.submit(TaskOptions{.device = 1}, fill, write(x), value(2.0f));
      context.submit(TaskOptions{.device = 2}, fill, write(y), value(1.0f));
      context.submit(TaskOptions{.device = 2}, sum, read(x), read_write(y)).wait();  // x: GPU 1 -> GPU 2
      const std::vector<float> result = y.to_vector();
      EXPECT_EQ(std::count(result.begin(), result.end(), 3.0f), static_cast<std::ptrdiff_t>(n));
      EXPECT_GE(context.impl()->devices[1]->counters().staged_copies, 1u);
    }
    expect_no_leaks(context);
  }
}

TEST(CudaPeerAccessFake, APairWhosePeerAccessTheDriverRefusesIsStaged) {
  FakeCuda cuda(FakeOptions{.refuse_peer_enable = true});
  Context context(FakeCuda::settings(2));
  {
    const Kernel scale = make_scale(), sum = make_sum();
    Buffer<float> x(context, std::vector<float>(512, 1.0f)), y(context, std::vector<float>(512, 0.0f));
    context.submit(TaskOptions{.device = 1}, scale, read_write(x), value(4.0f));
    context.submit(TaskOptions{.device = 2}, sum, read(x), read_write(y)).wait();
    EXPECT_EQ(y.to_vector(), std::vector<float>(512, 4.0f));
    EXPECT_GE(cuda.driver->calls("enable_peer_access"), 1u);
    EXPECT_TRUE(cuda.driver->records("copy_peer").empty()) << "no direct copy the driver did not allow";
    EXPECT_GE(context.impl()->devices[1]->counters().staged_copies, 1u);
    EXPECT_EQ(context.impl()->devices[1]->counters().peer_copies, 0u);
  }
  expect_no_leaks(context);
}

// A launcher that enqueued work and then threw: the task fails only once that work is done, so its
// replicas are not released (and reused) while the work still writes them.
TEST(CudaLaunchFailure, ATaskWhoseLauncherThrewAfterEnqueueingEndsBehindItsWork) {
  FakeCuda cuda(FakeOptions{.devices = 1, .hold_work = true});
  Context context(FakeCuda::settings(2));
  {
    FakeDriver* driver = cuda.driver.get();
    static const std::vector<float> garbage(1024, -1.0f);
    std::atomic<bool> launched{false};
    Kernel bad("bad");
    cuda::attach(bad, [driver, &launched](const KernelArgs& args, int, void* stream) {
      driver->copy_async(args.data(0), garbage.data(), args.size_bytes(0), stream);  // "kernel 1"
      launched.store(true);
      throw std::runtime_error("the second launch failed");
    });
    Buffer<float> y(context, garbage.size());
    Task task = context.submit(TaskOptions{.device = 1}, bad, write(y));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!launched.load() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    EXPECT_GT(driver->held_work(), 0u);
    EXPECT_FALSE(task.done()) << "reported failed while its work was still queued on the device";
    while (!task.done() && std::chrono::steady_clock::now() < deadline) {
      driver->run_pending();
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    driver->run_pending();  // before y goes, whatever the outcome
    try {
      task.wait();
      ADD_FAILURE() << "the launcher threw";
    } catch (const std::exception& error) {
      EXPECT_NE(std::string(error.what()).find("the second launch failed"), std::string::npos)
          << error.what();
    }
  }
  expect_no_leaks(context);
}

// The launch's completion cannot be armed: the task still ends only after its stream's work.
TEST(CudaLaunchFailure, WithoutACompletionOnTheStreamTheTaskWaitsForTheStream) {
  FakeCuda cuda(FakeOptions{.devices = 1, .hold_work = true});
  Context context(FakeCuda::settings(2));
  {
    FakeDriver* driver = cuda.driver.get();
    static const std::vector<float> ones(1024, 1.0f);
    Kernel copy("copy_in");
    cuda::attach(copy, [driver](const KernelArgs& args, int, void* stream) {
      driver->copy_async(args.data(0), ones.data(), args.size_bytes(0), stream);
      driver->fail_next_call("write_flag");  // arming the completion fails
    });
    Buffer<float> y(context, ones.size());
    Task task = context.submit(TaskOptions{.device = 1}, copy, write(y));
    EXPECT_THROW(task.wait(), std::exception);
    EXPECT_EQ(driver->held_work(), 0u) << "the task failed while its work was still queued on the device";
    driver->run_pending();  // before y goes, whatever the outcome
  }
  expect_no_leaks(context);
}

// A launch error left pending by a launcher that then threw is that task's, not the next task's.
TEST(CudaLaunchFailure, APendingLaunchErrorDoesNotFailTheNextTask) {
  FakeCuda cuda(FakeOptions{.devices = 1});
  Context context(FakeCuda::settings(2));
  {
    FakeDriver* driver = cuda.driver.get();
    Kernel bad("bad");
    cuda::attach(bad, [driver](const KernelArgs&, int, void*) {
      driver->fail_next_launch();  // as a kernel launched with a bad configuration leaves one
      throw std::runtime_error("the launcher gave up");
    });
    const Kernel scale = make_scale();
    Buffer<float> x(context, std::vector<float>(64, 1.0f)), unrelated(context, std::vector<float>(64, 1.0f));
    EXPECT_THROW(context.submit(TaskOptions{.device = 1}, bad, read_write(x)).wait(), std::exception);
    EXPECT_NO_THROW(
        context.submit(TaskOptions{.device = 1}, scale, read_write(unrelated), value(2.0f)).wait());
    EXPECT_EQ(unrelated.to_vector(), std::vector<float>(64, 2.0f));
  }
  expect_no_leaks(context);
}

TEST(CudaStreamOrderedPool, AnAllocationThatFailsAfterTheDriverGaveTheMemoryFreesIt) {
  FakeDriver driver;
  {
    StreamOrderedPool pool(driver, 0,
                           std::make_unique<CudaBlockAllocator>(driver, BlockKind::device, 0, 1, "d"),
                           std::size_t{1} << 20);
    driver.fail_next_call("synchronize_stream");
    EXPECT_THROW((void)pool.allocate(4096), Error);
    EXPECT_EQ(driver.live_device_allocations(), 0u) << "the memory cudaMallocAsync gave is freed";
    EXPECT_EQ(pool.stats().bytes_in_use, 0u);
  }
  EXPECT_EQ(driver.live_streams(), 0u);
}

// An application thread that drives a GPU itself keeps its current device across nerve's calls.
TEST(CudaCurrentDevice, AnApplicationThreadKeepsItsCurrentDevice) {
  FakeCuda cuda(FakeOptions{.devices = 2});
  Settings settings = FakeCuda::settings(2);
  settings.set("gpu.devices", "Fake CUDA GPU 1");  // not device 0, which the application uses
  Context context(settings);
  {
    ASSERT_EQ(context.devices().size(), 2u);
    ASSERT_EQ(context.devices()[1].name, "Fake CUDA GPU 1");
    cuda.driver->make_current(0);  // the application's own cudaSetDevice(0)
    const Kernel scale = make_scale();
    // 2 MiB: page-locked on its first transfer, a driver call of its own.
    Buffer<float> x(context, std::vector<float>((std::size_t{2} << 20) / sizeof(float), 1.0f));
    Buffer<float> small(context, std::vector<float>(256, 1.0f));  // through pinned staging
    context.submit(TaskOptions{.device = 1}, scale, read_write(x), value(2.0f)).wait();
    context.submit(TaskOptions{.device = 1}, scale, read_write(small), value(2.0f)).wait();
    EXPECT_EQ(x.to_vector()[0], 2.0f);
    EXPECT_EQ(small.to_vector()[0], 2.0f);
    EXPECT_EQ(cuda.driver->current_device(), 0) << "nerve switched the application thread's device";
    EXPECT_GE(cuda.driver->calls("enter_device"), 1u);
  }
  expect_no_leaks(context);
}

// cuda.hpp promises each launcher its device already current. The launcher thread made it current
// once, before its first launch: after a launcher that switched to another GPU (multi-GPU code, a
// library), the next launcher on that thread ran on the wrong device; and when cudaSetDevice failed,
// the failure was dropped and the launcher ran with no device current, the task succeeding.
TEST(CudaCurrentDevice, EveryLauncherFindsItsDeviceCurrentOrItsTaskFails) {
  FakeCuda cuda(FakeOptions{.devices = 2});
  Context context(FakeCuda::settings(2));
  {
    FakeDriver* driver = cuda.driver.get();
    std::atomic<int> seen{-2};
    Kernel elsewhere("elsewhere");  // works on the other GPU too, leaving it current
    cuda::attach(elsewhere,
                 [driver](const KernelArgs&, int device, void*) { driver->make_current(1 - device); });
    Kernel probe("probe");
    cuda::attach(probe, [driver, &seen](const KernelArgs&, int, void*) { seen = driver->current_device(); });
    Buffer<float> x(context, 64), y(context, 64);
    context.submit(TaskOptions{.device = 1}, elsewhere, write(x)).wait();
    context.submit(TaskOptions{.device = 1}, probe, write(y)).wait();
    EXPECT_EQ(seen.load(), 0) << "GPU 0's launcher found GPU " << seen.load() << " current";

    seen = -2;
    driver->fail_next_call("make_current");
    try {
      context.submit(TaskOptions{.device = 1}, probe, write(y)).wait();
      ADD_FAILURE() << "the launcher ran with device " << seen.load() << " current, and the task succeeded";
    } catch (const Error& error) {
      EXPECT_THAT(error.what(), ::testing::HasSubstr("make_current"));
      EXPECT_EQ(seen.load(), -2) << "the launcher ran without its device";
    }
    context.submit(TaskOptions{.device = 1}, probe, write(y)).wait();
    EXPECT_EQ(seen.load(), 0) << "the next task runs";
  }
  expect_no_leaks(context);
}

// The CUDA runtime makes device 0's context current (creating it) on a thread that has none when a
// call needs a context; the fake does the same. nerve works in its devices' contexts: a program
// thread without a device is left without one, and device 0 is not touched when only GPU 1 is used.
// (The engine's completion flags were allocated in the calling thread's context, copies were
// enqueued in it: device 0's, left current on the program's thread.)
TEST(CudaCurrentDevice, AThreadWithoutADeviceIsLeftWithoutOneAndGpu0Untouched) {
  FakeCuda cuda(FakeOptions{.devices = 2});
  std::thread program([&] {
    Settings settings = FakeCuda::settings(2);
    settings.set("gpu.devices", "Fake CUDA GPU 1");
    auto context_owner = std::make_unique<Context>(settings);
    Context& context = *context_owner;
    {
      const Kernel scale = make_scale();
      Buffer<float> x(context, std::vector<float>(4096, 1.0f));
      Buffer<float> large(context, std::vector<float>((std::size_t{2} << 20) / sizeof(float), 1.0f));
      context.submit(TaskOptions{.device = 1}, scale, read_write(x), value(2.0f)).wait();
      context.submit(TaskOptions{.device = 1}, scale, read_write(large), value(2.0f)).wait();
      EXPECT_EQ(x.to_vector()[0], 2.0f);
      EXPECT_EQ(large.map_read()[0], 2.0f);
    }
    EXPECT_EQ(cuda.driver->current_device(), -1) << "nerve left a device current on the program's thread";
    context_owner.reset();  // frees the device's events, pinned blocks and flags on this thread
    EXPECT_EQ(cuda.driver->current_device(), -1) << "the context's destruction left a device current";
  });
  program.join();
  for (const auto& block : cuda.driver->records("host_alloc"))
    EXPECT_EQ(block.detail, 1) << "pinned memory of GPU 1 made in device " << block.detail << "'s context";
}

}  // namespace
}  // namespace nerve::testing
