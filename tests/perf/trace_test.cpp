// Timeline trace (perf.trace / NERVE_TRACE): Chrome trace-event JSON written when the context is
// destroyed, loaded by a JSON parser; tracks per worker, device queue and transfer engine, flow
// arrows along dependencies, utilisation counters.
#include <chrono>
#include <csignal>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <sys/resource.h>
#include <sys/stat.h>

#include <gmock/gmock.h>

#include "perf/perf_test.hpp"

namespace nerve::testing {
namespace {

struct TraceSummary {
  std::map<std::string, int> phases;          // ph -> count
  std::set<std::string> track_names;          // thread_name metadata
  std::map<std::string, int> slices_by_name;  // X events
  std::set<std::string> counter_names;
  std::map<std::string, nlohmann::json> task_args;  // args of the last task slice of each name
};

TraceSummary summarise(const nlohmann::json& trace) {
  TraceSummary summary;
  for (const auto& event : trace.at("traceEvents")) {
    const std::string ph = event.at("ph");
    ++summary.phases[ph];
    if (ph == "M" && event.at("name") == "thread_name") summary.track_names.insert(event["args"]["name"]);
    if (ph == "X") {
      EXPECT_GE(event.at("dur").get<double>(), 0.0);
      EXPECT_GE(event.at("ts").get<double>(), 0.0);
      ++summary.slices_by_name[event.at("name")];
      if (event.value("cat", "") == "task") summary.task_args[event.at("name")] = event.at("args");
    }
    if (ph == "C") summary.counter_names.insert(event.at("name"));
  }
  return summary;
}

// arrows_of(): the trace's flow arrows as (source task, destination task) names; an arrow's ends are
// found by the track and start time of the slice they sit on.
using Arrows = std::multiset<std::pair<std::string, std::string>>;
Arrows arrows_of(const nlohmann::json& trace) {
  std::map<std::pair<int, double>, std::string> name_at;
  for (const auto& event : trace["traceEvents"]) {
    if (event["ph"] == "X") name_at[{event["tid"].get<int>(), event["ts"].get<double>()}] = event["name"];
  }
  const auto slice_under = [&](const nlohmann::json& event) {
    return name_at.at({event["tid"].get<int>(), event["ts"].get<double>()});
  };
  std::map<std::string, std::string> flow_from;  // flow id → source task
  for (const auto& event : trace["traceEvents"]) {
    if (event["ph"] == "s") flow_from[event["id"].dump()] = slice_under(event);
  }
  Arrows arrows;
  for (const auto& event : trace["traceEvents"]) {
    if (event["ph"] == "f") arrows.insert({flow_from.at(event["id"].dump()), slice_under(event)});
  }
  return arrows;
}

// A kernel that adds 1 to every int of its one access, on the CPU (and on test devices, which run it).
Kernel bump_kernel() {
  Kernel bump("bump");
  bump.cpu([](const KernelArgs& args) {
    for (int& v : args.span<int>(0)) ++v;
  });
  return bump;
}

// partial_overlaps(): slices (X events) of one track that overlap without nesting, which Perfetto
// cannot draw (its JSON importer needs a track's slices to nest), by track name.
std::map<std::string, int> partial_overlaps(const nlohmann::json& trace) {
  std::map<int, std::string> names;
  std::map<int, std::vector<std::pair<double, double>>> slices;
  for (const auto& event : trace["traceEvents"]) {
    if (event["ph"] == "M" && event["name"] == "thread_name") names[event["tid"]] = event["args"]["name"];
    if (event["ph"] == "X")
      slices[event["tid"]].emplace_back(event["ts"].get<double>(),
                                        event["ts"].get<double>() + event["dur"].get<double>());
  }
  std::map<std::string, int> overlaps;
  for (auto& [track, list] : slices) {
    std::sort(list.begin(), list.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first < b.first : a.second > b.second;
    });
    std::vector<double> open_ends;  // the enclosing slices' ends
    for (const auto& [start, end] : list) {
      while (!open_ends.empty() && open_ends.back() <= start) open_ends.pop_back();
      if (!open_ends.empty() && end > open_ends.back() + 1e-6) ++overlaps[names[track]];
      open_ends.push_back(end);
    }
  }
  return overlaps;
}

// trace_of(): the trace written by a context of two workers and a test device (`device`) in which
// `work` ran; it is written when the context ends, not before.
template <class Work>
nlohmann::json trace_of(const char* name, const detail::TestDeviceOptions& device, Work&& work) {
  const auto path = temp_file(name);
  std::filesystem::remove(path);
  {
    Settings settings = make_settings(2);
    settings.set("perf.trace", path.string());
    Context context(settings);
    context.impl()->add_test_device(device);
    work(context);
    EXPECT_FALSE(std::filesystem::exists(path)) << "written when the context ends";
  }
  nlohmann::json trace = load_json(path);
  std::filesystem::remove(path);
  return trace;
}

// Regression: every copy between two nodes, and every task of a device, went on one track, where
// copies in flight together (and kernels on several queues) overlap without nesting: Perfetto
// cannot draw that. Overlapping slices now go on further lanes of the track, "... (2)" and on.
TEST(Trace, SlicesInFlightTogetherGoOnLanesOfTheirTrack) {
  const nlohmann::json trace =
      trace_of("nerve-trace-lanes", {.copy_latency = std::chrono::milliseconds(2)}, [](Context& context) {
        const Kernel bump = bump_kernel();
        std::vector<Buffer<int>> data;
        for (int i = 0; i < 12; ++i) data.emplace_back(context, std::vector<int>(4096, i));
        for (auto& buffer : data) context.spawn(TaskOptions{.device = 1}, bump, read_write(buffer));
        context.wait_all();
        for (auto& buffer : data) EXPECT_EQ(buffer.to_vector()[7], (&buffer - data.data()) + 1);
      });
  EXPECT_EQ(partial_overlaps(trace), (std::map<std::string, int>{}));
  const TraceSummary summary = summarise(trace);
  EXPECT_TRUE(summary.track_names.contains("transfers node 0 -> node 1"));
  EXPECT_TRUE(summary.track_names.contains("transfers node 0 -> node 1 (2)")) << "12 copies of 2 ms at once";
}

TEST(Trace, WrittenAtShutdownWithTracksFlowsAndCounters) {
  const nlohmann::json trace = trace_of("nerve-trace", {}, [](Context& context) {
    Buffer<int> data(context, std::vector<int>(256, 1));
    const Kernel bump = bump_kernel();
    // A chain host -> device -> host: two copies, two dependency edges ("first" is held until the
    // chain is submitted: an edge exists only to a predecessor that has not finished).
    std::atomic<bool> go{false};
    context.spawn(
        TaskOptions{.name = "first"},
        [&go](std::span<int> d) {
          while (!go.load()) std::this_thread::yield();
          d[0] += 1;
        },
        read_write(data));
    context.submit(TaskOptions{.name = "on-device", .device = 1}, bump, read_write(data));
    context.submit(TaskOptions{.name = "last", .device = 0}, bump, read_write(data));
    go = true;
    for (int i = 0; i < 20; ++i) context.spawn(TaskOptions{.name = "lean"}, [] {});
    context.wait_all();
  });
  EXPECT_EQ(trace["otherData"]["schema"], "nerve.trace/1");
  const TraceSummary summary = summarise(trace);
  EXPECT_TRUE(summary.track_names.contains("worker 0 (application thread)"));
  EXPECT_TRUE(summary.track_names.contains("worker 1"));
  bool device_track = false;
  for (const auto& name : summary.track_names) device_track |= name.starts_with("device 1 queue");
  EXPECT_TRUE(device_track);
  EXPECT_TRUE(summary.track_names.contains("transfers node 0 -> node 1"));
  EXPECT_TRUE(summary.track_names.contains("transfers node 1 -> node 0"));
  EXPECT_EQ(summary.slices_by_name.at("first"), 1);
  EXPECT_EQ(summary.slices_by_name.at("on-device"), 1);
  EXPECT_EQ(summary.slices_by_name.at("last"), 1);
  EXPECT_EQ(summary.slices_by_name.at("lean"), 20);
  // docs/TRACING.md: every task slice carries these args; bytes_moved 0 included (a CPU task on host
  // data).
  for (const char* name : {"first", "lean"}) {
    const nlohmann::json& args = summary.task_args.at(name);
    for (const char* key : {"submitted_us", "ready_us", "data_valid_us", "bytes_moved"})
      ASSERT_TRUE(args.contains(key)) << name << " has no " << key << ": " << args.dump();
    EXPECT_EQ(args["bytes_moved"], 0) << name;
  }
  EXPECT_EQ(summary.task_args.at("last").value("bytes_moved", 0), 256 * sizeof(int)) << "copied back";
  EXPECT_EQ(summary.phases.at("s"), 2) << "one flow per dependency edge";
  EXPECT_EQ(summary.phases.at("f"), 2);
  EXPECT_TRUE(summary.counter_names.contains("utilisation device 0"));
  EXPECT_TRUE(summary.counter_names.contains("utilisation device 1"));
}

TEST(Trace, FlowArrowsJoinTheTasksOfAnEdge) {
  const auto path = temp_file("nerve-trace-flow");
  {
    Settings settings = make_settings(1);
    settings.set("perf.trace", path.string());
    Context context(settings);
    Buffer<int> data(context, std::vector<int>(4, 0));
    // One worker: the application thread runs both only when it waits, so the edge always exists.
    context.spawn(
        TaskOptions{.name = "writer"}, [](std::span<int> d) { d[0] = 1; }, write(data));
    context.spawn(
        TaskOptions{.name = "reader"}, [](std::span<const int>) {}, read(data));
    context.wait_all();
  }
  const nlohmann::json trace = load_json(path);
  std::filesystem::remove(path);
  std::map<std::string, double> start_of;
  for (const auto& event : trace["traceEvents"]) {
    if (event["ph"] == "X") start_of[event["name"]] = event["ts"].get<double>();
  }
  int flows = 0;
  for (const auto& event : trace["traceEvents"]) {
    if (event["ph"] == "s") {
      EXPECT_EQ(event["ts"].get<double>(), start_of.at("writer"));
      ++flows;
    }
    if (event["ph"] == "f") EXPECT_EQ(event["ts"].get<double>(), start_of.at("reader"));
  }
  EXPECT_EQ(flows, 1);
}

// A trace path that cannot be written is a configuration error when the context is made, naming
// the key and where it was set, not a warning after the run.
TEST(Trace, AnUnwritablePathIsAnErrorAtCreation) {
  Settings settings = make_settings(1);
  settings.set("perf.trace", "/proc/no/such/dir/trace.json");
  try {
    Context context(settings);
    ADD_FAILURE() << "an unwritable trace path was accepted";
  } catch (const ConfigError& error) {
    EXPECT_EQ(error.key(), "perf.trace");
    EXPECT_EQ(std::string(error.what()).rfind("api: perf.trace: cannot write", 0), 0u) << error.what();
  }
}

// While one lives, files the process writes stop at `bytes` (a stand-in for a full disk): the write
// fails (EFBIG) instead of the process being killed (SIGXFSZ).
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) : handler_(std::signal(SIGXFSZ, SIG_IGN)) {
    getrlimit(RLIMIT_FSIZE, &old_);
    rlimit limited = old_;
    limited.rlim_cur = bytes;
    setrlimit(RLIMIT_FSIZE, &limited);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &old_);
    std::signal(SIGXFSZ, handler_);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  rlimit old_{};
  void (*handler_)(int);
};

