// The distributed runtime in one process (communication_backend: none) and the distributed.* keys.
#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include <gtest/gtest.h>

#include "nerve/distributed.hpp"
#include "nerve/nerve.hpp"

namespace nerve::testing {
namespace {

namespace dist = nerve::distributed;

Settings with(std::initializer_list<std::pair<const char*, const char*>> values) {
  Settings settings;
  settings.use_environment(false);
  settings.set("parallel.thread_pool_size", "2");
  for (const auto& [key, value] : values) settings.set(key, value);
  return settings;
}

// error_of(): the message of the Error `use` throws, which must have code `expected`.
template <class Use>
std::string error_of(ErrorCode expected, Use&& use) {
  try {
    use();
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), expected) << error.what();
    return error.what();
  }
  return "nothing thrown";
}

std::string config_error(const Settings& settings) {
  try {
    Config::load(settings);
  } catch (const ConfigError& error) {
    return error.what();
  }
  return "";
}

TEST(DistributedConfig, Defaults) {
  const Config config = Config::load(with({}));
  EXPECT_EQ(config.distributed.communication_backend, CommunicationBackend::none);
  EXPECT_TRUE(config.distributed.nodes.empty());
  EXPECT_EQ(config.distributed.batch_size, 1u);
  EXPECT_EQ(config.distributed.sync_interval, std::chrono::milliseconds(1));
  EXPECT_EQ(config.distributed.compression, Compression::none);
}

TEST(DistributedConfig, BackendChoicesSayWhatIsNotBuilt) {
#if NERVE_TEST_WITH_MPI
  EXPECT_EQ(
      Config::load(with({{"distributed.communication_backend", "mpi"}})).distributed.communication_backend,
      CommunicationBackend::mpi);
#else
  EXPECT_NE(
      config_error(with({{"distributed.communication_backend", "mpi"}})).find("not available in this build"),
      std::string::npos);
#endif
  const std::string grpc = config_error(with({{"distributed.communication_backend", "grpc"}}));
  EXPECT_NE(grpc.find("not available in this build"), std::string::npos) << grpc;
  EXPECT_NE(config_error(with({{"distributed.communication_backend", "tcp"}}))
                .find("distributed.communication_backend"),
            std::string::npos);
}

TEST(DistributedConfig, NodesParseIntoHostsAndSlots) {
  const Config config = Config::load(with({{"distributed.nodes", "node1:4, node2 10.0.0.3:2"}}));
  ASSERT_EQ(config.distributed.nodes.size(), 3u);
  EXPECT_EQ(config.distributed.nodes[0], (DistributedNode{"node1", 4}));
  EXPECT_EQ(config.distributed.nodes[1], (DistributedNode{"node2", 1}));
  EXPECT_EQ(config.distributed.nodes[2], (DistributedNode{"10.0.0.3", 2}));
  for (const char* bad : {"node1:0", "node1:x", ":3", "no/de"}) {
    EXPECT_NE(config_error(with({{"distributed.nodes", bad}})).find("distributed.nodes"), std::string::npos)
        << bad;
  }
}

// A host starting with '-' would reach mpirun's launcher as an option ("-np:2" was taken as host
// "-np"); an IPv6 address, which Open MPI's mpirun does not launch on, was refused as "not host or
// host:slots (a host name or address ...)". Each is refused with its own reason.
TEST(DistributedConfig, NodesRefuseOptionLikeHostsAndSayIpv6IsNotSupported) {
  for (const char* option : {"-np:2", "node1, -oProxyCommand=x"}) {
    const std::string error = config_error(with({{"distributed.nodes", option}}));
    EXPECT_NE(error.find("distributed.nodes: '-"), std::string::npos) << error;
    EXPECT_NE(error.find("starts with '-': a host name cannot (it would read as an option)"),
              std::string::npos)
        << error;
  }
  for (const char* ipv6 :
       {"::1", "[::1]:2", "fe80::1", "node1:2 [fe80::1]", "2001:db8:0:0:0:0:0:1", "::ffff:10.0.0.1"}) {
    const std::string error = config_error(with({{"distributed.nodes", ipv6}}));
    EXPECT_NE(error.find("is an IPv6 address: not supported"), std::string::npos) << ipv6 << ": " << error;
  }
  // Two colons alone make no IPv6 address: a malformed host:slots was called one.
  for (const char* malformed : {"node1:2:3", "a:1:2"}) {
    const std::string error = config_error(with({{"distributed.nodes", malformed}}));
    EXPECT_NE(error.find("is not host or host:slots"), std::string::npos) << malformed << ": " << error;
  }
  // mpirun launches on no other name: '_' too is refused here rather than there.
  EXPECT_NE(config_error(with({{"distributed.nodes", "node_1:2"}})).find("letters, digits, dots and hyphens"),
            std::string::npos);
  EXPECT_EQ(config_error(with({{"distributed.nodes", "node-1:2, 10.0.0.3"}})), "");
}

