// The memory dump_perf_stats() and the trace take while they write, beyond the task records: the
// records are streamed to the file, so what they hold at their peak is a few bytes per record, not a
// document of them all.
//
// This executable replaces the global operator new (it counts the heap's bytes and their peak),
// so it is a test binary of its own: the other suites keep the real allocator.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>

#include <malloc.h>

#include "perf/perf_test.hpp"
#include "support/replace_operator_new.hpp"

namespace {

std::atomic<std::int64_t> heap_bytes{0};
std::atomic<std::int64_t> heap_peak{0};

}  // namespace

void* nerve_test_allocate(std::size_t bytes, std::size_t alignment) {
  void* memory = heap_allocate(bytes, alignment);
  const auto size = static_cast<std::int64_t>(malloc_usable_size(memory));
  const std::int64_t bytes_now = heap_bytes.fetch_add(size) + size;
  std::int64_t peak = heap_peak.load(std::memory_order_relaxed);
  while (bytes_now > peak && !heap_peak.compare_exchange_weak(peak, bytes_now)) {
  }
  return memory;
}

void nerve_test_free(void* memory) noexcept {
  if (memory == nullptr) return;
  heap_bytes.fetch_sub(static_cast<std::int64_t>(malloc_usable_size(memory)));
  std::free(memory);
}

namespace nerve::testing {
namespace {

constexpr int recorded_tasks = 20000;
// Beyond what the heap held when writing began: the records' order by id (8 bytes each), one
// record's text, the file's buffer. Built as one document they took ~2 KB each (40 MB here).
constexpr std::int64_t most_bytes_per_record = 100;

// peak_above_now(): how far the heap grows above its present size while `write` runs.
template <class Write>
std::int64_t peak_above_now(Write&& write) {
  const std::int64_t before = heap_bytes.load();
  heap_peak.store(before);
  write();
  return heap_peak.load() - before;
}

void spawn_recorded_tasks(Context& context) {
  for (int i = 0; i < recorded_tasks; ++i) context.spawn(TaskOptions{.name = "recorded"}, [] {});
  context.wait_all();
}

TEST(PerfMemory, RegressionDumpPerfStatsStreamsTheTaskRecords) {
  Settings settings = make_settings(2);
  settings.set("perf.record_tasks", "true");
  Context context(settings);
  spawn_recorded_tasks(context);
  const auto path = temp_file("nerve-perf-stats-memory");
  const std::int64_t grown = peak_above_now([&] { context.dump_perf_stats(path); });
  EXPECT_LT(grown, most_bytes_per_record * recorded_tasks) << grown / recorded_tasks << " bytes a record";
  EXPECT_EQ(load_json(path)["tasks"]["records"].size(), recorded_tasks);
  std::filesystem::remove(path);
}

TEST(PerfMemory, RegressionTheTraceStreamsItsEvents) {
  const auto path = temp_file("nerve-trace-memory");
  std::int64_t grown = 0;
  {
    Settings settings = make_settings(2);
    settings.set("perf.trace", path.string());
    auto context = std::make_unique<Context>(settings);
    spawn_recorded_tasks(*context);
    grown = peak_above_now([&] { context.reset(); });  // writes the trace
  }
  EXPECT_LT(grown, most_bytes_per_record * recorded_tasks) << grown / recorded_tasks << " bytes a record";
  const nlohmann::json trace = load_json(path);
  EXPECT_EQ(std::count_if(trace["traceEvents"].begin(), trace["traceEvents"].end(),
                          [](const nlohmann::json& event) { return event["ph"] == "X"; }),
            recorded_tasks);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace nerve::testing