// A trace whose writing fails (a full disk) leaves the previous one whole. (The failed replacement
// fell back to writing the file in place, which truncated it and failed the same way: the previous
// trace was lost for 4 KiB of broken JSON.)
TEST(Trace, AWriteThatFailsLeavesThePreviousTrace) {
  const auto path = temp_file("nerve-trace-full-disk");
  const std::string previous = "{\"traceEvents\": []}\n";
  std::ofstream(path) << previous;
  {
    std::optional<FileSizeLimit> full_disk;  // destroyed after the context, which writes its trace
    Settings settings = make_settings(2);
    settings.set("perf.trace", path.string());
    Context context(settings);
    for (int i = 0; i < 500; ++i) context.spawn([] {});
    context.wait_all();
    full_disk.emplace(4096);
  }
  std::ifstream in(path);
  std::stringstream now;
  now << in.rdbuf();
  EXPECT_EQ(now.str(), previous);
  std::filesystem::remove(path);
}

// A FIFO is no file to write an output to: checking it for writing blocked until a reader came (and
// gave that reader an empty stream, the trace then waiting for the next). perf.trace and, under heft,
// perf.decision_log naming one are configuration errors at creation, not a hang.
TEST(Trace, AFifoForAnOutputIsAnErrorAtCreationNotAHang) {
  for (const char* key : {"perf.trace", "perf.decision_log"}) {
    const auto fifo = temp_file(std::string("nerve-fifo-") + key);  // one each: a path is claimed once
    std::filesystem::remove(fifo);
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    const bool heft = std::string(key) == "perf.decision_log";
    Settings settings = make_settings(1, heft ? SchedulerPolicy::heft : SchedulerPolicy::eager);
    settings.set(key, fifo.string());
    const auto models = std::filesystem::temp_directory_path() / "nerve-fifo-models";
    settings.set("perf.model_dir", models.string());
    try {
      Context context(settings);
      ADD_FAILURE() << key << ": a FIFO was accepted";
    } catch (const ConfigError& error) {
      EXPECT_EQ(error.key(), key);
      EXPECT_THAT(error.what(), ::testing::HasSubstr("is a FIFO, not a file")) << error.what();
    }
    std::filesystem::remove(fifo);
    std::filesystem::remove_all(models);
  }
}