TEST(DistributedConfig, CompressionTakesAThreshold) {
  Config config = Config::load(with({{"distributed.compression", "zstd"}}));
  EXPECT_EQ(config.distributed.compression, Compression::zstd);
  EXPECT_EQ(config.distributed.compression_threshold, 4096u);
  config = Config::load(with({{"distributed.compression", "zstd:100"}}));
  EXPECT_EQ(config.distributed.compression_threshold, 100u);
  EXPECT_NE(config_error(with({{"distributed.compression", "lz4"}})).find("none, zstd or zstd:"),
            std::string::npos);
  EXPECT_NE(config_error(with({{"distributed.compression", "zstd:-1"}})).find("distributed.compression"),
            std::string::npos);
}

TEST(DistributedConfig, BatchSizeAndSyncIntervalAreChecked) {
  const Config config =
      Config::load(with({{"distributed.batch_size", "16"}, {"distributed.sync_interval", "250us"}}));
  EXPECT_EQ(config.distributed.batch_size, 16u);
  EXPECT_EQ(config.distributed.sync_interval, std::chrono::microseconds(250));
  EXPECT_FALSE(config_error(with({{"distributed.batch_size", "0"}})).empty());
  EXPECT_FALSE(config_error(with({{"distributed.sync_interval", "1h"}})).empty());
}

TEST(DistributedLocal, OneRankRunsEveryTaskWithoutTransfers) {
  Context context(with({}));
  dist::Runtime world(context);
  EXPECT_EQ(world.rank(), 0);
  EXPECT_EQ(world.size(), 1);
  auto a = world.buffer<int>(100, 0);
  auto b = world.buffer<int>(100, 0);
  world.submit([](std::span<int> out) { std::fill(out.begin(), out.end(), 2); }, dist::write(a));
  world.submit(
      [](std::span<int> out, std::span<const int> in) {
        for (std::size_t i = 0; i < out.size(); ++i) out[i] = in[i] * 3;
      },
      dist::write(b), dist::read(a));
  int sum = 0;
  world.submit(
      dist::TaskOptions{.rank = 0},
      [&sum](std::span<const int> in) {
        for (int v : in) sum += v;
      },
      dist::read(b));
  world.wait_all();
  EXPECT_EQ(sum, 600);
  const auto stats = world.stats();
  EXPECT_EQ(stats.tasks_run, 3u);
  EXPECT_EQ(stats.payloads_sent, 0u);
  EXPECT_EQ(b.local().to_vector(), std::vector<int>(100, 6));
}

