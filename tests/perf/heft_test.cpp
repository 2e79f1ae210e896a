// scheduler.policy heft on synthetic costs: kernels whose run time differs per device (a device 10×
// slower for one kernel, 10× faster for another), data resident on one node behind a slow bus, and an
// unbalanced mixed graph where heft must beat eager and locality_aware_stealing on makespan and
// bytes moved. Models are trained first with device hints (hinted calls are modelled but not placed
// by heft), each test in a fresh perf.model_dir. Plus perf.decision_log and trace annotations.
#include "sched/heft.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "nerve/opencl.hpp"

#include "backend/opencl_support.hpp"
#include "backend/test_device.hpp"
#include "perf/history_model.hpp"
#include "perf/perf_test.hpp"

namespace nerve::testing {
namespace {

using namespace std::chrono_literals;
using detail::TestDeviceOptions;

constexpr std::size_t tile_floats = 4096;  // 16 KiB buffers

Settings policy_settings(const std::string& policy, const std::filesystem::path& models) {
  Settings settings = make_settings(2);
  settings.set("scheduler.policy", policy);
  settings.set("perf.model_dir", models.string());
  return settings;
}

// synthetic(): sleeps for a time that depends on where it runs, then writes its last access;
// counts its calls on the device in `device_calls` when given.
Kernel synthetic(const std::string& name, std::chrono::microseconds on_cpu,
                 std::chrono::microseconds on_device,
                 std::shared_ptr<std::atomic<int>> device_calls = nullptr) {
  Kernel kernel(name);
  kernel.cpu([on_cpu, on_device, device_calls](const KernelArgs& args) {
    if (device_calls != nullptr && args.device() != 0) device_calls->fetch_add(1);
    std::this_thread::sleep_for(args.device() == 0 ? on_cpu : on_device);
    args.span<float>(args.access_count() - 1)[0] = 1.0f;
  });
  return kernel;
}

// train(): ten calls on each of the CPU workers and device 1, with the footprint used later.
void train(Context& context, const Kernel& kernel, std::size_t output_floats = tile_floats) {
  std::vector<Buffer<float>> buffers;
  for (int device = 0; device < 2; ++device) {
    for (int i = 0; i < 10; ++i) {
      buffers.emplace_back(context, std::vector<float>(tile_floats, 1.0f));
      buffers.emplace_back(context, output_floats);
      context.spawn(TaskOptions{.device = device}, kernel, read(buffers[buffers.size() - 2]),
                    write(buffers.back()));
    }
  }
  context.wait_all();
}

std::vector<nlohmann::json> read_lines(const std::filesystem::path& path) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

// make_candidate(): a made-up candidate for the placer alone; modelled once it has samples,
// calibrating below 10 of them.
detail::HeftCandidate make_candidate(int device, unsigned units, double run, std::uint64_t samples,
                                     double transfer = 0, unsigned host_cores = 0) {
  detail::HeftCandidate c;
  c.device = device;
  c.units = units;
  c.modelled = samples > 0;
  c.calibrating = samples < detail::HistoryModels::calibration_samples;
  c.run_ns = run;
  c.samples = samples;
  c.transfer_ns = transfer;
  c.host_cores = host_cores;
  return c;
}

// PretendRecords: distinct addresses that stand for task records (the placer only keys on them).
struct PretendRecords {
  int slots[8] = {};
  const detail::TaskRecord* operator()(int i) const {
    return reinterpret_cast<const detail::TaskRecord*>(&slots[i]);
  }
};

// Decisions are numbered, and timed, where they are made, under the placer's lock: the decision log
// numbered its lines as they were written, after the lock, so that with two threads placing at once
// decision 146 was made 94 µs before decision 145.
TEST(HeftPlacer, DecisionsAreNumberedAndTimedInTheOrderTheyAreMade) {
  detail::HeftPlacer placer(2);
  const PretendRecords record;
  constexpr int per_thread = 4;
  std::vector<detail::HeftDecision> made[2];
  const auto place = [&](int thread) {
    for (int i = 0; i < per_thread; ++i) {
      std::vector<detail::HeftCandidate> c = {make_candidate(0, 2, 1000, 20, 0, 0),
                                              make_candidate(1, 1, 1000, 20, 0, 0)};
      made[thread].push_back(placer.decide(record(thread * per_thread + i), c, 0));
    }
  };
  std::thread other(place, 1);
  place(0);
  other.join();
  std::vector<detail::HeftDecision> all;
  for (const auto& each : made) all.insert(all.end(), each.begin(), each.end());
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.number < b.number; });
  for (std::size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(all[i].number, i + 1);
    if (i > 0) EXPECT_LE(all[i - 1].decided_ns, all[i].decided_ns) << "decision " << all[i].number;
  }
}