// A dependency on a task that has already finished adds no edge to wait on, but it is one all the
// same: the trace draws its arrow (read after write, write after read, write after write; once per
// predecessor, however many slices of the buffer it wrote).
TEST(Trace, FlowArrowsFromTasksThatHadAlreadyFinished) {
  const auto path = temp_file("nerve-trace-finished-flow");
  {
    Settings settings = make_settings(2);
    settings.set("perf.trace", path.string());
    Context context(settings);
    Buffer<int> data(context, 8);
    Buffer<int> other(context, 8);
    context
        .submit(
            TaskOptions{.name = "producer"}, [](std::span<int> d) { d[0] = 1; }, write(data))
        .wait();
    context
        .submit(
            TaskOptions{.name = "half"}, [](std::span<int> d) { d[0] = 2; }, write(data.slice(4, 4)))
        .wait();
    context
        .submit(
            TaskOptions{.name = "consumer"}, [](std::span<const int>, std::span<int>) {}, read(data),
            write(other))
        .wait();
    context
        .submit(
            TaskOptions{.name = "overwriter"}, [](std::span<int> d) { d[0] = 3; }, write(other))
        .wait();
  }
  const nlohmann::json trace = load_json(path);
  std::filesystem::remove(path);
  const Arrows expected{
      {"producer", "half"}, {"producer", "consumer"}, {"half", "consumer"}, {"consumer", "overwriter"}};
  EXPECT_EQ(arrows_of(trace), expected);
}