// A distributed buffer's bookkeeping goes with its last handle: each rank kept every buffer ever made
// (~130-240 bytes each), so a program making temporaries every step grew without bound. Numbers keep
// counting in creation order; a handle kept past its Runtime is still safe to drop.
TEST(DistributedLocal, ABuffersBookkeepingGoesWithItsLastHandle) {
  Context context(with({}));
  std::optional<dist::DistributedBuffer<int>> outliving;
  {
    dist::Runtime world(context);
    auto kept = world.buffer<int>(4, 0, "kept");
    world.submit([](std::span<int> k) { k[0] = 0; }, dist::write(kept));
    for (int step = 0; step < 1000; ++step) {
      auto temporary = world.buffer<double>(16, 0, "temporary");
      world.submit([](std::span<double> t) { t[0] = 1; }, dist::write(temporary));
      world.submit([](std::span<int> k, std::span<const double> t) { k[0] += static_cast<int>(t[0]); },
                   dist::write(kept), dist::read(temporary));
      EXPECT_GE(world.buffers_live(), 2u);
    }
    world.wait_all();
    EXPECT_EQ(world.buffers_live(), 1u);
    EXPECT_EQ(kept.local().to_vector()[0], 1000);
    auto next = world.buffer<int>(1, 0);
    EXPECT_EQ(next.number(), 1001u);
    EXPECT_EQ(world.buffers_live(), 2u);
    next = {};
    kept = {};
    EXPECT_EQ(world.buffers_live(), 0u);
    outliving = world.buffer<int>(1, 0);
  }
  outliving.reset();
}

// expect_run_failed(): wait_all() reports the run failed (Error(task_failed)) with `fragment` in its message.
void expect_run_failed(dist::Runtime& world, const std::string& fragment) {
  try {
    world.wait_all();
    ADD_FAILURE() << "wait_all() did not report the failure: " << fragment;
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::task_failed);
    EXPECT_NE(std::string(error.what()).find(fragment), std::string::npos) << error.what();
  }
}

// A submission that fails on one rank after every rank planned the task (here the body's copy
// throws; under MPI, a replica this rank cannot allocate) left the bookkeeping saying the task ran:
// later readers silently read the data it never wrote, and the other ranks waited for what never
// came. It now fails the run, as a task failure does: the error is rethrown from submit(), and
// wait_all() and later submissions report the run failed.
struct ThrowsWhenCopied {
  ThrowsWhenCopied() = default;
  ThrowsWhenCopied(const ThrowsWhenCopied&) { throw std::runtime_error("the body cannot be copied"); }
  void operator()(std::span<int> out) const { out[0] = 2; }
};

TEST(DistributedLocal, ASubmissionThatFailsAfterThePlanFailsTheRun) {
  Context context(with({}));
  dist::Runtime world(context);
  auto a = world.buffer<int>(1, 0, "a");
  world.submit([](std::span<int> out) { out[0] = 1; }, dist::write(a));
  const ThrowsWhenCopied body;
  EXPECT_THROW(world.submit(dist::TaskOptions{.name = "copy-fails"}, body, dist::write(a)),
               std::runtime_error);
  expect_run_failed(world, "submitting task 'copy-fails' failed on rank 0");
  EXPECT_THROW(world.submit([](std::span<int>) {}, dist::write(a)), Error);
}

// The owner alone failing to allocate a new buffer's data (the other ranks counted it, and their tasks
// would wait for its transfers) fails the run, as a failed submission does.
TEST(DistributedLocal, ABufferItsOwnerCannotAllocateFailsTheRun) {
  Context context(with({{"memory.host_node_limit", "1048576"}}));
  dist::Runtime world(context);
  (void)error_of(ErrorCode::out_of_memory,
                 [&] { (void)world.buffer<char>(std::size_t{64} << 20, 0, "big"); });
  expect_run_failed(world, "creating buffer 0 'big' failed on its owner, rank 0");
}

TEST(DistributedLocal, OwnersOutsideTheWorldAreErrors) {
  Context context(with({}));
  dist::Runtime world(context);
  EXPECT_THROW(world.buffer<int>(10, 1), Error);
  auto a = world.buffer<int>(10, 0);
  EXPECT_THROW(world.submit(
                   dist::TaskOptions{.rank = 3}, [](std::span<int>) {}, dist::write(a)),
               Error);
  EXPECT_THROW(world.submit(
                   dist::TaskOptions{.rank = -2}, [](std::span<const int>) {}, dist::read(a)),
               Error)
      << "-1 means 'where its data is'; other negative ranks are errors";
}

