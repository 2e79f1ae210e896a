// Bus calibration: latency and bandwidth between every pair of memory nodes, measured through the
// nodes' asynchronous copies, persisted in perf.model_dir and reloaded without measuring again.
#include "perf/bus_model.hpp"

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>

#include <gmock/gmock.h>

#include "backend/opencl_support.hpp"
#include "backend/test_device.hpp"
#include "perf/perf_test.hpp"

namespace nerve::testing {
namespace {

using namespace std::chrono_literals;

// Seven small and five large copies: the calibration keeps the fastest of each, so a few descheduled
// ones on a loaded CI machine do not matter (a latency inflated in every small copy would overstate
// the bandwidth).
constexpr detail::BusCalibrationSizes quick_sizes{64, std::size_t{1} << 20, 7, 5};

TEST(BusModel, MeasuresASimulatedLinkPersistsAndReloads) {
  const auto directory = fresh_directory("nerve-bus-test");
  Context context(make_settings(2));
  // 200 µs per copy and 250 MB/s (4 ms per MiB, long next to a sanitizer's or a loaded machine's
  // oversleeping): the calibration must find both.
  context.impl()->add_test_device(
      detail::TestDeviceOptions{.copy_latency = 200us, .copy_bytes_per_second = 250e6});
  const auto nodes = context.impl()->memory_nodes();
  {
    detail::BusModel bus(directory);
    EXPECT_TRUE(bus.ensure_calibrated(nodes, quick_sizes)) << "nothing saved yet: it measures";
    EXPECT_EQ(bus.measurements(), 1u);
    for (auto [from, to] : {std::pair{0u, 1u}, std::pair{1u, 0u}}) {
      const detail::BusLink link = bus.link(from, to);
      EXPECT_GT(link.latency_ns, 150e3) << from << "->" << to;
      EXPECT_LT(link.latency_ns, 20e6);
      // 0.25 B/ns simulated; a loaded machine oversleeps, which only makes the copies look slower.
      EXPECT_GT(link.bytes_per_ns, 0.025) << "250 MB/s simulated";
      EXPECT_LT(link.bytes_per_ns, 0.5);
    }
    EXPECT_EQ(bus.transfer_ns(0, 0, 1 << 20), 0.0) << "host to host costs nothing";
    EXPECT_NEAR(bus.transfer_ns(0, 1, 1 << 20),
                bus.link(0, 1).latency_ns + (1 << 20) / bus.link(0, 1).bytes_per_ns, 1.0);
  }
  ASSERT_TRUE(std::filesystem::exists(directory / "bus.json"));
  const nlohmann::json saved = load_json(directory / "bus.json");
  EXPECT_EQ(saved["schema"], "nerve.busmodel/1");
  EXPECT_EQ(saved["links"].size(), 2u);
  {
    detail::BusModel bus(directory);
    EXPECT_FALSE(bus.ensure_calibrated(nodes, quick_sizes)) << "loaded, not measured again";
    EXPECT_EQ(bus.measurements(), 0u);
    EXPECT_GT(bus.link(0, 1).latency_ns, 150e3);
    bus.calibrate(nodes, quick_sizes);  // nerve-info --calibrate: measures on request
    EXPECT_EQ(bus.measurements(), 1u);
  }
  // A damaged file (a negative latency, no bandwidth) is not believed: the bus is measured again.
  for (const char* link :
       {R"("latency_ns": -1000000, "bytes_per_second": 1e9)", R"("latency_ns": 1000, "bytes_per_second": 0)",
        R"("latency_ns": 1e300, "bytes_per_second": 1e9)"}) {
    SCOPED_TRACE(link);
    std::ofstream(directory / "bus.json") << R"({"schema": "nerve.busmodel/1", "links": [)"
                                          << R"({"from": ")" << nodes[0]->name() << R"(", "to": ")"
                                          << nodes[1]->name() << R"(", )" << link << "}, "
                                          << R"({"from": ")" << nodes[1]->name() << R"(", "to": ")"
                                          << nodes[0]->name() << R"(", )" << link << "}]}";
    detail::BusModel bus(directory);
    EXPECT_TRUE(bus.ensure_calibrated(nodes, quick_sizes)) << "measured again";
    EXPECT_GT(bus.link(0, 1).latency_ns, 150e3);
  }
  context.wait_all();
  std::filesystem::remove_all(directory);
}