// A task pool is ordered as a whole against other work by its buffers: a task it waits for has an
// arrow to each of its tasks, a task that waits for it one from each (docs/TRACING.md). Its tasks,
// independent of one another, have none between them.
TEST(Trace, FlowArrowsReachEveryTaskOfAPool) {
  const auto path = temp_file("nerve-trace-pool-flow");
  {
    Settings settings = make_settings(1);  // everything is submitted before anything runs
    settings.set("perf.trace", path.string());
    Context context(settings);
    Buffer<int> data(context, 8);
    // Each body lasts a while, so that no two slices start in the same microsecond.
    const auto pause = [] { std::this_thread::sleep_for(std::chrono::microseconds(200)); };
    context.spawn(
        TaskOptions{.name = "before"}, [&](std::span<int> d) { d[0] = 1, pause(); }, write(data));
    TaskPool pool(context);
    for (const char* name : {"member 0", "member 1", "member 2"})
      pool.add(
          TaskOptions{.name = name}, [&](std::span<const int>) { pause(); }, read(data));
    pool.launch();
    context.spawn(
        TaskOptions{.name = "after"}, [&](std::span<int> d) { d[0] = 2, pause(); }, write(data));
    context.wait_all();
  }
  const nlohmann::json trace = load_json(path);
  std::filesystem::remove(path);
  Arrows expected;
  for (const char* member : {"member 0", "member 1", "member 2"}) {
    expected.insert({"before", member});
    expected.insert({member, "after"});
  }
  expected.insert({"before", "after"});  // write after write: the later writer also follows the first
  EXPECT_EQ(arrows_of(trace), expected);
  EXPECT_EQ(trace["otherData"]["pool_arrows_dropped"], 0);
}