// The placer alone, on made-up candidates: finish = max(free, data) + run; calibration rules.
TEST(HeftPlacer, EarliestFinishCalibrationAndDominance) {
  detail::HeftPlacer placer(3);
  const auto candidate = [](int device, unsigned units, double run, std::uint64_t samples,
                            double transfer = 0) {
    return make_candidate(device, units, run, samples, transfer);
  };
  const PretendRecords record;
  // Calibrated: the transfer counts, overlapped with the queue.
  std::vector<detail::HeftCandidate> c = {candidate(0, 2, 1000, 20, 5000), candidate(1, 1, 3000, 20)};
  detail::HeftDecision d = placer.decide(record(0), c, 0);
  EXPECT_EQ(d.mode, detail::HeftMode::earliest);
  EXPECT_EQ(c[d.chosen].device, 1) << "6000 ns on the CPU (data 5000 + run 1000) vs 3000 on device 1";
  EXPECT_DOUBLE_EQ(placer.outstanding_ns(1), 3000.0);
  // Device 1 is now busy for 3000 ns: the next call would finish there at 6000.
  c = {candidate(0, 2, 1000, 20, 4000), candidate(1, 1, 3000, 20)};
  d = placer.decide(record(1), c, 0);
  EXPECT_EQ(c[d.chosen].device, 0) << "5000 on the CPU vs 3000 + 3000 on the busy device";
  EXPECT_DOUBLE_EQ(c[1].ready_ns, 3000.0);
  placer.done(placer.take(record(0)));
  placer.done(placer.take(record(1)));
  EXPECT_DOUBLE_EQ(placer.outstanding_ns(1), 0.0);
  // A calibrating device 50x slower is dominated: the calibrated CPU decides, no calibration call.
  c = {candidate(0, 2, 1000, 20), candidate(1, 1, 50000, 2)};
  d = placer.decide(record(2), c, 1);
  EXPECT_EQ(d.mode, detail::HeftMode::earliest);
  EXPECT_EQ(c[d.chosen].device, 0);
  EXPECT_TRUE(c[1].dominated);
  placer.done(placer.take(record(2)));
  // One sample is not enough to judge (a first call is often cold): the slow-looking device learns.
  c = {candidate(0, 2, 1000, 20), candidate(1, 1, 50000, 1)};
  d = placer.decide(record(2), c, 1);
  EXPECT_FALSE(c[1].dominated);
  EXPECT_EQ(d.mode, detail::HeftMode::calibrating);
  EXPECT_EQ(c[d.chosen].device, 1);
  placer.done(placer.take(record(2)));
  // A calibrating device that might win (3x faster so far) still learns while it is free...
  c = {candidate(0, 2, 5000, 20), candidate(1, 1, 1500, 2)};
  d = placer.decide(record(3), c, 0);
  EXPECT_EQ(d.mode, detail::HeftMode::calibrating);
  EXPECT_EQ(c[d.chosen].device, 1);
  // ...and while it is busy (but could still win), the call falls back to the locality-aware choice.
  c = {candidate(0, 2, 5000, 20), candidate(1, 1, 1500, 2)};
  d = placer.decide(record(4), c, 0);
  EXPECT_EQ(d.mode, detail::HeftMode::locality);
  EXPECT_EQ(c[d.chosen].device, 0);
  EXPECT_FALSE(detail::HeftPlacer::reason(d, c).empty());
  placer.done(placer.take(record(3)));
  placer.done(placer.take(record(4)));
  EXPECT_EQ(placer.take(record(5)).device, -1) << "never placed";
}

// With no stored models every device calibrates at once: a device far slower than another's early
// samples is ruled out from its second sample on, without waiting for the other's calibration.
TEST(HeftPlacer, ASlowDeviceLosesToAnotherStillCalibrating) {
  const PretendRecords record;
  detail::HeftPlacer placer(3);
  // The CPU: 2 samples of 20 ms; devices 1 and 2: 2 samples of 100 us, device 1 free.
  std::vector<detail::HeftCandidate> c = {make_candidate(0, 2, 20e6, 2), make_candidate(1, 1, 100e3, 2),
                                          make_candidate(2, 1, 100e3, 3)};
  detail::HeftDecision d = placer.decide(record(0), c, 0);
  EXPECT_TRUE(c[0].dominated) << "10 ms at twice its speed, after 200 us at half the devices' speed";
  EXPECT_FALSE(c[1].dominated);
  EXPECT_FALSE(c[2].dominated);
  EXPECT_EQ(d.mode, detail::HeftMode::calibrating);
  EXPECT_EQ(c[d.chosen].device, 1) << "the free device with fewest samples learns";
  d = placer.decide(record(1), c, 0);
  EXPECT_EQ(c[d.chosen].device, 2) << "device 2 is still free: it learns too";
  // Both devices busy with a call each: the fallback skips the CPU although it holds the input.
  c = {make_candidate(0, 2, 20e6, 2), make_candidate(1, 1, 100e3, 2), make_candidate(2, 1, 100e3, 3)};
  c[0].local_bytes = 1 << 20;
  c[2].local_bytes = 4096;
  d = placer.decide(record(2), c, 0);
  EXPECT_TRUE(c[0].dominated);
  EXPECT_EQ(d.mode, detail::HeftMode::locality);
  EXPECT_EQ(c[d.chosen].device, 2) << "most input among the devices that might win";
  EXPECT_NE(detail::HeftPlacer::reason(d, c).find("not too slow"), std::string::npos);
  // Only 4x slower than device 1 so far: not ruled out (its figures are early ones); free, it learns.
  c = {make_candidate(0, 2, 400e3, 2), make_candidate(1, 1, 100e3, 2)};
  d = placer.decide(record(3), c, 1);
  EXPECT_FALSE(c[0].dominated);
  EXPECT_EQ(d.mode, detail::HeftMode::calibrating);
  EXPECT_EQ(c[d.chosen].device, 0);
  // One sample of the fast device is not enough to rule the slow one out.
  c = {make_candidate(0, 2, 20e6, 2), make_candidate(1, 1, 100e3, 1)};
  placer.decide(record(4), c, 1);
  EXPECT_FALSE(c[0].dominated);
  for (int i = 0; i < 5; ++i) placer.done(placer.take(record(i)));
}