// A bus.json of another schema (a newer nerve's, or none) is skipped with a warning and kept as it is,
// as the kernels' model files are: it used to be ignored without a word and replaced by the next save.
TEST(BusModel, AFileOfAnotherSchemaIsSkippedAndKept) {
  const auto directory = fresh_directory("nerve-bus-foreign");
  std::filesystem::create_directories(directory);
  Context context(make_settings(2));
  context.impl()->add_test_device(detail::TestDeviceOptions{.copy_latency = 10us});
  const auto nodes = context.impl()->memory_nodes();
  const auto read = [&] {
    std::ifstream in(directory / "bus.json");
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  for (const auto& [text, why] :
       {std::pair<std::string, std::string>{
            R"({"schema": "nerve.busmodel/2", "links": [], "future_field": 1})",
            R"(its schema is "nerve.busmodel/2", not "nerve.busmodel/1")"},
        std::pair<std::string, std::string>{R"({"links": []})", R"(it has no "schema")"}}) {
    SCOPED_TRACE(text);
    std::ofstream(directory / "bus.json", std::ios::trunc) << text;
    detail::BusModel bus(directory);
    ::testing::internal::CaptureStderr();
    EXPECT_TRUE(bus.ensure_calibrated(nodes, quick_sizes)) << "measured for this model";
    const std::string logged = ::testing::internal::GetCapturedStderr();
    EXPECT_GT(bus.link(0, 1).bytes_per_ns, 0.0);
    EXPECT_THAT(logged,
                ::testing::HasSubstr("bus model " + (directory / "bus.json").string() + " skipped: " + why));
    EXPECT_THAT(logged, ::testing::HasSubstr("bus model not saved"));
    EXPECT_THAT(bus.save_error(), ::testing::HasSubstr("is kept as it is (" + why));
    EXPECT_EQ(read(), text) << "another schema's file is not overwritten";
  }
  context.wait_all();
  std::filesystem::remove_all(directory);
}

// Regression (fuzzing): a misshapen link (a field missing, or of the wrong JSON type) was warned about
// in nlohmann's words ("key 'to' not found", "type must be number, but is string"), which name neither
// the link nor, for a type, the field. The warning now names both, as for the kernels' model files.
TEST(BusModel, AMisshapenLinkIsNamedInTheWarning) {
  const auto directory = fresh_directory("nerve-bus-misshapen");
  std::filesystem::create_directories(directory);
  Context context(make_settings(2));
  context.impl()->add_test_device(detail::TestDeviceOptions{.copy_latency = 10us});
  const auto nodes = context.impl()->memory_nodes();
  const std::string good = R"({"from": ")" + nodes[0]->name() + R"(", "to": ")" + nodes[1]->name() +
                           R"(", "latency_ns": 1000, "bytes_per_second": 1e9})";
  for (const auto& [link, why] :
       {std::pair<std::string, std::string>{R"({"from": "host", "latency_ns": 1, "bytes_per_second": 1})",
                                            R"(links[1] has no "to")"},
        std::pair<std::string, std::string>{
            R"({"from": "host", "to": "x", "latency_ns": "10", "bytes_per_second": 1})",
            R"(links[1]: "latency_ns" is "10", not a number)"},
        std::pair<std::string, std::string>{"7", "links[1] is 7, not an object"}}) {
    SCOPED_TRACE(link);
    std::ofstream(directory / "bus.json", std::ios::trunc)
        << R"({"schema": "nerve.busmodel/1", "links": [)" << good << ", " << link << "]}";
    detail::BusModel bus(directory);
    ::testing::internal::CaptureStderr();
    EXPECT_TRUE(bus.ensure_calibrated(nodes, quick_sizes)) << "measured again";
    EXPECT_THAT(::testing::internal::GetCapturedStderr(),
                ::testing::HasSubstr("bus model " + (directory / "bus.json").string() + " ignored: " + why));
  }
  context.wait_all();
  std::filesystem::remove_all(directory);
}

TEST(BusModel, HeftMeasuresOnFirstUseAndTheNextContextReloads) {
  const auto directory = fresh_directory("nerve-bus-heft");
  auto settings = [&] {
    Settings s = make_settings(2);
    s.set("scheduler.policy", "heft");
    s.set("perf.model_dir", directory.string());
    return s;
  };
  Kernel touch("bus_touch");
  touch.cpu([](const KernelArgs& args) { args.span<float>(0)[0] += 1.0f; });
  for (unsigned run = 0; run < 2; ++run) {
    Context context(settings());
    context.impl()->add_test_device({});
    Buffer<float> data(context, 1024);
    context.submit(touch, read_write(data)).wait();
    EXPECT_EQ(context.impl()->bus->measurements(), run == 0 ? 1u : 0u) << "run " << run;
    EXPECT_GT(context.impl()->bus->link(0, 1).bytes_per_ns, 0.0);
  }
  std::filesystem::remove_all(directory);
}

