// C API: task pools — the seed's bulk launch, ordering against outside work, independence of
// members, failures, descriptors, and pools left to shutdown.
#include <cstring>

#include <gmock/gmock.h>

#include "capi_test.hpp"

namespace nerve::testing {
namespace {

using CapiPoolTest = CapiTest;

struct VecAddDesc {
  nerve_buffer_t* a;
  nerve_buffer_t* b;
  nerve_buffer_t* c;
  std::size_t offset;
  std::size_t count;
};

void vec_add(void* desc, nerve_device_t device, nerve_stream_t) {
  const auto& d = *static_cast<VecAddDesc*>(desc);
  const auto* a = static_cast<const float*>(nerve_buffer_get_device_ptr(d.a, device));
  const auto* b = static_cast<const float*>(nerve_buffer_get_device_ptr(d.b, device));
  auto* c = static_cast<float*>(nerve_buffer_get_device_ptr(d.c, device));
  if (a == nullptr || b == nullptr || c == nullptr) return nerve_task_fail(nerve_last_error());
  for (std::size_t i = d.offset; i < d.offset + d.count; ++i) c[i] = a[i] + b[i];
}

// The seed's pattern: every task lists the three whole buffers, yet the pool's tasks are independent.
TEST_P(CapiPoolTest, SeedStyleVectorAdd) {
  constexpr std::size_t n = 100'000;
  constexpr std::size_t chunk = 4096;
  nerve_buffer_t* a = alloc(n * sizeof(float), MEM_FLAG_READ_WRITE);
  nerve_buffer_t* b = alloc(n * sizeof(float), MEM_FLAG_READ_WRITE);
  nerve_buffer_t* c = alloc(n * sizeof(float), MEM_FLAG_WRITE);
  {
    MappedC<float> ha(a, NERVE_MAP_WRITE);
    MappedC<float> hb(b, NERVE_MAP_WRITE);
    for (std::size_t i = 0; i < n; ++i) {
      ha[i] = static_cast<float>(i);
      hb[i] = 0.5f;
    }
  }
  const std::size_t tasks = (n + chunk - 1) / chunk;
  nerve_task_pool_t* pool = nerve_task_pool_create(ctx.get(), 2);  // capacity is only a hint
  ASSERT_NE(pool, nullptr) << nerve_last_error();
  for (std::size_t i = 0; i < tasks; ++i) {
    auto* desc = static_cast<VecAddDesc*>(nerve_task_pool_alloc_desc(pool));
    ASSERT_NE(desc, nullptr) << nerve_last_error();
    *desc = {a, b, c, i * chunk, std::min(chunk, n - i * chunk)};
    nerve_task_t* task = nerve_task_create(vec_add, desc);
    nerve_buffer_t* deps[] = {a, b, c};
    ASSERT_EQ(nerve_task_set_memory_deps(task, 3, deps), NERVE_OK);
    ASSERT_EQ(nerve_task_set_compute_intensive(task, true), NERVE_OK);
    ASSERT_EQ(nerve_task_pool_submit(pool, task), NERVE_OK) << nerve_last_error();
  }
  ASSERT_EQ(nerve_task_pool_launch(pool), NERVE_OK);
  ASSERT_EQ(nerve_task_pool_launch(pool), NERVE_OK) << "a second launch does nothing";
  ASSERT_EQ(nerve_task_pool_wait_all(pool), NERVE_OK) << nerve_last_error();
  {
    MappedC<const float> hc(c, NERVE_MAP_READ);
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(hc[i], static_cast<float>(i) + 0.5f) << i;
  }
  nerve_task_pool_destroy(pool);
  free_buffer(a);
  free_buffer(b);
  free_buffer(c);
}

// Members of one pool never depend on each other, even when they all write the same buffer: with two
// workers, two members can wait for each other.
TEST_P(CapiPoolTest, MembersAreIndependent) {
  if (workers() < 2) GTEST_SKIP() << "needs two tasks running at once";
  nerve_buffer_t* buffer = alloc(16, MEM_FLAG_READ_WRITE);
  static std::atomic<int> started{0};
  static std::atomic<int> met{0};
  started = 0;
  met = 0;
  nerve_task_pool_t* pool = nerve_task_pool_create(ctx.get(), 2);
  for (int i = 0; i < 2; ++i) {
    nerve_task_t* task = nerve_task_create(
        +[](void*, nerve_device_t, nerve_stream_t) {
          ++started;
          if (wait_until([] { return started.load() == 2; })) ++met;
        },
        nullptr);
    ASSERT_EQ(nerve_task_set_memory_deps(task, 1, &buffer), NERVE_OK);
    ASSERT_EQ(nerve_task_pool_submit(pool, task), NERVE_OK);
  }
  ASSERT_EQ(nerve_task_pool_wait_all(pool), NERVE_OK);  // launches
  EXPECT_EQ(met.load(), 2);
  nerve_task_pool_destroy(pool);
  free_buffer(buffer);
}

// The pool as a whole comes after an earlier writer of its input and before a later reader of its
// output.
TEST_P(CapiPoolTest, OrderedAgainstOutsideTasks) {
  constexpr std::size_t n = 4096;
  constexpr std::size_t members = 8;
  nerve_buffer_t* input = alloc(n * sizeof(int));
  nerve_buffer_t* output = alloc(n * sizeof(int));
  nerve_buffer_t* total = alloc(sizeof(long));
  struct Io {
    nerve_buffer_t* input;
    nerve_buffer_t* output;
    nerve_buffer_t* total;
  } io{input, output, total};
  // Writer: slow, so that a pool started too early would read garbage.
  nerve_task_t* writer = nerve_task_create(
      +[](void* d, nerve_device_t device, nerve_stream_t) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        auto* in = static_cast<int*>(nerve_buffer_get_device_ptr(static_cast<Io*>(d)->input, device));
        for (std::size_t i = 0; i < n; ++i) in[i] = static_cast<int>(i);
      },
      &io);
  ASSERT_EQ(nerve_task_add_access(writer, input, NERVE_ACCESS_WRITE, 0, n * sizeof(int)), NERVE_OK);
  ASSERT_EQ(nerve_task_submit(ctx.get(), writer, NERVE_DEVICE_ANY), NERVE_OK);