// A device computing on the host's two cores (PoCL's CPU device) is no extra capacity: while the
// CPU workers have a backlog, its calls wait for the same cores, and its work delays theirs.
TEST(HeftPlacer, ADeviceOnTheHostsCoresCompetesWithTheWorkers) {
  const auto candidate = [](int device, unsigned units, double run, unsigned host_cores = 0) {
    return make_candidate(device, units, run, 20, 0, host_cores);
  };
  const PretendRecords record;
  for (const bool shared : {false, true}) {
    detail::HeftPlacer placer(2, 2);
    // Four 40 us calls only the CPU workers run: an 80 us backlog on each of the two cores.
    for (int i = 0; i < 4; ++i) {
      std::vector<detail::HeftCandidate> cpu_only = {candidate(0, 2, 40000)};
      placer.decide(record(i), cpu_only, 0);
    }
    // A call taking 30 us on the device (both cores), 40 us on one worker.
    std::vector<detail::HeftCandidate> c = {candidate(0, 2, 40000), candidate(1, 1, 30000, shared ? 2 : 0)};
    const detail::HeftDecision d = placer.decide(record(4), c, 0);
    EXPECT_DOUBLE_EQ(c[0].finish_ns, 120000.0);
    if (!shared) {
      EXPECT_EQ(c[d.chosen].device, 1) << "a separate device is free: done at 30 us";
      EXPECT_DOUBLE_EQ(c[1].finish_ns, 30000.0);
      continue;
    }
    // The cores must work through 160 us of backlog and the call's 60 us of core time: 110 us.
    EXPECT_DOUBLE_EQ(c[1].finish_ns, 110000.0);
    EXPECT_EQ(c[d.chosen].device, 1);
    // It is now 60 us of core time more for the workers: the next call finishes at 150 us there.
    std::vector<detail::HeftCandidate> next = {candidate(0, 2, 40000), candidate(1, 1, 30000, 2)};
    const detail::HeftDecision e = placer.decide(record(5), next, 0);
    EXPECT_DOUBLE_EQ(next[0].ready_ns, 110000.0);
    EXPECT_DOUBLE_EQ(next[0].finish_ns, 150000.0);
    EXPECT_DOUBLE_EQ(next[1].finish_ns, 140000.0) << "(160 + 60 + 60) / 2";
    EXPECT_EQ(next[e.chosen].device, 1);
    // A device that is not faster per call than a worker loses once its core time shows.
    std::vector<detail::HeftCandidate> slow = {candidate(0, 2, 40000), candidate(1, 1, 45000, 2)};
    const detail::HeftDecision f = placer.decide(record(6), slow, 0);
    EXPECT_EQ(slow[f.chosen].device, 0) << slow[0].finish_ns << " vs " << slow[1].finish_ns;
  }
}

TEST(Heft, EachKernelGoesToTheDeviceThatFinishesItFirst) {
  const auto models = fresh_directory("nerve-heft-choice");
  const auto log = temp_file("nerve-heft-choice-log");
  {
    Settings settings = policy_settings("heft", models);
    settings.set("perf.decision_log", log.string());
    Context context(settings);
    context.impl()->add_test_device({});
    // Milliseconds apart, not microseconds: on a loaded 2-core CI machine under ThreadSanitizer a
    // thread hand-off alone took 2-4 ms, in the device's 300 us runs and in every bus calibration copy.
    const Kernel cpu_fast = synthetic("heft_cpu_fast", 1ms, 30ms);        // device 30× slower
    const Kernel device_fast = synthetic("heft_device_fast", 30ms, 1ms);  // device 30× faster
    train(context, cpu_fast);
    train(context, device_fast);
    for (int i = 0; i < 3; ++i) {
      Buffer<float> in(context, std::vector<float>(tile_floats, 1.0f)), out(context, tile_floats);
      context.submit(cpu_fast, read(in), write(out)).wait();
      context.submit(device_fast, read(in), write(out)).wait();
    }
    context.wait_all();
    expect_no_leaks(context);
  }
  const auto lines = read_lines(log);
  ASSERT_EQ(lines.size(), 6u) << "one line per heft decision (hinted training calls are not decided)";
  for (const nlohmann::json& line : lines) {
    EXPECT_EQ(line["mode"], "earliest_finish") << line.dump();
    EXPECT_EQ(line["chosen"], line["kernel"] == "heft_cpu_fast" ? 0 : 1) << line.dump();
    ASSERT_EQ(line["candidates"].size(), 2u);
  }
  std::filesystem::remove_all(models);
  std::filesystem::remove(log);
}

