// Monitoring: dump_perf_stats() JSON (schema nerve.perf_stats/1, docs/PERF_STATS.md) — workers,
// devices, transfers, per-task records — loaded by a JSON parser and checked field by field.
#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "nerve/coroutine.hpp"

#include "perf/perf_test.hpp"
#include "util/json_stream.hpp"
#include "util/json_text.hpp"

namespace nerve::testing {
namespace {

TEST(PerfStats, SchemaHasWorkersDevicesAndTransfers) {
  Context context(make_settings(2));
  std::atomic<int> sum{0};
  for (int i = 0; i < 100; ++i) context.spawn([&] { sum.fetch_add(1); });
  context.wait_all();
  const nlohmann::json json = dump_stats(context);
  EXPECT_EQ(json["schema"], "nerve.perf_stats/1");
  EXPECT_GT(json["elapsed_ns"].get<std::int64_t>(), 0);
  EXPECT_EQ(json["tasks"]["submitted"], 100);
  EXPECT_EQ(json["tasks"]["completed"], 100);
  EXPECT_EQ(json["tasks"]["recorded"], false) << "records are off by default";
  EXPECT_FALSE(json["tasks"].contains("records"));
  ASSERT_EQ(json["workers"].size(), 2u);
  std::uint64_t run = 0;
  for (const auto& worker : json["workers"]) {
    for (const char* field : {"index", "core", "numa_node", "bound", "application_thread", "tasks_run",
                              "steals", "sleeps", "busy_ns", "idle_ns"}) {
      EXPECT_TRUE(worker.contains(field)) << field;
    }
    run += worker["tasks_run"].get<std::uint64_t>();
  }
  EXPECT_EQ(run, 100u);
  ASSERT_EQ(json["devices"].size(), 1u);
  const auto& cpu = json["devices"][0];
  EXPECT_EQ(cpu["index"], 0);
  EXPECT_EQ(cpu["kind"], "cpu");
  EXPECT_EQ(cpu["tasks"], 100);
  const double utilisation = cpu["utilisation"].get<double>();
  EXPECT_GE(utilisation, 0.0);
  EXPECT_LE(utilisation, 1.0);
  EXPECT_EQ(cpu["busy_ns"].get<std::uint64_t>() + cpu["idle_ns"].get<std::uint64_t>() > 0, true);
  EXPECT_EQ(json["transfers"]["bytes"], 0);
  EXPECT_EQ(json["counters"]["enabled"], false);
}

TEST(PerfStats, WorkerTimeSplitsIntoBusyAndIdle) {
  Context context(make_settings(2));
  // The application thread runs slot 0 while it waits: a task that sleeps keeps some slot busy.
  context.spawn([] { std::this_thread::sleep_for(std::chrono::milliseconds(20)); });
  context.wait_all();
  const ContextStats stats = context.stats();
  std::uint64_t busy = 0;
  for (const WorkerStats& worker : stats.workers) busy += worker.busy_ns;
  EXPECT_GE(busy, 20'000'000u) << "the sleeping task's time counts as busy";
  EXPECT_EQ(stats.devices.at(0).busy_ns, busy);
}

// Each awaited piece of work lasts long enough for the coroutine to suspend on it (work done before
// the co_await resumes at once, without a new stretch).
CoTask<> await_task_then_group(Context& context) {
  co_await context.submit([] { std::this_thread::sleep_for(std::chrono::milliseconds(20)); });
  TaskGroup group(context);
  group.spawn([] { std::this_thread::sleep_for(std::chrono::milliseconds(20)); });
  co_await group;
}

// A launched coroutine runs as one task per stretch between suspensions, each recorded under the
// name launch() was given; its Task itself never runs and is not recorded (PERF_STATS.md).
TEST(PerfStats, CoroutineStretchesAreRecordedUnderTheLaunchName) {
  Settings settings = make_settings(2);
  settings.set("perf.record_tasks", "true");
  Context context(settings);
  launch(context, await_task_then_group(context), "pipeline").wait();
  context.wait_all();
  const ContextStats stats = context.stats();
  std::size_t named = 0;
  for (const TaskTimes& record : stats.task_records) named += record.name == "pipeline" ? 1 : 0;
  EXPECT_EQ(named, 3u) << "the first stretch, the one after the task, the one after the group";
  EXPECT_EQ(stats.tasks_completed, stats.task_records.size() + 1) << "all but the coroutine's own Task";
}

CoTask<> throw_after_a_task(Context& context) {
  co_await context.submit([] {});
  throw std::runtime_error("the coroutine failed");
}

CoTask<> throw_at_once() {
  throw std::runtime_error("the coroutine failed at once");
  co_return;
}

// The stretch a coroutine's exception escaped from is recorded as failed (its Task has no record):
// the first stretch of one that throws after a suspension succeeded, its second failed; one that
// throws before suspending fails in its only stretch. The failure is reported once, by the Task.
TEST(PerfStats, TheStretchACoroutinesExceptionEscapedFromIsRecordedAsFailed) {
  Settings settings = make_settings(2);
  settings.set("perf.record_tasks", "true");
  Context context(settings);
  EXPECT_THROW(launch(context, throw_after_a_task(context), "later").wait(), std::runtime_error);
  EXPECT_THROW(launch(context, throw_at_once(), "at once").wait(), std::runtime_error);
  context.wait_all();                                        // nothing else to report
  std::map<std::string, std::vector<std::string>> statuses;  // by name, in submission order
  const std::vector<TaskTimes> records = context.stats().task_records;
  EXPECT_TRUE(std::ranges::is_sorted(records, {}, &TaskTimes::id)) << "stats.hpp: by id";
  for (const TaskTimes& record : records) statuses[record.name].push_back(record.status);
  EXPECT_EQ(statuses["later"], (std::vector<std::string>{"succeeded", "failed"}));
  EXPECT_EQ(statuses["at once"], (std::vector<std::string>{"failed"}));
}

// Regression: a coroutine whose group was cancelled before it started never runs and its Task is
// cancelled (coroutine.hpp), but the stretch that found it so was recorded as succeeded.
TEST(PerfStats, ACoroutineCancelledBeforeItStartedIsRecordedAsCancelled) {
  Settings settings = make_settings(2);
  settings.set("perf.record_tasks", "true");
  Context context(settings);
  bool ran = false;
  TaskGroup group(context);
  group.cancel();
  Task never = launch(
      group,
      [](bool& body_ran) -> CoTask<> {
        body_ran = true;
        co_return;
      }(ran),
      "never");
  group.wait();
  EXPECT_FALSE(ran);
  EXPECT_EQ(never.status(), TaskStatus::cancelled);
  context.wait_all();
  std::vector<std::string> statuses;
  for (const TaskTimes& record : context.stats().task_records) {
    if (record.name == "never") statuses.push_back(record.status);
  }
  EXPECT_EQ(statuses, (std::vector<std::string>{"cancelled"}));
}

TEST(PerfStats, RecordTasksGivesTimesDeviceAndBytesPerTask) {
  for (const bool synchronous : {false, true}) {
    SCOPED_TRACE(synchronous ? "synchronous copies" : "asynchronous copies");
    Settings settings = make_settings(2);
    settings.set("perf.record_tasks", "true");
    Context context(settings);
    detail::TestDeviceOptions device;
    device.synchronous_copies = synchronous;  // copies done before placement returns
    context.impl()->add_test_device(device);
    Buffer<float> data(context, std::vector<float>(1024, 1.0f));
    Kernel twice("twice");
    twice.cpu([](const KernelArgs& args) {
      auto values = args.span<float>(0);
      for (float& v : values) v *= 2;
    });
    context.submit(TaskOptions{.name = "on-device", .device = 1}, twice, read_write(data));
    context.submit(TaskOptions{.name = "on-cpu", .device = 0}, twice, read_write(data));
    context.spawn(TaskOptions{.name = "lean"}, [] {});
    context.wait_all();
    EXPECT_EQ(data.to_vector(), std::vector<float>(1024, 4.0f));

    const nlohmann::json json = dump_stats(context);
    EXPECT_EQ(json["tasks"]["recorded"], true);
    EXPECT_EQ(json["tasks"]["records_dropped"], 0);
    const auto& records = json["tasks"]["records"];
    ASSERT_EQ(records.size(), 3u);
    std::map<std::string, nlohmann::json> by_name;
    for (const auto& record : records) by_name[record["name"]] = record;
    const auto& device_task = by_name.at("on-device");
    const auto& cpu_task = by_name.at("on-cpu");
    EXPECT_EQ(device_task["device"], 1);
    EXPECT_EQ(device_task["worker"], -1);
    EXPECT_EQ(cpu_task["device"], 0);
    EXPECT_GE(cpu_task["worker"].get<int>(), 0);
    for (const auto& record : {device_task, cpu_task, by_name.at("lean")}) {
      const auto submitted = record["submitted_ns"].get<std::int64_t>();
      const auto ready = record["ready_ns"].get<std::int64_t>();
      const auto valid = record["data_valid_ns"].get<std::int64_t>();
      const auto start = record["start_ns"].get<std::int64_t>();
      const auto end = record["end_ns"].get<std::int64_t>();
      EXPECT_GT(submitted, 0) << record;
      EXPECT_LE(submitted, ready) << record;
      EXPECT_LE(ready, valid) << record;
      EXPECT_LE(valid, start) << record;
      EXPECT_LE(start, end) << record;
    }
    EXPECT_LT(device_task["id"], cpu_task["id"]) << "ids follow submission order";
    EXPECT_EQ(device_task["bytes_moved"], 4096) << "the buffer was copied to the device";
    EXPECT_EQ(cpu_task["bytes_moved"], 4096) << "and back to the host";
    // A copy was needed: the data became valid after the task was ready, even when the copy was done
    // before placement returned (it used to say data_valid_ns = ready_ns then).
    for (const auto& record : {device_task, cpu_task})
      EXPECT_GT(record["data_valid_ns"].get<std::int64_t>(), record["ready_ns"].get<std::int64_t>())
          << record;
    EXPECT_LE(device_task["end_ns"].get<std::int64_t>(), cpu_task["start_ns"].get<std::int64_t>());
    for (const auto& record : records) EXPECT_EQ(record["status"], "succeeded") << record;

    ASSERT_EQ(json["devices"].size(), 2u);
    const auto& test_device = json["devices"][1];
    EXPECT_EQ(test_device["index"], 1);
    EXPECT_EQ(test_device["kind"], "test");
    EXPECT_EQ(test_device["tasks"], 1);
    EXPECT_GT(test_device["busy_ns"].get<std::uint64_t>(), 0u);
    EXPECT_EQ(test_device["bytes_in"], 4096);
    EXPECT_EQ(test_device["bytes_out"], 4096);
    EXPECT_EQ(json["devices"][0]["bytes_in"], 4096);
    EXPECT_EQ(json["transfers"]["bytes"], 8192);
  }
}

// Names are the user's bytes, not always UTF-8: a Latin-1 name is written as U+FFFD instead of
// losing the whole file (nlohmann::json throws on invalid UTF-8).
TEST(PerfStats, ANameThatIsNotUtf8DoesNotLoseTheFile) {
  Settings settings = make_settings(2);
  settings.set("perf.record_tasks", "true");
  Context context(settings);
  context.submit(TaskOptions{.name = "caf\xe9"}, [] {}).wait();
  const nlohmann::json json = dump_stats(context);
  ASSERT_EQ(json["tasks"]["records"].size(), 1u);
  EXPECT_EQ(json["tasks"]["records"][0]["name"], "caf\xef\xbf\xbd") << "U+FFFD in UTF-8";
}

// The stats file and the trace stream their task records (write_json()), yet must read exactly as
// the whole document dumped at once: compact and indented, streamed arrays at any depth, empty
// ones, names with line breaks and bytes that are not UTF-8.
TEST(PerfStats, AStreamedDocumentIsTheWholeDocumentsText) {
  const nlohmann::json whole = {
      {"schema", "nerve.perf_stats/1"},
      {"tasks",
       {{"records",
         {{{"id", 1}, {"name", "two\nlines"}}, {{"id", 2}, {"name", "\xff"}, {"times", {1.5, 2}}}}},
        {"submitted", 2}}},
      {"empty", nlohmann::json::array()},
      {"nested", {{"list", {1, {{"object", nlohmann::json::object()}}}}}}};
  nlohmann::json skeleton = whole;
  skeleton["tasks"]["records"] = nlohmann::json::array();
  const detail::StreamedArray streamed[] = {{"/tasks/records",
                                             [&](detail::JsonArrayWriter& records) {
                                               for (const auto& record : whole["tasks"]["records"])
                                                 records.add(record);
                                             }},
                                            {"/empty", [](detail::JsonArrayWriter&) {}}};
  for (const int indent : {-1, 0, 2, 4}) {
    std::ostringstream out;
    detail::write_json(out, skeleton, indent, streamed);
    EXPECT_EQ(out.str(), detail::json_text(whole, indent)) << "indent " << indent;
  }
}

// A call sent to a device (TaskOptions::device) and cancelled before it got there is no CPU run, even
// when its kernel has a CPU body: neither recorded nor counted as the CPU's, like a call whose kernel
// has no CPU body (it was recorded as device 0's).
TEST(PerfStats, ACallSentToADeviceAndCancelledIsNoCpuRun) {
  Settings settings = make_settings(2);
  settings.set("perf.record_tasks", "true");
  Context context(settings);
  context.impl()->add_test_device({});
  Kernel twice("twice");
  twice.cpu([](const KernelArgs& args) {
    for (float& v : args.span<float>(0)) v *= 2;
  });
  Buffer<float> data(context, 64);
  context.spawn(
      TaskOptions{.name = "fails"}, [](std::span<float>) { throw std::runtime_error("no data"); },
      write(data));
  Task sent = context.submit(TaskOptions{.name = "sent", .device = 1}, twice, read_write(data));
  EXPECT_THROW(sent.wait(), TaskCancelled);
  EXPECT_THROW(context.wait_all(), std::runtime_error);
  const ContextStats stats = context.stats();
  for (const TaskTimes& record : stats.task_records)
    EXPECT_NE(record.name, "sent") << "device " << record.device;
  EXPECT_EQ(stats.devices.at(0).tasks, 1u) << "the CPU ran only the failing task";
}

TEST(PerfStats, MaxTaskRecordsBoundsTheRecords) {
  Settings settings = make_settings(2);
  settings.set("perf.record_tasks", "true");
  settings.set("perf.max_task_records", "10");
  Context context(settings);
  for (int i = 0; i < 50; ++i) context.spawn([] {});
  context.wait_all();
  const ContextStats stats = context.stats();
  EXPECT_TRUE(stats.tasks_recorded);
  // The bound is exact: quota a thread took but did not use goes to the others.
  EXPECT_EQ(stats.task_records.size(), 10u);
  EXPECT_EQ(stats.task_records.size() + stats.task_records_dropped, 50u);
  std::set<std::uint64_t> ids;
  for (const TaskTimes& task : stats.task_records) ids.insert(task.id);
  EXPECT_EQ(ids.size(), stats.task_records.size()) << "every record has its own id";
}

TEST(PerfStats, MaxTaskRecordsDropsNothingBelowTheBound) {
  for (const auto& [bound, tasks] : {std::pair{1000, 900}, std::pair{100, 90}, std::pair{100, 100}}) {
    Settings settings = make_settings(2);
    settings.set("perf.record_tasks", "true");
    settings.set("perf.max_task_records", std::to_string(bound));
    Context context(settings);
    for (int i = 0; i < tasks; ++i) context.spawn([] {});
    context.wait_all();
    const ContextStats stats = context.stats();
    EXPECT_EQ(stats.task_records_dropped, 0u) << tasks << " tasks, bound " << bound;
    EXPECT_EQ(stats.task_records.size(), static_cast<std::size_t>(tasks)) << "bound " << bound;
  }
}

TEST(PerfStats, MaxTaskRecordsKeepsExactlyTheBound) {
  Settings settings = make_settings(2);
  settings.set("perf.record_tasks", "true");
  settings.set("perf.max_task_records", "100");
  Context context(settings);
  for (int round = 0; round < 5; ++round) {  // several threads take quota, in batches
    for (int i = 0; i < 30; ++i) context.spawn([] {});
    context.wait_all();
  }
  const ContextStats stats = context.stats();
  EXPECT_EQ(stats.task_records.size(), 100u);
  EXPECT_EQ(stats.task_records_dropped, 50u);
}

TEST(PerfStats, TaskPoolGatesAreNotCountedAsTasks) {
  Context context(make_settings(2));
  for (int p = 0; p < 3; ++p) {
    TaskPool pool(context);
    for (int i = 0; i < 10; ++i) pool.add([] {});
    pool.wait_all();
  }
  {
    TaskPool empty(context);
    empty.wait_all();
  }
  context.wait_all();
  const ContextStats stats = context.stats();
  std::uint64_t run = 0;
  for (const auto& worker : stats.workers) run += worker.tasks_run;
  EXPECT_EQ(run, 30u);
  EXPECT_EQ(stats.tasks_submitted, 30u) << "a pool's internal gate is not a task";
  EXPECT_EQ(stats.tasks_completed, 30u);
}

// Two tasks on one device read one buffer at once: the second joins the copy the first started
// (docs/MEMORY.md), and that one copy counts in the first task's bytes_moved alone, not in both.
TEST(PerfStats, AJoinedCopyCountsInTheBytesOfTheTaskThatStartedIt) {
  Settings settings = make_settings(2);
  settings.set("perf.record_tasks", "true");
  Context context(settings);
  // A slow copy, so that the second task finds it in flight.
  context.impl()->add_test_device(detail::TestDeviceOptions{.copy_latency = std::chrono::milliseconds(100)});
  Buffer<int> data(context, std::vector<int>(1024, 1));
  const auto look = [](std::span<const int> d) { EXPECT_EQ(d[0], 1); };
  context.spawn(TaskOptions{.name = "first", .device = 1}, look, read(data));
  context.spawn(TaskOptions{.name = "second", .device = 1}, look, read(data));
  context.wait_all();
  const ContextStats stats = context.stats();
  EXPECT_EQ(stats.copies, 1u);
  std::map<std::string, std::uint64_t> moved;
  for (const TaskTimes& task : stats.task_records) moved[task.name] = task.bytes_moved;
  EXPECT_EQ(moved.at("first"), 1024 * sizeof(int));
  EXPECT_EQ(moved.at("second"), 0u) << "it joined the first one's copy";
}

// docs/PERF_STATS.md: data_valid_ns = ready_ns when no copy was needed; ready_ns = when the last
// predecessor finished, so never before that predecessor's end_ns.
TEST(PerfStats, RecordTimesFollowDependenciesAndCopies) {
  Settings settings = make_settings(2);
  settings.set("perf.record_tasks", "true");
  Context context(settings);
  Buffer<int> data(context, 16);
  constexpr int independent = 200;
  for (int i = 0; i < independent; ++i) context.spawn([] {});
  for (int i = 0; i < 200; ++i) context.spawn([](std::span<int> d) { ++d[0]; }, read_write(data));
  context.wait_all();
  const ContextStats stats = context.stats();
  ASSERT_EQ(stats.task_records.size(), 400u);
  std::map<std::uint64_t, TaskTimes> by_id;
  for (const TaskTimes& task : stats.task_records) by_id[task.id] = task;
  const TaskTimes* previous = nullptr;
  int index = 0;
  for (const auto& [id, task] : by_id) {
    EXPECT_EQ(task.data_valid_ns, task.ready_ns) << "task " << id << ": no copies";
    EXPECT_LE(task.submitted_ns, task.ready_ns) << "task " << id;
    EXPECT_LE(task.data_valid_ns, task.start_ns) << "task " << id;
    EXPECT_LE(task.start_ns, task.end_ns) << "task " << id;
    if (index > independent && previous != nullptr) {
      EXPECT_GE(task.ready_ns, previous->end_ns)
          << "chain task " << id << " ready before its predecessor ended";
    }
    previous = &task;
    ++index;
  }
}

}  // namespace
}  // namespace nerve::testing