  nerve_task_pool_t* pool = nerve_task_pool_create_ex(ctx.get(), members, sizeof(VecAddDesc));
  for (std::size_t m = 0; m < members; ++m) {
    auto* desc = static_cast<VecAddDesc*>(nerve_task_pool_alloc_desc(pool));
    *desc = {input, nullptr, output, m * (n / members), n / members};
    nerve_task_t* task = nerve_task_create(
        +[](void* d, nerve_device_t device, nerve_stream_t) {
          const auto& desc = *static_cast<VecAddDesc*>(d);
          const auto* in = static_cast<const int*>(nerve_buffer_get_device_ptr(desc.a, device));
          auto* out = static_cast<int*>(nerve_buffer_get_device_ptr(desc.c, device));
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
          for (std::size_t i = desc.offset; i < desc.offset + desc.count; ++i) out[i] = 3 * in[i];
        },
        desc);
    const std::size_t bytes = desc->count * sizeof(int);
    ASSERT_EQ(nerve_task_add_access(task, input, NERVE_ACCESS_READ, desc->offset * sizeof(int), bytes),
              NERVE_OK);
    ASSERT_EQ(nerve_task_add_access(task, output, NERVE_ACCESS_WRITE, desc->offset * sizeof(int), bytes),
              NERVE_OK);
    ASSERT_EQ(nerve_task_pool_submit(pool, task), NERVE_OK);
  }
  ASSERT_EQ(nerve_task_pool_launch(pool), NERVE_OK);

  // Reader, submitted after the launch: must see the pool's whole output.
  nerve_task_t* reader = nerve_task_create(
      +[](void* d, nerve_device_t device, nerve_stream_t) {
        const auto* out =
            static_cast<const int*>(nerve_buffer_get_device_ptr(static_cast<Io*>(d)->output, device));
        long sum = 0;
        for (std::size_t i = 0; i < n; ++i) sum += out[i];
        *static_cast<long*>(nerve_buffer_get_device_ptr(static_cast<Io*>(d)->total, device)) = sum;
      },
      &io);
  ASSERT_EQ(nerve_task_add_access(reader, output, NERVE_ACCESS_READ, 0, n * sizeof(int)), NERVE_OK);
  ASSERT_EQ(nerve_task_add_access(reader, total, NERVE_ACCESS_WRITE, 0, sizeof(long)), NERVE_OK);
  ASSERT_EQ(nerve_task_submit(ctx.get(), reader, NERVE_DEVICE_ANY), NERVE_OK);