TEST(Heft, DataBehindASlowBusStaysWhereItIs) {
  const auto models = fresh_directory("nerve-heft-resident");
  const auto log = temp_file("nerve-heft-resident-log");
  {
    Settings settings = policy_settings("heft", models);
    settings.set("perf.decision_log", log.string());
    Context context(settings);
    // Every copy to or from the device costs 30 ms: far more than the device's 2× slower run (and
    // than a loaded machine's few ms of scheduling noise).
    context.impl()->add_test_device(TestDeviceOptions{.copy_latency = 30ms});
    const Kernel even = synthetic("heft_even", 2ms, 4ms);
    train(context, even);
    Buffer<float> resident(context, tile_floats), on_host(context, std::vector<float>(tile_floats, 1.0f));
    Buffer<float> out(context, tile_floats);
    context
        .submit(
            TaskOptions{.device = 1}, [](std::span<float> r) { r[0] = 2.0f; }, write(resident))
        .wait();
    context.submit(even, read(resident), write(out)).wait();
    context.submit(even, read(on_host), write(out)).wait();
    context.wait_all();
  }
  const auto lines = read_lines(log);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["chosen"], 1) << "its input is on the device: " << lines[0].dump();
  const nlohmann::json& cpu = lines[0]["candidates"][0];
  EXPECT_EQ(cpu["device"], 0);
  EXPECT_EQ(cpu["transfer_bytes"], tile_floats * sizeof(float));
  EXPECT_GT(cpu["transfer_ns"].get<double>(), 25.0e6) << "the measured bus latency";
  EXPECT_EQ(lines[0]["candidates"][1]["transfer_bytes"], 0);
  EXPECT_EQ(lines[1]["chosen"], 0) << "its input is on the host: " << lines[1].dump();
  std::filesystem::remove_all(models);
  std::filesystem::remove(log);
}

struct GraphRun {
  double makespan_ms = 0;
  double modelled_ms = 0;
  std::uint64_t bytes = 0;
  std::uint64_t device_tasks = 0;
  int cpu_fast_on_device = 0;
};

// An unbalanced mixed graph whose inputs start on the device (as after a device phase): 8 calls of a
// kernel 10× faster there (16 KiB in, 16 KiB out) and 8 of a kernel 10× slower there that expands
// its 16 KiB input into 64 KiB; the application then reads every output on the host.
// modelled_ms is the makespan the placements imply on these costs (the device's queue, or the CPU
// calls shared by the two workers, whichever is longer): it depends only on where each call ran, so
// a loaded machine (CI runs this under ThreadSanitizer) cannot change it; the wall time is reported.
GraphRun run_mixed_graph(const std::string& policy, const std::filesystem::path& models) {
  Context context(policy_settings(policy, models));
  context.impl()->add_test_device({});
  // Scaled so that a few ms of scheduling noise (a loaded machine under ThreadSanitizer, in the
  // bus calibration's copies too) cannot reverse a placement.
  constexpr auto device_fast_cpu = 10000us, device_fast_device = 1000us;
  constexpr auto cpu_fast_cpu = 1500us, cpu_fast_device = 15000us;
  const auto device_fast_there = std::make_shared<std::atomic<int>>(0);
  const auto cpu_fast_there = std::make_shared<std::atomic<int>>(0);
  const Kernel device_fast =
      synthetic("heft_mixed_device_fast", device_fast_cpu, device_fast_device, device_fast_there);
  const Kernel cpu_fast = synthetic("heft_mixed_cpu_fast", cpu_fast_cpu, cpu_fast_device, cpu_fast_there);
  if (policy == "heft") {
    train(context, device_fast);
    train(context, cpu_fast, 4 * tile_floats);
  }
  constexpr int per_kind = 8;
  std::vector<Buffer<float>> inputs, outputs;
  for (int i = 0; i < 2 * per_kind; ++i) {
    inputs.emplace_back(context, tile_floats);
    outputs.emplace_back(context, i < per_kind ? tile_floats : 4 * tile_floats);
    context.spawn(
        TaskOptions{.device = 1}, [](std::span<float> x) { std::fill(x.begin(), x.end(), 1.0f); },
        write(inputs.back()));
  }
  context.wait_all();
  // heft measures the bus on its first placement: done here, so that the graph's time excludes it.
  if (policy == "heft") context.impl()->bus->ensure_calibrated(context.impl()->memory_nodes());
  const ContextStats before = context.stats();
  device_fast_there->store(0);
  cpu_fast_there->store(0);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < per_kind; ++i) {
    context.spawn(device_fast, read(inputs[i]), write(outputs[i]));
    context.spawn(cpu_fast, read(inputs[per_kind + i]), write(outputs[per_kind + i]));
  }
  context.wait_all();
  for (const auto& output : outputs) EXPECT_EQ(output.map_read()[0], 1.0f);
  GraphRun run;
  run.makespan_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  const ContextStats after = context.stats();
  run.bytes = after.bytes_transferred - before.bytes_transferred;
  run.device_tasks = after.devices.at(1).tasks - before.devices.at(1).tasks;
  const int fast_there = device_fast_there->load(), slow_there = cpu_fast_there->load();
  run.cpu_fast_on_device = slow_there;
  const auto on_device = fast_there * device_fast_device + slow_there * cpu_fast_device;
  const auto on_cpu = (per_kind - fast_there) * device_fast_cpu + (per_kind - slow_there) * cpu_fast_cpu;
  run.modelled_ms = std::max(on_device.count(), on_cpu.count() / 2) / 1000.0;
  return run;
}