// perf.max_task_records bounds the edges with the records: an edge is kept only while both its ends
// may still be recorded. They were all kept, 16 bytes each, though only those between recorded tasks
// are ever drawn: a chain of 20 M tasks on one buffer grew by 250 MB for 16 records.
TEST(Trace, RegressionEdgesOfTasksNotRecordedAreLetGo) {
  const auto path = temp_file("nerve-trace-bounded-edges");
  constexpr int links = 20000;
  constexpr int members = 1000;
  {
    Settings settings = make_settings(2);
    settings.set("perf.trace", path.string());
    settings.set("perf.max_task_records", "16");
    Context context(settings);
    Buffer<long> data(context, 1);
    for (int i = 0; i < links; ++i) context.spawn([](std::span<long> x) { ++x[0]; }, read_write(data));
    TaskPool pool(context);
    for (int i = 0; i < members; ++i) pool.add([](std::span<const long>) {}, read(data));
    pool.launch();
    context.wait_all();
    // The first 16 links are recorded, 15 edges between them; a submission that raced the bound's
    // end may have stored a few more.
    EXPECT_LT(context.impl()->perf->stored_edges(), 100u);
  }
  const nlohmann::json trace = load_json(path);
  std::filesystem::remove(path);
  EXPECT_EQ(trace["otherData"]["tasks_dropped"], links + members - 16);
  EXPECT_EQ(summarise(trace).phases["s"], 15) << "the arrows between recorded tasks are kept";
}

// perf.max_task_records bounds the trace's copy slices too (one event per copy between memory nodes
// grew without end on a long run); the copies beyond are counted, and the stats count them all.
TEST(Trace, CopySlicesAreBoundedWithTheRecords) {
  const auto path = temp_file("nerve-trace-bounded-copies");
  constexpr int round_trips = 3;  // host -> device -> host: two copies each
  std::uint64_t copies = 0;
  {
    Settings settings = make_settings(2);
    settings.set("perf.trace", path.string());
    settings.set("perf.max_task_records", "2");
    Context context(settings);
    context.impl()->add_test_device({});
    Buffer<int> data(context, std::vector<int>(256, 1));
    const Kernel bump = bump_kernel();
    for (int i = 0; i < round_trips; ++i) {
      context.submit(TaskOptions{.device = 1}, bump, read_write(data));
      context.submit(TaskOptions{.device = 0}, bump, read_write(data));
    }
    context.wait_all();
    copies = context.stats().copies;
  }
  const nlohmann::json trace = load_json(path);
  std::filesystem::remove(path);
  ASSERT_GE(copies, 2u * round_trips);
  int copy_slices = 0;
  for (const auto& event : trace["traceEvents"]) copy_slices += event.value("cat", "") == "transfer" ? 1 : 0;
  EXPECT_EQ(copy_slices, 2);
  EXPECT_EQ(trace["otherData"]["transfers_dropped"], copies - 2);
}

// Failures are visible on the timeline: a failed task's slice says so, its cancelled dependent too.
TEST(Trace, SlicesSayHowEachTaskEnded) {
  const auto path = temp_file("nerve-trace-status");
  {
    Settings settings = make_settings(2);
    settings.set("perf.trace", path.string());
    Context context(settings);
    Buffer<int> data(context, std::vector<int>(4, 0));
    context.spawn(TaskOptions{.name = "fine"}, [] {});
    context.spawn(
        TaskOptions{.name = "boom"}, [](std::span<int>) { throw std::runtime_error("injected"); },
        write(data));
    context.spawn(
        TaskOptions{.name = "after-boom"}, [](std::span<const int>) {}, read(data));
    EXPECT_THROW(context.wait_all(), std::runtime_error);
  }
  const TraceSummary summary = summarise(load_json(path));
  std::filesystem::remove(path);
  EXPECT_EQ(summary.task_args.at("fine")["status"], "succeeded");
  EXPECT_EQ(summary.task_args.at("boom")["status"], "failed");
  EXPECT_EQ(summary.task_args.at("after-boom")["status"], "cancelled");
}