  EXPECT_EQ(MappedC<long>(total, NERVE_MAP_READ)[0], 3L * static_cast<long>(n * (n - 1) / 2));
  nerve_task_pool_destroy(pool);
  free_buffer(input);
  free_buffer(output);
  free_buffer(total);
}

// A member's failure: the pool's wait reports it; a later reader of the pool's output is cancelled.
TEST_P(CapiPoolTest, MemberFailure) {
  nerve_buffer_t* output = alloc(64);
  static std::atomic<int> reader_runs{0};
  reader_runs = 0;
  nerve_task_pool_t* pool = nerve_task_pool_create(ctx.get(), 4);
  for (int i = 0; i < 4; ++i) {
    auto* index = static_cast<int*>(nerve_task_pool_alloc_desc(pool));
    *index = i;
    nerve_task_t* task = nerve_task_create(
        +[](void* d, nerve_device_t, nerve_stream_t) {
          if (*static_cast<int*>(d) == 2) nerve_task_fail("member 2 broke");
        },
        index);
    ASSERT_EQ(nerve_task_add_access(task, output, NERVE_ACCESS_WRITE, static_cast<std::size_t>(i) * 16, 16),
              NERVE_OK);
    ASSERT_EQ(nerve_task_set_name(task, "member"), NERVE_OK);
    ASSERT_EQ(nerve_task_pool_submit(pool, task), NERVE_OK);
  }
  ASSERT_EQ(nerve_task_pool_launch(pool), NERVE_OK);
  ASSERT_EQ(
      submit(ctx.get(), +[](void*, nerve_device_t, nerve_stream_t) { ++reader_runs; }, nullptr, {output}),
      NERVE_OK);
  EXPECT_NERVE_ERROR(nerve_task_pool_wait_all(pool), NERVE_ERROR_TASK_FAILED,
                     "task 'member' failed: member 2 broke");
  EXPECT_EQ(nerve_task_pool_wait_all(pool), NERVE_OK) << "a failure is reported once";
  EXPECT_EQ(nerve_wait_all(ctx.get()), NERVE_OK) << "the pool's failure belongs to the pool's wait";
  EXPECT_EQ(reader_runs.load(), 0) << "a reader of a failed pool's output must be cancelled";
  nerve_task_pool_destroy(pool);
  free_buffer(output);
}

TEST_P(CapiPoolTest, SubmitAfterLaunchIsRefused) {
  nerve_task_pool_t* pool = nerve_task_pool_create(ctx.get(), 1);
  ASSERT_EQ(nerve_task_pool_launch(pool), NERVE_OK);
  EXPECT_NERVE_ERROR(
      nerve_task_pool_submit(pool, nerve_task_create(
                                       +[](void*, nerve_device_t, nerve_stream_t) {}, nullptr)),
      NERVE_ERROR_INVALID_ARGUMENT, "after launch");
  EXPECT_EQ(nerve_task_pool_wait_all(pool), NERVE_OK) << "an empty pool completes";
  nerve_task_pool_destroy(pool);
}

TEST_P(CapiPoolTest, DestroyingAnUnlaunchedPoolDiscardsItsTasks) {
  nerve_buffer_t* buffer = alloc(8);
  static std::atomic<int> runs{0};
  runs = 0;
  nerve_task_pool_t* pool = nerve_task_pool_create(ctx.get(), 3);
  for (int i = 0; i < 3; ++i) {
    nerve_task_t* task = nerve_task_create(
        +[](void*, nerve_device_t, nerve_stream_t) { ++runs; }, nullptr);
    nerve_task_set_memory_deps(task, 1, &buffer);
    ASSERT_EQ(nerve_task_pool_submit(pool, task), NERVE_OK);
  }
  nerve_task_pool_destroy(pool);
  ASSERT_EQ(nerve_wait_all(ctx.get()), NERVE_OK);
  EXPECT_EQ(runs.load(), 0);
  free_buffer(buffer);
}

TEST_P(CapiPoolTest, Descriptors) {
  nerve_task_pool_t* pool = nerve_task_pool_create(ctx.get(), 3);
  std::vector<unsigned char*> descs;
  for (int i = 0; i < 50; ++i) {  // far beyond the capacity hint
    auto* desc = static_cast<unsigned char*>(nerve_task_pool_alloc_desc(pool));
    ASSERT_NE(desc, nullptr);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(desc) % alignof(std::max_align_t), 0u);
    for (int k = 0; k < NERVE_TASK_DESC_SIZE; ++k) ASSERT_EQ(desc[k], 0) << "descriptors start zeroed";
    std::memset(desc, i + 1, NERVE_TASK_DESC_SIZE);
    descs.push_back(desc);
  }
  for (int i = 0; i < 50; ++i) {
    for (int k = 0; k < NERVE_TASK_DESC_SIZE; ++k) ASSERT_EQ(descs[i][k], i + 1) << "descriptors overlap";
  }
  nerve_task_pool_destroy(pool);