TEST(Heft, BeatsEagerAndLocalityOnAnUnbalancedMixedGraph) {
  const auto models = fresh_directory("nerve-heft-mixed");
  const GraphRun heft = run_mixed_graph("heft", models);
  const GraphRun eager = run_mixed_graph("eager", models);
  const GraphRun locality = run_mixed_graph("locality_aware_stealing", models);
  RecordProperty("heft_ms", std::to_string(heft.makespan_ms));
  for (const auto& [name, run] : {std::pair{"heft", heft}, {"eager", eager}, {"locality", locality}})
    std::printf("mixed graph, %s: modelled %.1f ms, wall %.1f ms, %llu B, %llu calls on the device\n", name,
                run.modelled_ms, run.makespan_ms, static_cast<unsigned long long>(run.bytes),
                static_cast<unsigned long long>(run.device_tasks));
  // Locality-first keeps the calls on the device (128 ms there); heft splits them (8 ms).
  EXPECT_LT(heft.modelled_ms, 0.5 * eager.modelled_ms);
  EXPECT_LT(heft.modelled_ms, 0.5 * locality.modelled_ms);
  // (A loaded machine stretches the 1.5 ms sleeps the CPU model learns, so heft may send one CPU-
  // friendly call to the device when the workers' queue looks long: the bounds above still hold.)
  EXPECT_LT(heft.cpu_fast_on_device, 4) << "most calls 10x slower on the device stay on the CPU";
  // heft copies the inputs it moves to the host (16 KiB each) instead of expanded outputs back (64 KiB).
  EXPECT_LT(heft.bytes, eager.bytes);
  EXPECT_LT(heft.bytes, locality.bytes);
  std::filesystem::remove_all(models);
}

TEST(Heft, CalibratesFirstThenFallsBackToLocality) {
  const auto models = fresh_directory("nerve-heft-calibrating");
  const auto log = temp_file("nerve-heft-calibrating-log");
  {
    Settings settings = policy_settings("heft", models);
    settings.set("perf.decision_log", log.string());
    Context context(settings);
    context.impl()->add_test_device({});
    const Kernel kernel = synthetic("heft_new_kernel", 200us, 200us);
    std::vector<Buffer<float>> buffers;
    for (int i = 0; i < 12; ++i) {
      buffers.emplace_back(context, std::vector<float>(tile_floats, 1.0f));
      context.spawn(kernel, read_write(buffers.back()));
    }
    context.wait_all();
  }
  const auto lines = read_lines(log);
  ASSERT_EQ(lines.size(), 12u);
  EXPECT_EQ(lines[0]["mode"], "calibrating") << "no model yet: a free device learns it";
  std::size_t calibrating = 0, locality = 0;
  for (const auto& line : lines) {
    calibrating += line["mode"] == "calibrating";
    locality += line["mode"] == "locality";
    EXPECT_NE(line["reason"].get<std::string>(), "");
    if (line["mode"] != "locality") continue;
    // The inputs are on the host, so the fallback keeps the call there, unless the host's samples
    // so far (a loaded machine stretches the 200 us sleeps) show it too slow to win even at twice
    // that speed: then the fallback takes a device not too slow.
    const auto& host = line["candidates"][0];
    ASSERT_EQ(host["device"], 0);
    if (!host["dominated"].get<bool>()) {
      EXPECT_EQ(line["chosen"], 0) << "the inputs are on the host: " << line.dump();
    } else {
      for (const auto& candidate : line["candidates"])
        if (candidate["device"] == line["chosen"])
          EXPECT_FALSE(candidate["dominated"].get<bool>()) << line.dump();
    }
  }
  EXPECT_EQ(calibrating + locality, 12u) << "no model is calibrated after 12 calls over 2 devices";
  std::filesystem::remove_all(models);
  std::filesystem::remove(log);
}

TEST(Heft, TraceSlicesCarryThePlacement) {
  const auto models = fresh_directory("nerve-heft-trace");
  const auto trace = temp_file("nerve-heft-trace");
  {
    Settings settings = policy_settings("heft", models);
    settings.set("perf.trace", trace.string());
    Context context(settings);
    context.impl()->add_test_device({});
    const Kernel kernel = synthetic("heft_traced", 100us, 100us);
    Buffer<float> data(context, std::vector<float>(tile_floats, 1.0f));
    for (int i = 0; i < 3; ++i) context.spawn(kernel, read_write(data));
    context.wait_all();
  }
  const nlohmann::json json = load_json(trace);
  int annotated = 0;
  for (const auto& event : json["traceEvents"]) {
    if (event.value("ph", "") != "X" || event.value("cat", "") != "task") continue;
    ASSERT_TRUE(event["args"].contains("placement")) << event.dump();
    const auto& placement = event["args"]["placement"];
    EXPECT_EQ(placement["schema"], "nerve.decision/1");
    EXPECT_EQ(placement["task"], event["args"]["id"]);
    EXPECT_EQ(placement["chosen"], event["args"]["device"]);
    EXPECT_EQ(placement["candidates"].size(), 2u);
    ++annotated;
  }
  EXPECT_EQ(annotated, 3);
  std::filesystem::remove_all(models);
  std::filesystem::remove(trace);
}