// With devices from the backends, a heft context measures (or loads) the bus when it starts.
TEST(BusModel, HeftContextWithOpenclMeasuresAtStart) {
  NERVE_SKIP_WITHOUT_OPENCL();
  const auto directory = fresh_directory("nerve-bus-opencl");
  for (unsigned run = 0; run < 2; ++run) {
    Settings settings = opencl_settings(2);
    settings.set("scheduler.policy", "heft");
    settings.set("perf.model_dir", directory.string());
    Context context(settings);
    ASSERT_NE(context.impl()->bus, nullptr);
    EXPECT_EQ(context.impl()->bus->measurements(), run == 0 ? 1u : 0u) << "run " << run;
    EXPECT_TRUE(context.impl()->bus->link(0, 1).measured());
    EXPECT_TRUE(context.impl()->bus->link(1, 0).measured());
  }
  std::filesystem::remove_all(directory);
}

// A device with less room than the bandwidth copy (or one that refuses so large an allocation) is
// measured with copies it can hold, and a node with no room at all leaves only its own links
// unmeasured: one small device used to leave the whole bus unmeasured, and nothing saved.
TEST(BusModel, EachPairIsMeasuredWithCopiesThatFitItsNodes) {
  const auto directory = fresh_directory("nerve-bus-small");
  Context context(make_settings(2));
  context.impl()->add_test_device({});
  context.impl()->add_test_device(detail::TestDeviceOptions{.memory_limit = 300 * 1024});
  context.impl()->add_test_device(detail::TestDeviceOptions{.max_allocation = 100 * 1024});
  context.impl()->add_test_device(detail::TestDeviceOptions{.memory_limit = 32});  // not even 64 bytes
  const auto nodes = context.impl()->memory_nodes();
  ASSERT_EQ(nodes.size(), 5u);
  detail::BusModel bus(directory);
  EXPECT_NO_THROW(bus.calibrate(nodes, quick_sizes));
  for (unsigned from = 0; from < nodes.size(); ++from) {
    for (unsigned to = 0; to < nodes.size(); ++to) {
      if (from == to) continue;
      const bool measurable = from != 4 && to != 4;
      EXPECT_EQ(bus.link(from, to).measured(), measurable)
          << nodes[from]->name() << " -> " << nodes[to]->name();
    }
  }
  EXPECT_EQ(load_json(directory / "bus.json")["links"].size(), 12u) << "the measured links are saved";
  context.wait_all();
  std::filesystem::remove_all(directory);
}

// Every pair among the host, the test device, the sim plugin's devices and OpenCL (PoCL) devices.
TEST(BusModel, CalibratesEveryPairOfEveryBackendsNodes) {
  ::setenv("NERVE_PLUGIN_PATH", NERVE_TEST_PLUGIN_DIR, 1);
  Settings settings = make_settings(2);
  settings.set("gpu.devices", opencl_device_count() > 0 ? "sim0,opencl" : "sim0");
  Context context(settings);
  ::unsetenv("NERVE_PLUGIN_PATH");
  context.impl()->add_test_device({});
  const auto nodes = context.impl()->memory_nodes();
  ASSERT_GE(nodes.size(), 3u);
  detail::BusModel bus({});
  bus.calibrate(nodes, quick_sizes);
  for (unsigned from = 0; from < nodes.size(); ++from) {
    for (unsigned to = 0; to < nodes.size(); ++to) {
      if (from == to) continue;
      const detail::BusLink link = bus.link(from, to);
      ASSERT_TRUE(link.measured()) << nodes[from]->name() << " -> " << nodes[to]->name();
      EXPECT_GT(link.latency_ns, 0.0);
      EXPECT_LT(link.latency_ns, 1e9);
      EXPECT_GT(link.bytes_per_ns, 1e-3) << "more than 1 MB/s";
      EXPECT_LT(link.bytes_per_ns, 1e3) << "less than 1 TB/s";
    }
  }
  context.wait_all();
}

}  // namespace
}  // namespace nerve::testing