  nerve_task_pool_t* big = nerve_task_pool_create_ex(ctx.get(), 0, 1000);
  ASSERT_NE(big, nullptr) << nerve_last_error();
  std::memset(nerve_task_pool_alloc_desc(big), 0xff, 1000);
  std::memset(nerve_task_pool_alloc_desc(big), 0xff, 1000);
  nerve_task_pool_destroy(big);

  EXPECT_NERVE_ERROR(nerve_task_pool_create_ex(ctx.get(), 4, 0), NERVE_ERROR_INVALID_ARGUMENT,
                     "descriptor size 0");
  EXPECT_NERVE_ERROR(nerve_task_pool_alloc_desc(nullptr), NERVE_ERROR_INVALID_ARGUMENT, "NULL");
  EXPECT_NERVE_ERROR(nerve_task_pool_submit(nullptr, nullptr), NERVE_ERROR_INVALID_ARGUMENT, "NULL");
  EXPECT_EQ(nerve_task_pool_launch(nullptr), NERVE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nerve_task_pool_wait_all(nullptr), NERVE_ERROR_INVALID_ARGUMENT);
  nerve_task_pool_destroy(nullptr);
}

TEST_P(CapiPoolTest, PoolsLeftAliveAtShutdown) {
  ContextPtr other = make_context(workers());
  ASSERT_NE(other, nullptr);
  nerve_buffer_t* buffer = nerve_buffer_alloc_unified(other.get(), 64, MEM_FLAG_READ_WRITE);
  nerve_task_pool_t* launched = nerve_task_pool_create(other.get(), 1);
  nerve_task_pool_t* unlaunched = nerve_task_pool_create(other.get(), 1);
  for (nerve_task_pool_t* pool : {launched, unlaunched}) {
    nerve_task_t* task = nerve_task_create(
        +[](void*, nerve_device_t, nerve_stream_t) {}, nullptr);
    nerve_task_set_memory_deps(task, 1, &buffer);
    ASSERT_EQ(nerve_task_pool_submit(pool, task), NERVE_OK);
    nerve_task_pool_alloc_desc(pool);
  }
  ASSERT_EQ(nerve_task_pool_launch(launched), NERVE_OK);
  ASSERT_EQ(nerve_buffer_free(buffer), NERVE_OK);
  other.reset();  // destroys both pools; LeakSanitizer checks nothing is left
}

// A buffer freed after a pool's task was submitted stays alive for it, as for a plain task.
TEST_P(CapiPoolTest, PoolLaunchAfterMemberBufferWasFreed) {
  nerve_buffer_t* buffer = alloc(64);
  static std::atomic<int> runs{0};
  runs = 0;
  nerve_task_pool_t* pool = nerve_task_pool_create(ctx.get(), 1);
  nerve_task_t* task = nerve_task_create(
      +[](void*, nerve_device_t, nerve_stream_t) { ++runs; }, nullptr);
  ASSERT_EQ(nerve_task_set_memory_deps(task, 1, &buffer), NERVE_OK);
  ASSERT_EQ(nerve_task_pool_submit(pool, task), NERVE_OK);
  free_buffer(buffer);
  EXPECT_EQ(nerve_task_pool_wait_all(pool), NERVE_OK) << nerve_last_error();
  EXPECT_EQ(runs.load(), 1);
  nerve_task_pool_destroy(pool);
}