// The decisions kept for the trace's slices are as many as the records, at most: those of tasks
// perf.max_task_records leaves out go (they were kept, 4 KB each, for every call of the run). Without a
// trace none is kept: nothing else reads them (they were, under perf.record_tasks alone).
TEST(Heft, TraceDecisionsAreKeptOnlyForRecordedTasks) {
  const auto models = fresh_directory("nerve-heft-trace-bound");
  const auto trace = temp_file("nerve-heft-trace-bound");
  {
    Settings settings = policy_settings("heft", models);
    settings.set("perf.trace", trace.string());
    settings.set("perf.max_task_records", "5");
    Context context(settings);
    context.impl()->add_test_device({});
    const Kernel kernel = synthetic("heft_trace_bound", 10us, 10us);
    std::vector<Buffer<float>> buffers;
    for (int i = 0; i < 60; ++i) {
      buffers.emplace_back(context, std::vector<float>(tile_floats, 1.0f));
      context.spawn(kernel, read_write(buffers.back()));
    }
    context.wait_all();
    ASSERT_NE(context.impl()->decisions, nullptr);
    EXPECT_LE(context.impl()->decisions->annotations_kept(), 5u);
  }
  int annotated = 0;
  const nlohmann::json json = load_json(trace);
  for (const auto& event : json["traceEvents"]) {
    if (event.value("ph", "") != "X" || event.value("cat", "") != "task") continue;
    EXPECT_TRUE(event["args"].contains("placement")) << event.dump();
    ++annotated;
  }
  EXPECT_EQ(annotated, 5) << "each recorded task's slice still says why it ran there";
  {
    Settings settings = policy_settings("heft", models);
    settings.set("perf.record_tasks", "true");
    Context context(settings);
    EXPECT_EQ(context.impl()->decisions, nullptr) << "records without a trace keep no decisions";
  }
  std::filesystem::remove_all(models);
  std::filesystem::remove(trace);
}

// Only devices implementing the kernel are candidates: an OpenCL-only kernel never goes to the CPU
// workers, a CPU-only kernel never to the OpenCL device.
TEST(Heft, OnlyDevicesImplementingTheKernelAreCandidates) {
  NERVE_SKIP_WITHOUT_OPENCL();
  const auto models = fresh_directory("nerve-heft-kinds");
  const auto log = temp_file("nerve-heft-kinds-log");
  {
    Settings settings = opencl_settings(2);
    settings.set("scheduler.policy", "heft");
    settings.set("perf.model_dir", models.string());
    settings.set("perf.decision_log", log.string());
    Context context(settings);
    Kernel device_only("heft_opencl_only");
    opencl::attach(device_only, "__kernel void fill(__global float* x, float v) { x[get_global_id(0)] = v; }",
                   "fill");
    const Kernel cpu_only = synthetic("heft_cpu_only_kind", 10us, 10us);
    Buffer<float> data(context, std::vector<float>(tile_floats, 1.0f)), out(context, tile_floats);
    for (int i = 0; i < 3; ++i) {
      context.spawn(device_only, write(data), value(2.0f));
      context.spawn(cpu_only, read(data), write(out));
    }
    context.wait_all();
    EXPECT_EQ(data.map_read()[0], 2.0f);
  }
  const auto lines = read_lines(log);
  ASSERT_EQ(lines.size(), 6u);
  for (const auto& line : lines) {
    EXPECT_EQ(line["mode"], "only") << line.dump();
    ASSERT_EQ(line["candidates"].size(), 1u);
    EXPECT_EQ(line["chosen"], line["kernel"] == "heft_opencl_only" ? 1 : 0) << line.dump();
  }
  std::filesystem::remove_all(models);
  std::filesystem::remove(log);
}

// A device whose memory could never hold the call's buffers (the whole of each: a replica is the
// whole buffer) is no candidate, however much of the input it holds: the call would fail there with
// out_of_memory. heft sends it to the CPU workers and says why the device was left out.
TEST(Heft, ADeviceTooSmallForTheCallsBuffersIsNoCandidate) {
  const auto models = fresh_directory("nerve-heft-too-small");
  const auto log = temp_file("nerve-heft-too-small-log");
  {
    Settings settings = policy_settings("heft", models);
    settings.set("perf.decision_log", log.string());
    Context context(settings);
    context.impl()->add_test_device(TestDeviceOptions{.memory_limit = 3 * tile_floats * sizeof(float)});
    Buffer<float> first(context, tile_floats), second(context, tile_floats);
    Buffer<float> on_host(context, std::vector<float>(tile_floats, 1.0f)), out(context, 1);
    for (Buffer<float>* each : {&first, &second}) {
      context.spawn(
          TaskOptions{.device = 1}, [](std::span<float> d) { std::fill(d.begin(), d.end(), 2.0f); },
          write(*each));
    }
    context.wait_all();
    const Kernel sum = synthetic("heft_too_small", 1ms, 1ms);
    EXPECT_NO_THROW(context.submit(sum, read(first), read(second), read(on_host), write(out)).wait());
    EXPECT_EQ(out.to_vector()[0], 1.0f);
  }
  const auto lines = read_lines(log);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["mode"], "only") << lines[0].dump();
  EXPECT_EQ(lines[0]["chosen"], 0) << lines[0].dump();
  EXPECT_EQ(lines[0]["candidates"].size(), 1u) << lines[0].dump();
  EXPECT_NE(
      lines[0]["reason"].get<std::string>().find(
          "device 1 implements the kernel but is left out: its memory (49152 bytes) is smaller than the "
          "whole buffers the call touches (49156 bytes)"),
      std::string::npos)
      << lines[0].dump();
  std::filesystem::remove_all(models);
  std::filesystem::remove(log);
}