TEST(Trace, OffByDefault) {
  Context context(make_settings(2));
  EXPECT_EQ(context.impl()->recorder, nullptr) << "no recording without perf.trace / perf.record_tasks";
  context.spawn([] {});
  context.wait_all();
  EXPECT_FALSE(context.stats().tasks_recorded);
}

// A link named `stem`-link to a file `stem`-target not made yet: {target, link}.
std::pair<std::filesystem::path, std::filesystem::path> link_to_new_file(const std::string& stem) {
  const auto target = temp_file(stem + "-target");
  const auto link = temp_file(stem + "-link");
  std::filesystem::remove(target);
  std::filesystem::remove(link);
  std::filesystem::create_symlink(target, link);
  return {target, link};
}

// A trace path that is a link to a file still to be made writes through the link, which stays a link
// (the writability probe at creation removed the link it had just written through, and the trace
// then replaced it with a plain file).
TEST(Trace, APathThroughALinkKeepsTheLink) {
  const auto [target, link] = link_to_new_file("nerve-trace-link");
  {
    Settings settings = make_settings(1);
    settings.set("perf.trace", link.string());
    Context context(settings);
    context.spawn(TaskOptions{.name = "through-link"}, [] {});
    context.wait_all();
  }
  EXPECT_TRUE(std::filesystem::is_symlink(link)) << "the link was replaced";
  EXPECT_EQ(summarise(load_json(target)).slices_by_name.count("through-link"), 1u);
  std::filesystem::remove(link);
  std::filesystem::remove(target);
}

// Outputs compare by the file they name: a link to a trace file not made yet is that file, so a
// second context naming the file itself writes its own (both wrote one file, the link's claim
// having been on the link's name).
TEST(Trace, ALinkToAFileNotMadeYetClaimsThatFile) {
  const auto [target, link] = link_to_new_file("nerve-trace-claim");
  std::uint64_t second_id = 0;
  {
    Settings through_link = make_settings(1);
    through_link.set("perf.trace", link.string());
    Context first(through_link);
    Settings direct = make_settings(1);
    direct.set("perf.trace", target.string());
    Context second(direct);
    second_id = second.impl()->id;
  }
  const auto own = target.parent_path() /
                   (target.stem().string() + "." + std::to_string(second_id) + target.extension().string());
  EXPECT_TRUE(std::filesystem::exists(own)) << "the second context did not write a file of its own";
  for (const auto& path : {link, target, own}) std::filesystem::remove(path);
}

// Several contexts naming one trace file: the first keeps it, later ones write <stem>.<id><ext>.
TEST(Trace, SeveralContextsNamingOneFileEachWriteTheirOwn) {
  const auto path = temp_file("nerve-trace-several");
  const auto own = [&](std::uint64_t id) {
    return path.parent_path() / (path.stem().string() + "." + std::to_string(id) + path.extension().string());
  };
  const auto names = [](const std::filesystem::path& file) {
    std::set<std::string> found;
    for (const auto& [name, args] : summarise(load_json(file)).task_args) found.insert(name);
    return found;
  };
  std::filesystem::remove(path);
  Settings settings = make_settings(1);
  settings.set("perf.trace", path.string());
  std::uint64_t b_id = 0, c_id = 0, d_id = 0;
  {
    Context a(settings);
    a.spawn(TaskOptions{.name = "in-a"}, [] {});
    a.wait_all();
  }
  {
    Context b(settings);
    b_id = b.impl()->id;
    b.spawn(TaskOptions{.name = "in-b"}, [] {});
    b.wait_all();
  }
  {
    Context c(settings);
    Context d(settings);
    c_id = c.impl()->id;
    d_id = d.impl()->id;
    c.spawn(TaskOptions{.name = "in-c"}, [] {});
    d.spawn(TaskOptions{.name = "in-d"}, [] {});
    c.wait_all();
    d.wait_all();
  }
  EXPECT_EQ(names(path), std::set<std::string>{"in-a"}) << "the first context keeps the named file";
  EXPECT_EQ(names(own(b_id)), std::set<std::string>{"in-b"});
  EXPECT_EQ(names(own(c_id)), std::set<std::string>{"in-c"});
  EXPECT_EQ(names(own(d_id)), std::set<std::string>{"in-d"});
  for (const auto& file : {path, own(b_id), own(c_id), own(d_id)}) std::filesystem::remove(file);
}

}  // namespace
}  // namespace nerve::testing