struct ReadFirstDesc {
  nerve_buffer_t* buffer;
  std::atomic<int>* seen;
};

// A launched pool whose task reads `buffer`, recording its first int in `seen`.
nerve_task_pool_t* launch_reader_pool(nerve_context_t* context, nerve_buffer_t* buffer,
                                      std::atomic<int>& seen) {
  nerve_task_pool_t* pool = nerve_task_pool_create(context, 1);
  EXPECT_NE(pool, nullptr) << nerve_last_error();
  auto* desc = static_cast<ReadFirstDesc*>(nerve_task_pool_alloc_desc(pool));
  *desc = {buffer, &seen};
  nerve_task_t* task = nerve_task_create(
      +[](void* raw, nerve_device_t device, nerve_stream_t) {
        const auto& d = *static_cast<ReadFirstDesc*>(raw);
        d.seen->store(*static_cast<const int*>(nerve_buffer_get_device_ptr(d.buffer, device)));
      },
      desc);
  EXPECT_EQ(nerve_task_add_access(task, buffer, NERVE_ACCESS_READ, 0, sizeof(int)), NERVE_OK)
      << nerve_last_error();
  EXPECT_EQ(nerve_task_pool_submit(pool, task), NERVE_OK) << nerve_last_error();
  EXPECT_EQ(nerve_task_pool_launch(pool), NERVE_OK) << nerve_last_error();
  return pool;
}

// Shutdown with a buffer still mapped for writing and a launched pool whose task reads it: the
// mapping goes first, then the pool is waited for (the other order waited forever).
TEST_P(CapiPoolTest, ShutdownUnmapsBeforeWaitingForPoolsThatNeedTheMapping) {
  ContextPtr other = make_context(workers());
  ASSERT_NE(other, nullptr);
  nerve_buffer_t* buffer = nerve_buffer_alloc_unified(other.get(), sizeof(int), MEM_FLAG_READ_WRITE);
  auto* mapped = static_cast<int*>(nerve_buffer_map(buffer, NERVE_MAP_WRITE));
  ASSERT_NE(mapped, nullptr) << nerve_last_error();
  *mapped = 42;
  std::atomic<int> seen{0};
  launch_reader_pool(other.get(), buffer, seen);
  other.reset();  // neither unmapped nor destroyed by the program
  EXPECT_EQ(seen.load(), 42) << "the pool's task ran after the mapping, with its bytes";
}

// A launched pool left to nerve_shutdown whose task failed, unreported: the failure is logged, as
// nerve_shutdown promises for unreported failures (by the pool's destruction, which logs it whoever
// destroys the pool).
TEST_P(CapiPoolTest, ShutdownLogsTheFailureOfAPoolNobodyWaitedFor) {
  ContextPtr other = make_context(workers());
  ASSERT_NE(other, nullptr);
  nerve_task_pool_t* pool = nerve_task_pool_create(other.get(), 1);
  ASSERT_NE(pool, nullptr) << nerve_last_error();
  nerve_task_t* task = nerve_task_create(
      +[](void*, nerve_device_t, nerve_stream_t) { nerve_task_fail("pool member broke"); }, nullptr);
  ASSERT_EQ(nerve_task_pool_submit(pool, task), NERVE_OK);
  ASSERT_EQ(nerve_task_pool_launch(pool), NERVE_OK);
  ::testing::internal::CaptureStderr();
  other.reset();
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(log, ::testing::HasSubstr("task pool destroyed with an unreported task failure"));
  EXPECT_THAT(log, ::testing::HasSubstr("pool member broke"));
}