// An empty handle is used as an empty nerve::Buffer is: size() 0, anything else Error(buffer_misuse)
// naming what was used (black-box audit: size(), owner(), number() and a submit() that read it
// dereferenced a null pointer). The refused submission changes nothing.
TEST(DistributedLocal, AnEmptyHandleIsBufferMisuseNotACrash) {
  Context context(with({}));
  dist::Runtime world(context);
  const auto misuse = [](auto&& use) { return error_of(ErrorCode::buffer_misuse, use); };
  dist::DistributedBuffer<int> empty;
  EXPECT_FALSE(empty);
  EXPECT_EQ(empty.size(), 0u);
  EXPECT_EQ(empty.size_bytes(), 0u);
  EXPECT_EQ(misuse([&] { (void)empty.owner(); }),
            "owner() of an empty distributed buffer handle (default-constructed or moved from)");
  EXPECT_EQ(misuse([&] { (void)empty.number(); }),
            "number() of an empty distributed buffer handle (default-constructed or moved from)");
  EXPECT_EQ(misuse([&] { (void)empty.local(); }),
            "local() of an empty distributed buffer handle (default-constructed or moved from)");
  auto a = world.buffer<int>(4, 0);
  const std::string refused = misuse([&] {
    world.submit(
        dist::TaskOptions{.name = "reader"}, [](std::span<int>, std::span<const int>) {}, dist::write(a),
        dist::read(empty));
  });
  EXPECT_EQ(refused,
            "distributed task 'reader' accesses an empty distributed buffer handle (access 1: "
            "default-constructed or moved from)");
  const dist::DistributedBuffer<int> moved_to = std::move(a);
  // NOLINTNEXTLINE(bugprone-use-after-move): what this checks
  EXPECT_NE(misuse([&] { world.submit([](std::span<int>) {}, dist::write(a)); }).find("access 0"),
            std::string::npos);
  world.wait_all();
  EXPECT_EQ(world.stats().tasks_run + world.stats().tasks_skipped, 0u);
  EXPECT_EQ(moved_to.number(), 0u);
}

// A buffer of another Runtime (two `none` worlds may be alive at once) is refused at submit, by every
// rank alike: only the rank running the task found out (black-box review of DISTRIBUTED.md).
TEST(DistributedLocal, ABufferOfAnotherRuntimeIsBufferMisuse) {
  Context context(with({})), other_context(with({}));
  dist::Runtime world(context), other(other_context);
  auto mine = world.buffer<int>(4, 0);
  auto theirs = other.buffer<int>(4, 0, "theirs");
  const std::string refused = error_of(ErrorCode::buffer_misuse, [&] {
    world.submit(
        dist::TaskOptions{.name = "mixer"}, [](std::span<int>, std::span<const int>) {}, dist::write(mine),
        dist::read(theirs));
  });
  EXPECT_EQ(refused,
            "distributed task 'mixer' accesses buffer 0 'theirs' of another distributed Runtime (access 1)");
  world.wait_all();
  EXPECT_EQ(world.stats().tasks_run, 0u);
}

// A buffer's bookkeeping outlives its Runtime while a handle holds it; a later Runtime, often at the
// same address, must still refuse it (it was told apart by the Runtime's address, and accepted).
TEST(DistributedLocal, ABufferOfARuntimeThatIsGoneIsBufferMisuse) {
  Context context(with({}));
  std::optional<dist::DistributedBuffer<int>> old_handle;
  for (int round = 0; round < 3; ++round) {
    auto world = std::make_unique<dist::Runtime>(context);
    if (old_handle) {
      const std::string refused = error_of(ErrorCode::buffer_misuse, [&] {
        world->submit(
            dist::TaskOptions{.name = "late"}, [](std::span<int>) {}, dist::write(*old_handle));
      });
      EXPECT_NE(refused.find("of another distributed Runtime"), std::string::npos) << refused;
    }
    old_handle = world->buffer<int>(1, 0, "old");
    world->submit([](std::span<int> value) { value[0] = 1; }, dist::write(*old_handle));
    world->wait_all();
  }
}