TEST(Heft, IntegerPrioritiesOrderReadyTasks) {
  const auto models = fresh_directory("nerve-heft-priority");
  Settings settings = policy_settings("heft", models);
  settings.set("parallel.thread_pool_size", "1");  // only the application thread runs tasks: no race
  Context context(settings);
  context.impl()->add_test_device({});
  std::vector<int> order;
  constexpr int count = 24;
  for (int i = 0; i < count; ++i) {
    const int priority = 1 + (i * 7) % count;  // 1..24, shuffled
    context.spawn(TaskOptions{.priority = priority}, [&order, priority] { order.push_back(priority); });
  }
  context.wait_all();
  ASSERT_EQ(order.size(), static_cast<std::size_t>(count));
  EXPECT_TRUE(std::is_sorted(order.rbegin(), order.rend())) << "highest integer priority first";
  std::filesystem::remove_all(models);
}

TEST(Heft, DecisionLogOnlyUnderHeftAndHeftRunsWithoutDevices) {
  const auto models = fresh_directory("nerve-heft-nodevices");
  const auto log = temp_file("nerve-heft-nodevices-log");
  {
    Settings settings = policy_settings("locality_aware_stealing", models);
    settings.set("perf.decision_log", log.string());
    ::testing::internal::CaptureStderr();
    {
      Context context(settings);
      EXPECT_EQ(context.impl()->decisions, nullptr) << "other policies make no model-based decisions";
    }
    const std::string logged = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(logged.find("has no effect under scheduler.policy locality_aware_stealing"), std::string::npos)
        << "the file asked for and never written is said at start: " << logged;
  }
  EXPECT_FALSE(std::filesystem::exists(log));
  {
    Settings settings = policy_settings("heft", models);
    settings.set("perf.decision_log", log.string());
    Context context(settings);
    EXPECT_EQ(context.impl()->scheduler.policy(), SchedulerPolicy::heft);
    EXPECT_NE(context.impl()->perf->models(), nullptr) << "heft learns from the history models";
    const Kernel kernel = synthetic("heft_cpu_only", 10us, 10us);
    Buffer<int> counter(context, std::vector<int>{0});
    for (int i = 0; i < 50; ++i) context.spawn([](std::span<int> c) { ++c[0]; }, read_write(counter));
    Buffer<float> data(context, tile_floats);
    context.spawn(kernel, write(data));
    context.wait_all();
    EXPECT_EQ(counter.map_read()[0], 50);
  }
  EXPECT_TRUE(std::filesystem::exists(log)) << "created under heft";
  EXPECT_TRUE(read_lines(log).empty()) << "without devices there is nothing to decide";
  // A log that cannot be created is a configuration error naming the key and the system's reason.
  {
    Settings settings = policy_settings("heft", models);
    settings.set("perf.decision_log", "/proc/no/such/dir/decisions.jsonl");
    try {
      Context context(settings);
      ADD_FAILURE() << "the decision log cannot be created";
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::invalid_config);
      EXPECT_NE(std::string(error.what()).find("perf.decision_log"), std::string::npos) << error.what();
      EXPECT_EQ(std::string(error.what()).rfind("api", 0), 0u) << "where the key was set: " << error.what();
      EXPECT_NE(std::string(error.what()).find("No such file or directory"), std::string::npos)
          << error.what();
    }
  }
  std::filesystem::remove_all(models);
  std::filesystem::remove(log);
}

// A call on the CPU workers gives its predicted time back before its successors are placed, as a
// device's call does: the next call of a chain sees the workers free. (It was given back only after
// them, so the CPU looked busy for another 1 ms and the call went to a device 25 % slower.)
TEST(Heft, ACpuCallFreesTheWorkersBeforeItsSuccessorIsPlaced) {
  const auto models = fresh_directory("nerve-heft-cpu-credit");
  const auto log = temp_file("nerve-heft-cpu-credit-log");
  const auto entry = [](const char* device, double mean) {
    return nlohmann::json{{"device", device}, {"footprint", tile_floats * sizeof(float)},
                          {"samples", 100},   {"mean_ns", mean},
                          {"m2", 0.0},        {"recent_ns", mean},
                          {"outliers", 0},    {"recalibrations", 0}};
  };
  std::filesystem::create_directories(models);
  std::ofstream(models / "heft_chain.json")
      << nlohmann::json{{"schema", "nerve.perfmodel/1"},
                        {"kernel", "heft_chain"},
                        {"entries", {entry("cpu", 2e6), entry("device:1", 2.5e6)}}}
             .dump();
  {
    Settings settings = policy_settings("heft", models);
    settings.set("perf.decision_log", log.string());
    Context context(settings);
    context.impl()->add_test_device({});
    const Kernel kernel = synthetic("heft_chain", 2000us, 2500us);
    Buffer<float> data(context, std::vector<float>(tile_floats, 1.0f));
    context.spawn(kernel, read_write(data));
    context.spawn(kernel, read_write(data));  // placed when the first ends
    context.wait_all();
  }
  const auto lines = read_lines(log);
  ASSERT_EQ(lines.size(), 2u);
  for (const auto& decision : lines) {
    EXPECT_EQ(decision["chosen"], 0) << decision.dump();
    for (const auto& candidate : decision["candidates"]) {
      if (candidate["device"] == 0)
        EXPECT_EQ(candidate["ready_ns"], 0.0) << "nothing runs: " << decision.dump();
    }
  }
  std::filesystem::remove_all(models);
  std::filesystem::remove(log);
}