// Destroying a launched pool whose task waits for a mapping this thread holds would wait forever:
// an error, and the pool is detached instead — its task runs once the mapping goes, its descriptor
// still valid, and nothing leaks (LeakSanitizer).
TEST_P(CapiPoolTest, DestroyingAPoolThatWaitsForThisThreadsMappingDetachesIt) {
  nerve_buffer_t* buffer = alloc(sizeof(int), MEM_FLAG_READ_WRITE);
  auto* mapped = static_cast<int*>(nerve_buffer_map(buffer, NERVE_MAP_WRITE));
  ASSERT_NE(mapped, nullptr) << nerve_last_error();
  std::atomic<int> seen{0};
  nerve_task_pool_t* pool = launch_reader_pool(ctx.get(), buffer, seen);
  EXPECT_NERVE_ERROR(nerve_task_pool_destroy(pool), NERVE_ERROR_BUFFER_MISUSE, "detached");
  EXPECT_NE(std::string(nerve_last_error()).find("would wait forever"), std::string::npos)
      << nerve_last_error();
  EXPECT_EQ(seen.load(), 0) << "it waits for the mapping";
  *mapped = 7;
  ASSERT_EQ(nerve_buffer_unmap(buffer), NERVE_OK) << nerve_last_error();
  ASSERT_EQ(nerve_wait_all(ctx.get()), NERVE_OK) << nerve_last_error();
  EXPECT_EQ(seen.load(), 7);
  // A later pool works as before (and frees the detached one, whose task has ended).
  std::atomic<int> again{0};
  nerve_task_pool_t* next = launch_reader_pool(ctx.get(), buffer, again);
  EXPECT_EQ(nerve_task_pool_wait_all(next), NERVE_OK) << nerve_last_error();
  EXPECT_EQ(again.load(), 7);
  nerve_task_pool_destroy(next);
  free_buffer(buffer);
}

// Large descriptors with a large capacity hint: the hint must not turn into one block of hint ×
// descriptor bytes (2048 × 16 MiB once asked for 32 GiB and failed the first allocation).
TEST_P(CapiPoolTest, AHugeHintWithLargeDescriptorsStillAllocates) {
  constexpr std::size_t large = std::size_t{16} << 20;
  for (const std::size_t hint : {std::size_t{2048}, std::size_t{1} << 20, SIZE_MAX}) {
    nerve_task_pool_t* pool = nerve_task_pool_create_ex(ctx.get(), hint, large);
    ASSERT_NE(pool, nullptr) << nerve_last_error();
    for (int i = 0; i < 3; ++i) {
      auto* desc = static_cast<unsigned char*>(nerve_task_pool_alloc_desc(pool));
      ASSERT_NE(desc, nullptr) << "hint " << hint << ": " << nerve_last_error();
      EXPECT_EQ(desc[0], 0);
      EXPECT_EQ(desc[large - 1], 0);
    }
    nerve_task_pool_destroy(pool);
  }
}

// A kernel waiting for its own pool would wait for itself: an error, not a hang. The capacity is a
// hint, a huge one included.
TEST_P(CapiPoolTest, WaitingForItsOwnPoolIsRefusedAndCapacityIsAHint) {
  static std::atomic<int> status{-1};
  static std::string message;  // written in the task, read after the wait
  status = -1;
  nerve_task_pool_t* pool = nerve_task_pool_create(ctx.get(), SIZE_MAX);
  ASSERT_NE(pool, nullptr) << nerve_last_error();
  auto** self = static_cast<nerve_task_pool_t**>(nerve_task_pool_alloc_desc(pool));
  ASSERT_NE(self, nullptr) << nerve_last_error();
  *self = pool;
  nerve_task_t* task = nerve_task_create(
      +[](void* desc, nerve_device_t, nerve_stream_t) {
        status = nerve_task_pool_wait_all(*static_cast<nerve_task_pool_t**>(desc));
        message = nerve_last_error();
      },
      self);
  ASSERT_EQ(nerve_task_pool_submit(pool, task), NERVE_OK);
  EXPECT_EQ(nerve_task_pool_wait_all(pool), NERVE_OK) << nerve_last_error();
  EXPECT_EQ(status.load(), NERVE_ERROR_INVALID_ARGUMENT);
  // In the C API's own words, not the C++ API's.
  EXPECT_THAT(message, ::testing::StartsWith("nerve_task_pool_wait_all: waiting for the pool inside task"));
  EXPECT_THAT(message, ::testing::Not(::testing::HasSubstr("TaskPool")));
  nerve_task_pool_destroy(pool);
}