// count * sizeof(T) wrapped (to 4 bytes for SIZE_MAX / 4 + 2 ints): the buffer was registered with
// the wrapped size on every rank, then only its owner failed (allocating it), so the owner's next
// buffer was number 1 and the other ranks held a handle of 4 bytes. It is refused before it counts.
TEST(DistributedLocal, ABufferLargerThanTheAddressSpaceIsRefusedBeforeItIsCreated) {
  Context context(with({}));
  dist::Runtime world(context);
  const std::size_t count = SIZE_MAX / sizeof(int) + 2;
  EXPECT_EQ(error_of(ErrorCode::invalid_argument, [&] { world.buffer<int>(count, 0, "huge"); }),
            "distributed buffer 0 of " + std::to_string(count) +
                " elements of 4 bytes is larger than the address space");
  EXPECT_EQ(world.buffer<int>(1, 0).number(), 0u) << "the refused buffer was registered";
}

// A dump that cannot be written says why, as Context::dump_perf_stats does: it said only "cannot
// write '/tmp'", leaving the user to find that /tmp is a directory.
TEST(DistributedLocal, ADumpThatCannotBeWrittenSaysWhy) {
  Context context(with({}));
  dist::Runtime world(context);
  const auto message = [](auto&& dump) { return error_of(ErrorCode::invalid_argument, dump); };
  const std::string directory = std::filesystem::temp_directory_path().string();
  EXPECT_EQ(message([&] { world.dump_trace(directory); }),
            "cannot write the trace to '" + directory + "': Is a directory");
  EXPECT_EQ(message([&] { world.dump_perf_stats("/nonexistent/dir/perf.{rank}.json"); }),
            "cannot write perf stats to '/nonexistent/dir/perf.0.json': No such file or directory");
}