// A context whose construction fails after it claimed its outputs (here its perf.decision_log cannot
// be created) gives them back: the next context naming the same trace writes that file, not
// `<stem>.<id>.json` beside it "taken" by a context that never existed.
TEST(Heft, AContextThatFailedToConstructHoldsNoOutputFile) {
  const auto models = fresh_directory("nerve-heft-failed-claims");
  const auto trace = temp_file("nerve-heft-failed-claims");
  {
    Settings settings = policy_settings("heft", models);
    settings.set("perf.trace", trace.string());
    settings.set("perf.decision_log", "/proc/no/such/dir/decisions.jsonl");
    EXPECT_THROW(Context context(settings), Error);
  }
  {
    Settings settings = policy_settings("heft", models);
    settings.set("perf.trace", trace.string());
    ::testing::internal::CaptureStderr();
    {
      Context context(settings);
      context.spawn([] {});
      context.wait_all();
    }
    const std::string logged = ::testing::internal::GetCapturedStderr();
    EXPECT_EQ(logged.find("perf.trace"), std::string::npos) << logged;
  }
  EXPECT_TRUE(load_json(trace).contains("traceEvents")) << "the file asked for was written";
  std::filesystem::remove_all(models);
  std::filesystem::remove(trace);
}

// Two contexts naming one decision log, and a context whose trace names its log, never share a file:
// each later claim writes <stem>.<context id><ext>, so every line is one context's, whole, and
// numbered from 1 (two live contexts used to truncate and interleave one file, tearing lines).
TEST(Heft, ContextsNamingOneDecisionLogEachWriteTheirOwn) {
  const auto models = fresh_directory("nerve-heft-shared-log");
  const auto log = temp_file("nerve-heft-shared-log");
  const auto own = [&](std::uint64_t id) {
    return log.parent_path() / (log.stem().string() + "." + std::to_string(id) + log.extension().string());
  };
  std::uint64_t b_id = 0;
  {
    Settings settings = policy_settings("heft", models);
    settings.set("perf.decision_log", log.string());
    Context a(settings);
    Context b(settings);
    b_id = b.impl()->id;
    std::vector<Buffer<float>> buffers;
    for (Context* context : {&a, &b}) {
      context->impl()->add_test_device({});
      const Kernel kernel = synthetic("heft_shared_log", 20us, 20us);
      for (int i = 0; i < 40; ++i) {
        buffers.emplace_back(*context, std::vector<float>(tile_floats, 1.0f));
        context->spawn(kernel, read_write(buffers.back()));
      }
    }
    a.wait_all();
    b.wait_all();
  }
  for (const auto& file : {log, own(b_id)}) {
    const auto lines = read_lines(file);  // throws on a line that is not JSON
    ASSERT_EQ(lines.size(), 40u) << file;
    for (std::size_t i = 0; i < lines.size(); ++i) EXPECT_EQ(lines[i]["decision"], i + 1) << file;
  }
  // A trace and a decision log naming one file: the trace keeps it, the log goes beside it.
  const auto both = temp_file("nerve-heft-trace-and-log");
  std::uint64_t c_id = 0;
  {
    Settings settings = policy_settings("heft", models);
    settings.set("perf.decision_log", both.string());
    settings.set("perf.trace", both.string());
    Context c(settings);
    c_id = c.impl()->id;
    c.impl()->add_test_device({});
    Buffer<float> data(c, std::vector<float>(tile_floats, 1.0f));
    c.spawn(synthetic("heft_trace_and_log", 20us, 20us), read_write(data));
    c.wait_all();
  }
  const auto log_beside =
      both.parent_path() / (both.stem().string() + "." + std::to_string(c_id) + both.extension().string());
  EXPECT_TRUE(load_json(both).contains("traceEvents")) << "the trace keeps the named file";
  EXPECT_EQ(read_lines(log_beside).size(), 1u);
  // Both outputs naming another context's file: the trace writes <stem>.<id><ext>, and the rule
  // applies again to the log, <stem>.<id>.<id><ext> (it wrote <stem>.<id>.2<ext>, whatever the id).
  std::uint64_t d_id = 0;
  {
    Settings settings = policy_settings("heft", models);
    settings.set("perf.decision_log", log.string());
    settings.set("perf.trace", log.string());
    Context d(settings);
    d_id = d.impl()->id;
    d.impl()->add_test_device({});
    Buffer<float> data(d, std::vector<float>(tile_floats, 1.0f));
    d.spawn(synthetic("heft_both_taken", 20us, 20us), read_write(data));
    d.wait_all();
  }
  const std::string d_suffix = "." + std::to_string(d_id);
  const auto trace_of_d = log.parent_path() / (log.stem().string() + d_suffix + log.extension().string());
  const auto log_of_d =
      log.parent_path() / (log.stem().string() + d_suffix + d_suffix + log.extension().string());
  EXPECT_TRUE(load_json(trace_of_d).contains("traceEvents"));
  EXPECT_EQ(read_lines(log_of_d).size(), 1u);
  for (const auto& file : {log, own(b_id), both, log_beside, trace_of_d, log_of_d})
    std::filesystem::remove(file);
  std::filesystem::remove_all(models);
}

}  // namespace
}  // namespace nerve::testing