// A pool wait behind a task this thread suspended (one slot: 'below' runs in main's wait, 'above'
// in below's) is refused: NERVE_ERROR_INVALID_ARGUMENT, the caller's error — not
// NERVE_ERROR_TASK_FAILED, as if the pool's tasks had failed (an audit found that code); a map of the
// data 'below' writes is refused at once (it hung). 'below' is a plain task, then a pool's.
struct BehindSuspended {
  static inline nerve_context_t* context = nullptr;
  static inline nerve_buffer_t* data = nullptr;
  static inline nerve_status_t wait_status = NERVE_OK;
  static inline std::string wait_message;
  static inline nerve_status_t map_status = NERVE_OK;
  static inline std::string map_message;
  static void above(void*, nerve_device_t, nerve_stream_t) {
    nerve_task_pool_t* behind = nerve_task_pool_create(context, 1);
    nerve_task_t* reader = nerve_task_create(
        +[](void*, nerve_device_t, nerve_stream_t) {}, nullptr);
    nerve_task_add_access(reader, data, NERVE_ACCESS_READ, 0, 8);
    nerve_task_pool_submit(behind, reader);
    wait_status = nerve_task_pool_wait_all(behind);
    wait_message = nerve_last_error();
    map_status = nerve_buffer_map(data, NERVE_MAP_READ) == nullptr ? nerve_last_status() : NERVE_OK;
    map_message = nerve_last_error();
    nerve_task_pool_destroy(behind);  // detached: it runs after 'below'
  }
  static void below(void*, nerve_device_t, nerve_stream_t) {
    nerve_task_pool_t* inner = nerve_task_pool_create(context, 1);
    nerve_task_t* task = nerve_task_create(above, nullptr);
    nerve_task_set_name(task, "above");
    nerve_task_pool_submit(inner, task);
    nerve_task_pool_wait_all(inner);
    nerve_task_pool_destroy(inner);
  }
};

TEST(CapiPoolWaits, AWaitOrMapBehindATaskSuspendedBelowIsRefusedAsInvalid) {
  for (const bool below_in_pool : {false, true}) {
    SCOPED_TRACE(below_in_pool ? "below is a pool's task" : "below is a plain task");
    ContextPtr ctx = make_context(1);
    ASSERT_NE(ctx, nullptr);
    BehindSuspended::context = ctx.get();
    BehindSuspended::data = nerve_buffer_alloc_unified(ctx.get(), 8, 0);
    nerve_task_t* task = nerve_task_create(BehindSuspended::below, nullptr);
    nerve_task_set_name(task, "below");
    ASSERT_EQ(nerve_task_add_access(task, BehindSuspended::data, NERVE_ACCESS_WRITE, 0, 8), NERVE_OK);
    nerve_task_pool_t* outer = nerve_task_pool_create(ctx.get(), 1);
    if (below_in_pool) {
      ASSERT_EQ(nerve_task_pool_submit(outer, task), NERVE_OK);
      EXPECT_EQ(nerve_task_pool_wait_all(outer), NERVE_OK) << nerve_last_error();
    } else {
      ASSERT_EQ(nerve_task_submit(ctx.get(), task, NERVE_DEVICE_ANY), NERVE_OK);
    }
    EXPECT_EQ(nerve_wait_all(ctx.get()), NERVE_OK) << nerve_last_error();
    nerve_task_pool_destroy(outer);
    EXPECT_EQ(BehindSuspended::wait_status, NERVE_ERROR_INVALID_ARGUMENT) << BehindSuspended::wait_message;
    EXPECT_THAT(BehindSuspended::wait_message,
                ::testing::HasSubstr("inside task 'above' would never return: it waits for task 'below'"));
    EXPECT_EQ(BehindSuspended::map_status, NERVE_ERROR_INVALID_ARGUMENT) << BehindSuspended::map_message;
    EXPECT_THAT(BehindSuspended::map_message,
                ::testing::HasSubstr("inside task 'above' would never return: it waits for task 'below'"));
    EXPECT_EQ(nerve_buffer_free(BehindSuspended::data), NERVE_OK);
  }
}

INSTANTIATE_TEST_SUITE_P(Capi, CapiPoolTest, NERVE_CAPI_PARAMS, capi_param_name);

}  // namespace
}  // namespace nerve::testing