// TaskOptions::name need only outlive its task, but the trace kept the pointer and dump_trace() read
// it after the tasks ended: a name built for the task ("step-0") and gone by then was read after
// free (AddressSanitizer), or came out as whatever reused its memory. The names are overwritten
// before they are freed, so that a stale read shows without a sanitizer too.
TEST(DistributedLocal, TraceNamesNeedOnlyOutliveTheirTasks) {
  Context context(with({}));
  dist::Runtime world(context);
  auto a = world.buffer<int>(16, 0, "a");
  for (int i = 0; i < 3; ++i) {
    // Longer than any small-string buffer: the characters are on the heap.
    auto name = std::make_unique<std::string>("step-" + std::to_string(i % 2) + std::string(40, '.'));
    world.submit(
        dist::TaskOptions{.name = name->c_str()}, [](std::span<int> v) { ++v[0]; }, dist::read_write(a));
    world.wait_all();  // the task ended: its name may go
    std::fill(name->begin(), name->end(), 'X');
  }
  world.submit([](std::span<int> v) { ++v[0]; }, dist::read_write(a));  // unnamed
  world.wait_all();
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("nerve-trace-names-" + std::to_string(::getpid()) + ".json");
  world.dump_trace(path);
  std::ifstream file(path);
  const std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  std::filesystem::remove(path);
  const auto count = [&text](const std::string& what) {
    std::size_t n = 0;
    for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  const std::string dots(40, '.');
  EXPECT_EQ(count("\"name\":\"step-0" + dots + "\""), 2u) << text;
  EXPECT_EQ(count("\"name\":\"step-1" + dots + "\""), 1u) << text;
  EXPECT_EQ(count("\"name\":\"task\""), 1u) << text;
  EXPECT_EQ(count("XXXX"), 0u) << text;
}

// perf.max_task_records bounds the rank's distributed trace as it bounds the context's records: the
// trace kept 32 bytes per task for the Runtime's life, 320 MB per 10 million tasks of a long job.
// Past the bound tasks are counted, in the trace's rank metadata and in the perf stats.
TEST(DistributedLocal, TheTraceKeepsAtMostMaxTaskRecordsTasks) {
  Context context(with({{"perf.max_task_records", "3"}}));
  dist::Runtime world(context);
  auto a = world.buffer<int>(4, 0, "a");
  for (int i = 0; i < 10; ++i) world.submit([](std::span<int> v) { ++v[0]; }, dist::read_write(a));
  world.wait_all();
  const std::filesystem::path stem =
      std::filesystem::temp_directory_path() / ("nerve-trace-bound-" + std::to_string(::getpid()));
  const auto read_file = [](const std::filesystem::path& path) {
    std::ifstream file(path);
    std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
    std::filesystem::remove(path);
    return text;
  };
  world.dump_trace(stem.string() + ".json");
  const std::string trace = read_file(stem.string() + ".json");
  std::size_t events = 0;
  for (std::size_t at = trace.find("\"ph\":\"X\""); at != std::string::npos;
       at = trace.find("\"ph\":\"X\"", at + 1))
    ++events;
  EXPECT_EQ(events, 3u) << trace;
  EXPECT_NE(trace.find(R"("args":{"name":"rank 0"})"), std::string::npos) << trace;
  EXPECT_NE(
      trace.find(
          R"x("args":{"labels":"7 tasks not in the trace (perf.max_task_records: 3)","tasks_dropped":7})x"),
      std::string::npos)
      << trace;
  world.dump_perf_stats(stem.string() + ".{rank}.stats.json");
  const std::string stats = read_file(stem.string() + ".0.stats.json");
  EXPECT_NE(stats.find(R"("trace_tasks_dropped": 7)"), std::string::npos) << stats;
  EXPECT_NE(stats.find(R"("tasks_run": 10)"), std::string::npos) << stats;
}

// One process is a world of one rank, failures included: the first wait_all() rethrows the task's own
// exception; from then on submit(), wait_all() and barrier() throw Error(task_failed) naming the task,
// as every rank does under MPI; and destroying the Runtime ends nothing (no MPI to abort).
TEST(DistributedLocal, LocalFailuresReachWaitAllAndStick) {
  Context context(with({}));
  {
    dist::Runtime world(context);
    auto a = world.buffer<int>(10, 0);
    auto b = world.buffer<int>(10, 0);
    world.submit(
        dist::TaskOptions{.name = "boom"}, [](std::span<int>) { throw std::runtime_error("injected"); },
        dist::write(a));
    EXPECT_THROW(world.wait_all(), std::runtime_error);
    const auto expect_task_failed = [](auto call) {
      try {
        call();
        ADD_FAILURE() << "the run failed: this must throw";
      } catch (const Error& error) {
        EXPECT_EQ(error.code(), ErrorCode::task_failed);
        EXPECT_NE(std::string(error.what()).find("task 'boom' failed on rank 0: injected"), std::string::npos)
            << error.what();
      }
    };
    expect_task_failed([&] { world.submit([](std::span<int> x) { x[0] = 1; }, dist::write(b)); });
    expect_task_failed([&] { world.wait_all(); });
    expect_task_failed([&] { world.barrier(); });
    ::testing::internal::CaptureStderr();
  }
  EXPECT_NE(::testing::internal::GetCapturedStderr().find(
                "nerve: rank 0: distributed run failed: task 'boom' failed on rank 0: injected"),
            std::string::npos)
      << "destroying the Runtime says the failure, as under MPI";
  EXPECT_NO_THROW(context.wait_all());
}

// A failure nobody waited for is not lost when the one-rank Runtime goes.
TEST(DistributedLocal, AFailureNobodyWaitedForIsPrintedWhenTheRuntimeGoes) {
  Context context(with({}));
  ::testing::internal::CaptureStderr();
  {
    dist::Runtime world(context);
    auto a = world.buffer<int>(10, 0);
    world.submit(
        dist::TaskOptions{.name = "unseen"}, [](std::span<int>) { throw std::runtime_error("injected"); },
        dist::write(a));
  }
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("distributed run failed: task 'unseen' failed on rank 0: injected"), std::string::npos)
      << log;
}

TEST(DistributedLocal, BackendNoneUnderAnMpirunOfSeveralRanksIsAnError) {
  ::setenv("OMPI_COMM_WORLD_SIZE", "4", 1);
  Context context(with({}));
  try {
    dist::Runtime world(context);
    ADD_FAILURE() << "expected an error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("communication_backend"), std::string::npos);
  }
  ::unsetenv("OMPI_COMM_WORLD_SIZE");
}

TEST(DistributedGrid, BlockCyclicOwners) {
  EXPECT_EQ(dist::block_cyclic(5, 4), 1);
  constexpr dist::Grid grid = dist::Grid::for_ranks(6);
  static_assert(grid.rows == 2 && grid.cols == 3);
  EXPECT_EQ(grid.owner(0, 0), 0);
  EXPECT_EQ(grid.owner(1, 2), 5);
  EXPECT_EQ(grid.owner(2, 4), 1);
  EXPECT_EQ(dist::Grid::for_ranks(4).rows, 2);
  EXPECT_EQ(dist::Grid::for_ranks(7).rows, 1);
  // Fewer than one rank is one rank, not a division by zero (black-box audit: SIGFPE).
  EXPECT_EQ(dist::block_cyclic(5, 0), 0);
  constexpr dist::Grid none = dist::Grid::for_ranks(0);
  static_assert(none.rows == 1 && none.cols == 1);
  EXPECT_EQ(dist::Grid::for_ranks(-3).owner(4, 7), 0);
  EXPECT_EQ((dist::Grid{2, 0}).owner(4, 7), 0);
  // Rank counts near INT_MAX: r * r overflowed int (a loop for ever, or SIGFPE; black-box review).
  volatile int square = 46340 * 46340, largest = INT_MAX;
  EXPECT_EQ(dist::Grid::for_ranks(square).rows, 46340);
  EXPECT_EQ(dist::Grid::for_ranks(square).cols, 46340);
  EXPECT_EQ(dist::Grid::for_ranks(largest).rows, 1);  // 2^31 - 1 is prime
  EXPECT_EQ(dist::Grid::for_ranks(largest).cols, INT_MAX);
}

// A distributed task submitted from inside a task's body would be submitted by one rank only (the
// body runs on one): it is refused, on every world size (it silently gave wrong results on two).
TEST(DistributedLocal, SubmittingFromInsideATaskIsAnError) {
  Context context(with({}));
  dist::Runtime world(context);
  auto a = world.buffer<int>(1, 0);
  auto b = world.buffer<int>(1, 0);
  std::string refused;
  world.submit(
      [&](std::span<int> out) {
        out[0] = 1;
        try {
          world.submit([](std::span<int> inner) { inner[0] = 5; }, dist::write(b));
        } catch (const Error& error) {
          if (error.code() == ErrorCode::invalid_argument) refused = error.what();
        }
      },
      dist::write(a));
  world.wait_all();
  EXPECT_NE(refused.find("submitted from inside a task"), std::string::npos) << refused;
  EXPECT_EQ(world.stats().tasks_run, 1u) << "the inner task ran";
}

TEST(DeferredTasks, CompleteFromAnotherThread) {
  Context context(with({}));
  Buffer<int> data(context, 4);
  std::atomic<detail::TaskRecord*> deferred{nullptr};
  context.spawn(
      [&](std::span<int> out) {
        out[0] = 7;
        deferred = detail::defer_current_task();
      },
      write(data));
  int seen = 0;
  context.spawn([&](std::span<const int> in) { seen = in[0]; }, read(data));
  while (deferred.load() == nullptr) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(seen, 0) << "the reader ran before the deferred writer completed";
  std::thread([&] { detail::complete_deferred(deferred.load(), nullptr); }).join();
  context.wait_all();
  EXPECT_EQ(seen, 7);
  EXPECT_THROW(detail::defer_current_task(), Error);
}

TEST(DeferredTasks, AnErrorCancelsTheReaders) {
  Context context(with({}));
  Buffer<int> data(context, 4);
  std::atomic<detail::TaskRecord*> deferred{nullptr};
  Task writer = context.submit([&](std::span<int>) { deferred = detail::defer_current_task(); }, write(data));
  Task reader = context.submit([](std::span<const int>) {}, read(data));
  while (deferred.load() == nullptr) std::this_thread::yield();
  detail::complete_deferred(deferred.load(), std::make_exception_ptr(Error(ErrorCode::task_failed, "lost")));
  EXPECT_THROW(writer.wait(), Error);
  EXPECT_THROW(reader.wait(), TaskCancelled);
  EXPECT_NO_THROW(context.wait_all()) << "writer.wait() reported the failure (once)";
}

}  // namespace
}  // namespace nerve::testing
