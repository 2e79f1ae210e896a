// perf.models: history models per (kernel, device, footprint) — learning, calibration marker,
// robustness to outliers, drift, regression over sizes, persistence between contexts.
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gmock/gmock.h>

#include "perf/history_model.hpp"
#include "perf/monitor.hpp"
#include "perf/perf_test.hpp"
#include "util/replace_file.hpp"

namespace nerve::testing {
namespace {

using detail::HistoryModels;

// A device's busy time is the union of its runs whatever order they are reported in: queues finish
// out of order, and PoCL's callbacks arrive out of order. A run reported after a later one that
// already covered past its end once counted nothing, its own stretch included.
TEST(DeviceActivity, BusyTimeIsTheUnionOfRunsReportedInAnyOrder) {
  detail::DeviceActivity in_order;
  detail::DeviceActivity reversed;
  detail::DeviceActivity shuffled;
  // [0,10) [5,20) [30,40) [35,36) [50,60): union 20 + 10 + 10 = 40
  const std::vector<std::pair<std::int64_t, std::int64_t>> runs = {
      {0, 10}, {5, 20}, {30, 40}, {35, 36}, {50, 60}};
  for (const auto& [start, end] : runs) in_order.add_run(start, end);
  for (auto it = runs.rbegin(); it != runs.rend(); ++it) reversed.add_run(it->first, it->second);
  for (const std::size_t i : {3u, 0u, 4u, 2u, 1u}) shuffled.add_run(runs[i].first, runs[i].second);
  EXPECT_EQ(in_order.busy_ns.load(), 40u);
  EXPECT_EQ(reversed.busy_ns.load(), 40u);
  EXPECT_EQ(shuffled.busy_ns.load(), 40u);
  // A run bridging two: only the gap is new.
  detail::DeviceActivity bridge;
  bridge.add_run(0, 10);
  bridge.add_run(20, 30);
  bridge.add_run(5, 25);
  EXPECT_EQ(bridge.busy_ns.load(), 30u);
}

TEST(HistoryModel, MeanVarianceAndCalibratingMarker) {
  HistoryModels models({});
  for (int i = 0; i < 9; ++i) models.add("k", "cpu", 100, i % 2 == 0 ? 900.0 : 1100.0);
  auto estimate = models.estimate("k", "cpu", 100);
  ASSERT_TRUE(estimate.has_value());
  EXPECT_TRUE(estimate->calibrating) << "9 samples: still calibrating";
  models.add("k", "cpu", 100, 1100.0);
  estimate = models.estimate("k", "cpu", 100);
  EXPECT_FALSE(estimate->calibrating);
  EXPECT_EQ(estimate->samples, 10u);
  EXPECT_DOUBLE_EQ(estimate->mean_ns, 1000.0);
  EXPECT_NEAR(estimate->stddev_ns, 105.4, 0.1);
  EXPECT_FALSE(models.estimate("k", "device:1", 100).has_value()) << "per device";
}

TEST(HistoryModel, AFewSlowRunsBarelyMoveTheEstimate) {
  HistoryModels models({});
  for (int i = 0; i < 50; ++i) models.add("k", "cpu", 8, 1000.0 + (i % 3));
  for (int i = 0; i < 3; ++i) models.add("k", "cpu", 8, 1'000'000.0);  // three runs 1000× slower
  const auto estimate = models.estimate("k", "cpu", 8);
  EXPECT_LT(estimate->mean_ns, 1020.0) << "outliers are clamped to mean + 3 sigma (unclamped: 57,000)";
  EXPECT_EQ(models.rows().at(0).entry.outliers, 3u);
  EXPECT_EQ(models.rows().at(0).entry.recalibrations, 0u);
}

// A first call that paid for a program build (912 ms for a 0.1 ms kernel, as PoCL's first launch
// does) must not make the device look slow: while calibrating the estimate is the median, and the
// settled mean clamps the cold call to 4x the median.
TEST(HistoryModel, ACalibratingEntryIsNotFooledByAColdFirstCall) {
  HistoryModels models({});
  models.add("k", "device:1", 64, 912e6);
  EXPECT_DOUBLE_EQ(models.estimate("k", "device:1", 64)->mean_ns, 912e6) << "one sample is all it knows";
  models.add("k", "device:1", 64, 1e5);
  EXPECT_DOUBLE_EQ(models.estimate("k", "device:1", 64)->mean_ns, 1e5);
  for (int i = 0; i < 8; ++i) models.add("k", "device:1", 64, 1e5);
  const auto settled = models.estimate("k", "device:1", 64);
  EXPECT_FALSE(settled->calibrating);
  EXPECT_DOUBLE_EQ(settled->mean_ns, (4e5 + 9 * 1e5) / 10) << "the cold call counts as 4x the median";
  EXPECT_EQ(models.rows().at(0).entry.outliers, 1u);
}

TEST(HistoryModel, DriftRecalibrates) {
  HistoryModels models({});
  for (int i = 0; i < 20; ++i) models.add("k", "cpu", 8, 1000.0);
  // The device got 5x slower for good: the clamped samples still pull the recent average away.
  for (int i = 0; i < 40; ++i) models.add("k", "cpu", 8, 5000.0);
  const auto rows = models.rows();
  EXPECT_GE(rows.at(0).entry.recalibrations, 1u);
  for (int i = 0; i < 20; ++i) models.add("k", "cpu", 8, 5000.0);
  EXPECT_NEAR(models.estimate("k", "cpu", 8)->mean_ns, 5000.0, 500.0) << "it learnt the new time";
}

// A lasting 3x change after a long history: the clamped samples alone would keep the mean near the
// old time for ever (each is held within mean ± 3 sigma); the run of raw samples shows the change.
TEST(HistoryModel, ALastingModerateChangeRecalibratesAfterALongHistory) {
  for (const double after : {2e6, 18e6}) {
    HistoryModels models({});
    for (int i = 0; i < 100; ++i) models.add("k", "cpu", 8, 6e6 + (i % 5) * 1e4);
    for (int i = 0; i < 4; ++i) models.add("k", "cpu", 8, after);
    EXPECT_EQ(models.rows().at(0).entry.recalibrations, 0u) << "four in a row may be interference";
    models.add("k", "cpu", 8, after);
    EXPECT_EQ(models.rows().at(0).entry.recalibrations, 1u) << "the fifth in a row is a change";
    for (int i = 0; i < 10; ++i) models.add("k", "cpu", 8, after);
    const auto estimate = models.estimate("k", "cpu", 8);
    EXPECT_FALSE(estimate->calibrating);
    EXPECT_DOUBLE_EQ(estimate->mean_ns, after) << "it learnt the new time";
  }
  // A change of less than half, or slow runs that alternate with normal ones, is no drift.
  HistoryModels models({});
  for (int i = 0; i < 30; ++i) models.add("k", "cpu", 8, 1000.0);
  for (int i = 0; i < 40; ++i) models.add("k", "cpu", 8, i % 2 == 0 ? 1400.0 : 9000.0);
  EXPECT_EQ(models.rows().at(0).entry.recalibrations, 0u);
}

TEST(HistoryModel, RegressionForFootprintsNotSeen) {
  HistoryModels models({});
  for (int i = 0; i < 10; ++i) {
    models.add("k", "cpu", 1000, 2000.0);  // 1000 ns + 1 ns per byte
    models.add("k", "cpu", 3000, 4000.0);
  }
  const auto estimate = models.estimate("k", "cpu", 2000);
  ASSERT_TRUE(estimate.has_value());
  EXPECT_TRUE(estimate->interpolated);
  EXPECT_NEAR(estimate->mean_ns, 3000.0, 1e-6);
  EXPECT_FALSE(models.estimate("other", "cpu", 2000).has_value());
}

// Calibration spread over two processes behaves as in one: the samples are kept in the file while the
// entry calibrates, so the estimate stays their median (it became the mean, the cold call included:
// 28 ms instead of 10) and the cold call is still clamped when calibration completes.
TEST(HistoryModel, ACalibratingEntryKeepsItsSamplesAcrossProcesses) {
  const auto directory = fresh_directory("nerve-models-calibrating");
  {
    HistoryModels models(directory);
    models.add("k", "device:1", 64, 100e6);  // cold
    for (int i = 0; i < 4; ++i) models.add("k", "device:1", 64, 10e6);
    models.save();
  }
  HistoryModels loaded(directory);
  loaded.load();
  const auto estimate = loaded.estimate("k", "device:1", 64);
  ASSERT_TRUE(estimate.has_value());
  EXPECT_TRUE(estimate->calibrating);
  EXPECT_DOUBLE_EQ(estimate->mean_ns, 10e6) << "the median of the 5 samples";
  for (int i = 0; i < 5; ++i) loaded.add("k", "device:1", 64, 10e6);
  const auto settled = loaded.estimate("k", "device:1", 64);
  EXPECT_FALSE(settled->calibrating);
  EXPECT_DOUBLE_EQ(settled->mean_ns, (40e6 + 9 * 10e6) / 10) << "the cold call counts as 4x the median";
  EXPECT_EQ(loaded.rows().at(0).entry.outliers, 1u);
  loaded.save();
  EXPECT_FALSE(load_json(directory / "k.json")["entries"][0].contains("calibration_ns"))
      << "a calibrated entry keeps no samples";
  std::filesystem::remove_all(directory);
}

TEST(HistoryModel, SavedAndLoaded) {
  const auto directory = fresh_directory("nerve-models-unit");
  {
    HistoryModels models(directory);
    for (int i = 0; i < 12; ++i) models.add("gemm/tile", "device:1", 4096, 500.0 + i);
    models.save();
  }
  EXPECT_TRUE(std::filesystem::exists(directory / "gemm%2Ftile.json"));
  HistoryModels loaded(directory);
  loaded.load();
  const auto estimate = loaded.estimate("gemm/tile", "device:1", 4096);
  ASSERT_TRUE(estimate.has_value());
  EXPECT_EQ(estimate->samples, 12u);
  EXPECT_DOUBLE_EQ(estimate->mean_ns, 505.5);
  std::filesystem::remove_all(directory);
}

// A save keeps what the user made of a model file: its permissions (a 0600 file became 0644,
// readable by everyone) and a link to it (replaced by a file of its own, the target never updated).
TEST(HistoryModel, ASaveKeepsTheFilesPermissionsAndLinks) {
  namespace fs = std::filesystem;
  const auto directory = fresh_directory("nerve-models-kept");
  const auto elsewhere = fresh_directory("nerve-models-kept-target");
  fs::create_directories(directory);
  fs::create_directories(elsewhere);
  {
    HistoryModels models(directory);
    models.add("private", "cpu", 64, 100.0);
    models.add("linked", "cpu", 64, 100.0);
    models.save();
  }
  fs::permissions(directory / "private.json", fs::perms::owner_read | fs::perms::owner_write);
  fs::rename(directory / "linked.json", elsewhere / "linked.json");
  fs::create_symlink(elsewhere / "linked.json", directory / "linked.json");
  {
    HistoryModels models(directory);
    models.load();
    models.add("private", "cpu", 64, 200.0);
    models.add("linked", "cpu", 64, 200.0);
    models.save();
  }
  EXPECT_EQ(fs::status(directory / "private.json").permissions(),
            fs::perms::owner_read | fs::perms::owner_write);
  EXPECT_TRUE(fs::is_symlink(directory / "linked.json"));
  HistoryModels loaded(elsewhere);
  loaded.load();
  const auto estimate = loaded.estimate("linked", "cpu", 64);
  ASSERT_TRUE(estimate.has_value());
  EXPECT_EQ(estimate->samples, 2u) << "the link's target has both runs";
  fs::remove_all(directory);
  fs::remove_all(elsewhere);
}

// Kernel names map to file names one to one (and names that are not valid UTF-8 come back intact): "a/b" and
// "a_b" used to share a_b.json, so one kernel's model overwrote the other's. A name too long for a file name
// is shortened with a hash; a file another name maps to (an older version's) is not read as this kernel's.
TEST(HistoryModel, EveryKernelNameHasAFileOfItsOwn) {
  const auto directory = fresh_directory("nerve-models-names");
  const std::string long_name(400, 'k');
  // Names that are not UTF-8 read U+FFFD in the file's "kernel": both must still find their model.
  const std::vector<std::string> names{"a/b",
                                       "a_b",
                                       "a%2Fb",
                                       ".hidden",
                                       "tile gemm",
                                       long_name,
                                       long_name + "x",
                                       "bad\xff"
                                       "name",
                                       "bad\xfe"
                                       "name",
                                       long_name + "\xc3"};
  {
    HistoryModels models(directory);
    for (std::size_t k = 0; k < names.size(); ++k) {
      for (int i = 0; i < 12; ++i) models.add(names[k], "cpu", 64, 100.0 * static_cast<double>(k + 1));
    }
    models.save();
  }
  std::size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(directory)) {
    if (entry.path().filename() == "models.lock") continue;  // the savers' lock
    EXPECT_LE(entry.path().filename().string().size(), 255u);
    EXPECT_NE(entry.path().filename().string()[0], '.') << "no hidden files";
    ++files;
  }
  EXPECT_EQ(files, names.size());
  {  // an older version's file for "a/b", under "a_b"'s name
    std::ofstream out(directory / "a_b.json");
    out << R"({"schema": "nerve.perfmodel/1", "kernel": "a/b", "entries": [
      {"device": "cpu", "footprint": 64, "samples": 50, "mean_ns": 9999, "m2": 1}]})";
  }
  HistoryModels loaded(directory);
  loaded.load();
  for (std::size_t k = 0; k < names.size(); ++k) {
    if (names[k] == "a_b") continue;  // its file was replaced by the stale one above
    const auto estimate = loaded.estimate(names[k], "cpu", 64);
    ASSERT_TRUE(estimate.has_value()) << names[k];
    EXPECT_DOUBLE_EQ(estimate->mean_ns, 100.0 * static_cast<double>(k + 1)) << names[k];
  }
  std::filesystem::remove_all(directory);
}

// bus.json in the model directory is heft's bus model: a kernel named "bus" must not take its file (each
// overwrote the other, and heft measured the bus again in every run).
TEST(HistoryModel, AKernelNamedBusLeavesTheBusModelItsFile) {
  const auto directory = fresh_directory("nerve-models-bus");
  std::filesystem::create_directories(directory);
  const std::string bus_model = R"({"schema": "nerve.busmodel/1", "links": []})";
  std::ofstream(directory / "bus.json") << bus_model;
  {
    HistoryModels models(directory);
    for (int i = 0; i < 12; ++i) models.add("bus", "cpu", 64, 300.0);
    models.save();
  }
  std::ifstream in(directory / "bus.json");
  const std::string kept((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(kept, bus_model);
  EXPECT_TRUE(std::filesystem::exists(directory / "%62us.json"));
  HistoryModels loaded(directory);
  loaded.load();
  const auto estimate = loaded.estimate("bus", "cpu", 64);
  ASSERT_TRUE(estimate.has_value());
  EXPECT_DOUBLE_EQ(estimate->mean_ns, 300.0);
  std::filesystem::remove_all(directory);
}

// Damaged files must not steer placement: entries with impossible values are skipped (the rest of the
// file is kept), and a count near 2^64 cannot wrap.
TEST(HistoryModel, EntriesWithImpossibleValuesAreSkippedOnLoad) {
  const auto directory = fresh_directory("nerve-models-damaged");
  std::filesystem::create_directories(directory);
  {
    std::ofstream out(directory / "scale.json");
    out << R"({"schema": "nerve.perfmodel/1", "kernel": "scale", "entries": [
      {"device": "cpu", "footprint": 8, "samples": 100, "mean_ns": -5, "m2": -1},
      {"device": "device:1", "footprint": 8, "samples": 18446744073709551615, "mean_ns": 10, "m2": 1},
      {"device": "device:2", "footprint": 8, "samples": 20, "mean_ns": 10, "m2": 1, "recent_ns": -3},
      {"device": "device:4", "footprint": 8, "samples": 2, "mean_ns": 5, "m2": 0, "calibration_ns": [5, -5]},
      {"device": "device:5", "footprint": 8, "samples": 3, "mean_ns": 5, "m2": 0, "calibration_ns": [5]},
      {"device": "device:6", "footprint": -1, "samples": 20, "mean_ns": 10, "m2": 1},
      {"device": "device:7", "footprint": 8.5, "samples": 20, "mean_ns": 10, "m2": 1},
      {"device": "device:3", "footprint": 8, "samples": 12, "mean_ns": 700, "m2": 1200}]})";
  }
  HistoryModels models(directory);
  ::testing::internal::CaptureStderr();
  models.load();
  const std::string logged = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(logged, ::testing::HasSubstr("skipped: footprint -1 is not a byte count"));
  EXPECT_THAT(logged, ::testing::HasSubstr("skipped: footprint 8.5 is not a byte count"));
  for (const auto& row : models.rows())
    EXPECT_TRUE(row.device != "device:6" && row.device != "device:7")
        << "a footprint read as another number: " << row.device << " " << row.footprint;
  EXPECT_FALSE(models.estimate("scale", "cpu", 8).has_value()) << "a negative time";
  EXPECT_FALSE(models.estimate("scale", "device:1", 8).has_value()) << "a count no run reaches";
  EXPECT_FALSE(models.estimate("scale", "device:2", 8).has_value()) << "a negative recent average";
  EXPECT_FALSE(models.estimate("scale", "device:4", 8).has_value()) << "a negative calibration sample";
  EXPECT_FALSE(models.estimate("scale", "device:5", 8).has_value()) << "fewer samples kept than counted";
  const auto kept = models.estimate("scale", "device:3", 8);
  ASSERT_TRUE(kept.has_value());
  EXPECT_DOUBLE_EQ(kept->mean_ns, 700.0);
  EXPECT_NEAR(kept->stddev_ns, 10.4, 0.1);
  std::filesystem::remove_all(directory);
}

// A count is a whole number written as one: a float such as 1e20 or 1e300 (beyond 2^48, and
// converted to an integer, undefined: it read as 0 samples), or 3.7 (read as 3), is skipped with the
// warning as any impossible value is, for the outlier and recalibration counts as for the samples.
TEST(HistoryModel, CountsThatAreNotWholeNumbersAreSkippedOnLoad) {
  const auto directory = fresh_directory("nerve-models-float-counts");
  std::filesystem::create_directories(directory);
  {
    std::ofstream out(directory / "scale.json");
    out << R"({"schema": "nerve.perfmodel/1", "kernel": "scale", "entries": [
      {"device": "device:1", "footprint": 8, "samples": 1e20, "mean_ns": 10, "m2": 1},
      {"device": "device:2", "footprint": 8, "samples": 1e300, "mean_ns": 10, "m2": 1},
      {"device": "device:3", "footprint": 8, "samples": 3.7, "mean_ns": 10, "m2": 1},
      {"device": "device:4", "footprint": 8, "samples": 12.0, "mean_ns": 10, "m2": 1},
      {"device": "device:5", "footprint": 8, "samples": 12, "mean_ns": 10, "m2": 1, "outliers": 1.5},
      {"device": "device:6", "footprint": 8, "samples": 12, "mean_ns": 10, "m2": 1, "recalibrations": 1e30},
      {"device": "device:7", "footprint": 8, "samples": 12, "mean_ns": 10, "m2": 1, "recalibrations": -1},
      {"device": "cpu", "footprint": 8, "samples": 12, "mean_ns": 700, "m2": 1200, "outliers": 2,
       "recalibrations": 1}]})";
  }
  HistoryModels models(directory);
  ::testing::internal::CaptureStderr();
  models.load();
  const std::string logged = ::testing::internal::GetCapturedStderr();
  for (const char* written : {"samples 1e+20", "samples 1e+300", "samples 3.7", "samples 12.0",
                              "outliers 1.5", "recalibrations 1e+30", "recalibrations -1"})
    EXPECT_THAT(logged, ::testing::HasSubstr(written));
  EXPECT_THAT(logged, ::testing::HasSubstr("a count is a whole number from 0 to 2^48"));
  for (const auto& row : models.rows())
    EXPECT_EQ(row.device, "cpu") << "a count read as another number: " << row.entry.samples << " samples";
  const auto kept = models.estimate("scale", "cpu", 8);
  ASSERT_TRUE(kept.has_value());
  EXPECT_EQ(kept->samples, 12u);
  std::filesystem::remove_all(directory);
}

// A file that is not shaped as a model (an "entries" object instead of an array, an entry with a
// field of the wrong type) is skipped with a warning that says what is wrong and where; nlohmann's
// own message said only "cannot use at() with number".
TEST(HistoryModel, AMisshapenFileIsSkippedSayingWhatIsWrong) {
  const auto directory = fresh_directory("nerve-models-misshapen");
  std::filesystem::create_directories(directory);
  const std::string entry = R"({"device": "cpu", "footprint": 8, "samples": 12, "mean_ns": 10, "m2": 1})";
  const std::vector<std::pair<std::string, std::string>> files = {
      {R"("entries": {"a": 1})", R"("entries" is an object, not an array)"},
      {R"("entries": [3])", "entries[0] is 3, not an object"},
      {R"("entries": [)" + entry + R"(, {"device": "cpu", "footprint": 8, "samples": 12, "m2": 1}])",
       R"(entries[1] has no "mean_ns")"},
      {R"("entries": [{"device": "cpu", "footprint": 8, "samples": 12, "mean_ns": "10", "m2": 1}])",
       R"(entries[0]: "mean_ns" is "10", not a number)"},
      {R"("entries": [{"device": 0, "footprint": 8, "samples": 12, "mean_ns": 10, "m2": 1}])",
       R"(entries[0]: "device" is 0, not a string)"},
      {R"("entries": [{"device": "cpu", "footprint": 8, "samples": 2, "mean_ns": 10, "m2": 1,
                       "calibration_ns": [10, "x"]}])",
       R"(entries[0]: "calibration_ns" is an array, not an array of numbers)"},
      {R"("entries": null)", R"("entries" is null, not an array)"},
  };
  for (const auto& [entries, why] : files) {
    SCOPED_TRACE(entries);
    std::ofstream(directory / "scale.json", std::ios::trunc)
        << R"({"schema": "nerve.perfmodel/1", "kernel": "scale", )" << entries << "}";
    HistoryModels models(directory);
    ::testing::internal::CaptureStderr();
    models.load();
    const std::string logged = ::testing::internal::GetCapturedStderr();
    EXPECT_THAT(logged, ::testing::HasSubstr("performance model " + (directory / "scale.json").string() +
                                             " skipped: " + why));
    EXPECT_TRUE(models.rows().empty());
  }
  std::filesystem::remove_all(directory);
}

// The variables named, as they were, put back when it goes.
class SavedEnvironment {
 public:
  explicit SavedEnvironment(std::initializer_list<const char*> names) {
    for (const char* name : names) {
      const char* value = std::getenv(name);
      saved_.emplace_back(name, value != nullptr ? std::optional<std::string>(value) : std::nullopt);
    }
  }
  ~SavedEnvironment() {
    for (const auto& [name, value] : saved_) {
      if (value) {
        ::setenv(name, value->c_str(), 1);
      } else {
        ::unsetenv(name);
      }
    }
  }
  SavedEnvironment(const SavedEnvironment&) = delete;
  SavedEnvironment& operator=(const SavedEnvironment&) = delete;

 private:
  std::vector<std::pair<const char*, std::optional<std::string>>> saved_;
};

// The default model directory, as docs/CONFIG.md gives it: $XDG_CACHE_HOME, else $HOME/.cache, else
// (a service, a bare container) $TMPDIR, else /tmp; an empty variable counts as unset. It used to be
// temp_directory_path(), which also read TMP (and TEMP, TEMPDIR), and threw for a TMPDIR that is no
// directory.
TEST(HistoryModel, TheDefaultDirectoryWithoutAHomeIsTheTemporaryOne) {
  const SavedEnvironment saved{"XDG_CACHE_HOME", "HOME", "TMPDIR", "TMP"};
  ::setenv("XDG_CACHE_HOME", "/cache", 1);
  EXPECT_EQ(HistoryModels::default_directory(), "/cache/nerve/perfmodels");
  ::setenv("XDG_CACHE_HOME", "", 1);
  ::setenv("HOME", "/home/u", 1);
  EXPECT_EQ(HistoryModels::default_directory(), "/home/u/.cache/nerve/perfmodels");
  ::unsetenv("XDG_CACHE_HOME");
  ::setenv("HOME", "", 1);
  ::setenv("TMPDIR", "/nonexistent/scratch", 1);
  EXPECT_EQ(HistoryModels::default_directory(), "/nonexistent/scratch/nerve-perfmodels");
  ::unsetenv("HOME");
  ::setenv("TMPDIR", "", 1);
  ::setenv("TMP", "/elsewhere", 1);
  EXPECT_EQ(HistoryModels::default_directory(), "/tmp/nerve-perfmodels");
  ::unsetenv("TMPDIR");
  EXPECT_EQ(HistoryModels::default_directory(), "/tmp/nerve-perfmodels");
}

// A file of another schema (a newer nerve's, another program's, or none) is not this version's model:
// skipped with a warning when loading, and left as it is when saving (it used to be replaced, silently).
TEST(HistoryModel, AFileOfAnotherSchemaIsSkippedAndKept) {
  const auto directory = fresh_directory("nerve-models-foreign");
  std::filesystem::create_directories(directory);
  const std::string newer =
      R"({"schema": "nerve.perfmodel/2", "kernel": "scale", "entries": [{"device": "cpu", "footprint": 8,
      "samples": 20, "mean_ns": 5000, "m2": 100}]})";
  const std::string unmarked = R"({"kernel": "shift", "entries": []})";
  std::ofstream(directory / "scale.json") << newer;
  std::ofstream(directory / "shift.json") << unmarked;
  const auto read = [](const std::filesystem::path& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  HistoryModels models(directory);
  ::testing::internal::CaptureStderr();
  models.load();
  EXPECT_FALSE(models.estimate("scale", "cpu", 8).has_value());
  for (int i = 0; i < 3; ++i) {
    models.add("scale", "cpu", 8, 1000.0);
    models.add("shift", "cpu", 8, 1000.0);
  }
  models.save();
  const std::string logged = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(logged, ::testing::HasSubstr("its schema is \"nerve.perfmodel/2\""));
  EXPECT_THAT(logged, ::testing::HasSubstr("it has no \"schema\""));
  EXPECT_THAT(logged, ::testing::HasSubstr("performance model for 'scale' not saved"));
  EXPECT_THAT(logged, ::testing::HasSubstr("performance model for 'shift' not saved"));
  EXPECT_EQ(read(directory / "scale.json"), newer) << "another schema's file is not overwritten";
  EXPECT_EQ(read(directory / "shift.json"), unmarked);
  std::filesystem::remove_all(directory);
}

// Two contexts (or processes) keeping models in one directory: the one that saves last keeps what the
// other saved meanwhile — its other entries, and its samples of the entries both learnt — instead of
// replacing the file with its own (12 learnt samples became 3).
TEST(HistoryModel, SavesMergeWhatAnotherSavedMeanwhile) {
  const auto directory = fresh_directory("nerve-models-merge");
  // Two models load the directory, learn, and save, the first one first.
  const auto learn_both = [&](const auto& first_learns, const auto& second_learns) {
    HistoryModels first(directory), second(directory);
    first.load();
    second.load();
    first_learns(first);
    second_learns(second);
    first.save();
    second.save();
  };
  learn_both(
      [](HistoryModels& m) {
        for (int i = 0; i < 12; ++i) m.add("k", "cpu", 64, 100.0);
      },
      [](HistoryModels& m) {
        for (int i = 0; i < 3; ++i) m.add("k", "cpu", 64, 100.0);
        for (int i = 0; i < 2; ++i) m.add("k", "device:1", 64, 50.0);
      });
  {
    HistoryModels both(directory);
    both.load();
    ASSERT_TRUE(both.estimate("k", "cpu", 64).has_value());
    EXPECT_EQ(both.estimate("k", "cpu", 64)->samples, 15u);
    EXPECT_DOUBLE_EQ(both.estimate("k", "cpu", 64)->mean_ns, 100.0);
    ASSERT_TRUE(both.estimate("k", "device:1", 64).has_value());
    EXPECT_EQ(both.estimate("k", "device:1", 64)->samples, 2u);
  }
  // Both start from the saved model; each adds its own samples on top.
  learn_both(
      [](HistoryModels& m) {
        for (int i = 0; i < 5; ++i) m.add("k", "cpu", 64, 101.0);
      },
      [](HistoryModels& m) {
        for (int i = 0; i < 5; ++i) m.add("k", "cpu", 64, 99.0);
      });
  HistoryModels merged(directory);
  merged.load();
  const auto estimate = merged.estimate("k", "cpu", 64);
  ASSERT_TRUE(estimate.has_value());
  EXPECT_EQ(estimate->samples, 25u) << "15 saved, 5 from each";
  EXPECT_NEAR(estimate->mean_ns, 100.0, 1e-9);
  EXPECT_NEAR(estimate->stddev_ns, std::sqrt(10.0 / 24.0), 1e-9) << "ten samples 1 ns off, of 25";
  EXPECT_EQ(merged.estimate("k", "device:1", 64)->samples, 2u) << "untouched by either";
  std::filesystem::remove_all(directory);
}

// Saves at the same moment (two threads here; two processes alike) take turns: every file stays
// whole, and every sample counts (with one temporary name for all, and no lock, saves tore each
// other's files or lost each other's samples).
TEST(HistoryModel, ConcurrentSavesTakeTurnsAndLoseNothing) {
  const auto directory = fresh_directory("nerve-models-concurrent");
  constexpr int rounds = 40;
  {  // calibrated first: a save that settles calibration takes one side whole (see merged())
    HistoryModels first(directory);
    for (int i = 0; i < 12; ++i) first.add("shared", "cpu", 64, 100.0);
    first.save();
  }
  const auto saver = [&] {
    for (int round = 0; round < rounds; ++round) {
      HistoryModels models(directory);
      models.load();
      models.add("shared", "cpu", 64, 100.0);
      models.save();
    }
  };
  std::thread other(saver);
  saver();
  other.join();
  HistoryModels all(directory);
  all.load();
  ASSERT_TRUE(all.estimate("shared", "cpu", 64).has_value());
  EXPECT_EQ(all.estimate("shared", "cpu", 64)->samples, 12u + 2u * rounds);
  for (const auto& entry : std::filesystem::directory_iterator(directory))
    EXPECT_EQ(entry.path().string().find(".tmp"), std::string::npos) << "a temporary left: " << entry.path();
  std::filesystem::remove_all(directory);
}

// A save that fails leaves no half-written `<kernel>.json.tmp` beside the models, and a warning that
// says why; an entry with a negative count is named with that count, not its 64-bit wrap.
TEST(HistoryModel, AFailedSaveLeavesNoTemporaryAndDamageIsQuoted) {
  const auto directory = fresh_directory("nerve-models-failed-save");
  std::filesystem::create_directories(directory / "k.json");  // a directory where the file goes
  HistoryModels models(directory);
  models.add("k", "cpu", 8, 10.0);
  ::testing::internal::CaptureStderr();
  models.save();
  EXPECT_THAT(
      ::testing::internal::GetCapturedStderr(),
      ::testing::HasSubstr("performance model for 'k' not saved to " + (directory / "k.json").string()));
  EXPECT_FALSE(std::filesystem::exists(directory / "k.json.tmp"));
  std::filesystem::remove_all(directory);
  std::filesystem::create_directories(directory);
  {
    std::ofstream out(directory / "k.json");
    out << R"({"schema": "nerve.perfmodel/1", "kernel": "k", "entries": [
      {"device": "cpu", "footprint": 8, "samples": -5, "mean_ns": 10, "m2": 1}]})";
  }
  HistoryModels damaged(directory);
  ::testing::internal::CaptureStderr();
  damaged.load();
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(log, ::testing::HasSubstr("samples -5")) << log;
  EXPECT_FALSE(damaged.estimate("k", "cpu", 8).has_value());
  std::filesystem::remove_all(directory);
}

// A FIFO in the model directory hung the context's creation in open(), waiting for a writer; a
// dangling link was "basic_filebuf::underflow error reading the file: Is a directory", an unreadable
// file "parse error ... unexpected end of input". Each is skipped, saying what it is.
TEST(HistoryModel, FilesThatAreNotReadableModelsAreSkippedSayingWhy) {
  const auto directory = fresh_directory("nerve-models-not-files");
  std::filesystem::create_directories(directory);
  ASSERT_EQ(::mkfifo((directory / "fifo.json").c_str(), 0644), 0);
  std::filesystem::create_directories(directory / "folder.json");
  std::filesystem::create_symlink(directory / "nowhere", directory / "dangling.json");
  HistoryModels models(directory);
  ::testing::internal::CaptureStderr();
  std::thread loading([&] { models.load(); });
  loading.join();  // hung for ever before
  const std::string logged = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(logged,
              ::testing::HasSubstr((directory / "fifo.json").string() + " skipped: it is a FIFO, not a "
                                                                        "regular file"));
  EXPECT_THAT(logged,
              ::testing::HasSubstr((directory / "folder.json").string() + " skipped: it is a directory, "
                                                                          "not a regular file"));
  EXPECT_THAT(logged, ::testing::HasSubstr((directory / "dangling.json").string() +
                                           " skipped: cannot open it: No such file or directory"));
  EXPECT_TRUE(models.rows().empty());
  std::filesystem::remove_all(directory);
}

// One kernel's file that cannot be replaced (a directory in its place) cost every kernel saved after
// it, and the warning said no model was saved although earlier ones were.
TEST(HistoryModel, AKernelWhoseFileCannotBeSavedCostsOnlyItsOwnModel) {
  const auto directory = fresh_directory("nerve-models-one-fails");
  std::filesystem::create_directories(directory / "b.json");
  HistoryModels models(directory);
  for (const char* kernel : {"a", "b", "c"}) models.add(kernel, "cpu", 8, 10.0);
  ::testing::internal::CaptureStderr();
  models.save();
  const std::string logged = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(logged, ::testing::HasSubstr("performance model for 'b' not saved to " +
                                           (directory / "b.json").string()));
  EXPECT_THAT(logged, ::testing::Not(::testing::HasSubstr("performance models not saved")));
  EXPECT_TRUE(std::filesystem::is_regular_file(directory / "a.json"));
  EXPECT_TRUE(std::filesystem::is_regular_file(directory / "c.json")) << "the kernel after b was not saved";
  std::filesystem::remove_all(directory);
}

// A models.lock the saver cannot open for writing (another user's, mode 0644; here a directory)
// left saves unlocked without a word, and concurrent savers lost each other's samples. It is locked
// through a read-only descriptor (flock needs no write access); one that cannot be opened at all is
// a warning. Root opens any file for writing, so another user's lock is tried in a child that has
// become `nobody` (skipped where this process cannot change its user).
TEST(HistoryModel, ALockFileThatCannotBeWrittenStillLocksOrSaysSo) {
  const auto directory = fresh_directory("nerve-models-lock");
  std::filesystem::create_directories(directory);
  { std::ofstream(directory / "models.lock") << ""; }
  std::filesystem::permissions(directory / "models.lock",
                               std::filesystem::perms::owner_read | std::filesystem::perms::owner_write |
                                   std::filesystem::perms::group_read | std::filesystem::perms::others_read);
  std::filesystem::permissions(directory, std::filesystem::perms::others_exec,
                               std::filesystem::perm_options::add);
  if (::geteuid() == 0) {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(2);
      const detail::FileLock other_users(directory / "models.lock");
      ::_exit(other_users.held() ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_NE(WEXITSTATUS(status), 1) << "another user's lock file was not locked";
  }
  std::filesystem::remove(directory / "models.lock");
  std::filesystem::create_directories(directory / "models.lock");
  HistoryModels models(directory);
  models.add("k", "cpu", 8, 10.0);
  ::testing::internal::CaptureStderr();
  models.save();
  const std::string logged = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(logged, ::testing::HasSubstr("cannot lock " + (directory / "models.lock").string()));
  EXPECT_TRUE(std::filesystem::is_regular_file(directory / "k.json")) << "saved all the same";
  std::filesystem::remove_all(directory);
}

// A failed run is no sample of a kernel's time: on the CPU workers and on a device, with and without
// task recording, only the calls that succeeded are learnt.
TEST(PerfModels, FailedRunsAreNotLearnt) {
  Kernel flaky("flaky");
  flaky.cpu([](const KernelArgs& args) {
    if (args.value<int>(0) != 0) throw std::runtime_error("failed call");
  });
  for (const bool recording : {false, true}) {
    const auto directory = fresh_directory("nerve-models-failed");  // empty: nothing learnt before
    {
      Settings settings = make_settings(2);
      settings.set("perf.models", "true");
      settings.set("perf.model_dir", directory.string());
      if (recording) settings.set("perf.record_tasks", "true");
      Context context(settings);
      context.impl()->add_test_device({});
      for (int i = 0; i < 8; ++i)
        context.spawn(TaskOptions{.device = i % 2}, flaky, value(i % 4 < 2 ? 0 : 1));
      int failures = 0;
      for (bool done = false; !done && failures <= 8;) {  // each failure is reported once
        try {
          context.wait_all();
          done = true;
        } catch (const std::runtime_error&) {
          ++failures;
        }
      }
      EXPECT_GE(failures, 1);
      std::uint64_t samples = 0;
      for (const PerfModelStats& model : context.stats().models) samples += model.samples;
      EXPECT_EQ(samples, 4u) << "4 calls succeeded, 4 failed (recording " << recording << ")";
    }
    std::filesystem::remove_all(directory);
  }
}

TEST(PerfModels, ContextLearnsKernelTimesAndKeepsThemBetweenRuns) {
  const auto directory = fresh_directory("nerve-models-context");
  auto settings = [&] {
    Settings s = make_settings(2);
    s.set("perf.models", "true");
    s.set("perf.model_dir", directory.string());
    return s;
  };
  Kernel scale("scale");
  scale.cpu([](const KernelArgs& args) {
    for (float& v : args.span<float>(0)) v *= 1.5f;
  });
  {
    Context context(settings());
    context.impl()->add_test_device({});
    Buffer<float> data(context, std::vector<float>(256, 1.0f));
    for (int i = 0; i < 12; ++i) context.spawn(TaskOptions{.device = i % 2}, scale, read_write(data));
    context.wait_all();
    const ContextStats stats = context.stats();
    EXPECT_TRUE(stats.models_enabled);
    ASSERT_EQ(stats.models.size(), 2u);  // cpu and device:1
    for (const PerfModelStats& model : stats.models) {
      EXPECT_EQ(model.kernel, "scale");
      EXPECT_EQ(model.footprint, 1024u);
      EXPECT_EQ(model.samples, 6u);
      EXPECT_TRUE(model.calibrating);
      EXPECT_GT(model.mean_ns, 0.0);
    }
    const nlohmann::json json = dump_stats(context);
    EXPECT_EQ(json["models"]["enabled"], true);
    EXPECT_EQ(json["models"]["entries"].size(), 2u);
    EXPECT_EQ(json["models"]["entries"][0]["calibrating"], true);
  }
  ASSERT_TRUE(std::filesystem::exists(directory / "scale.json")) << "saved when the context ends";
  {
    Context context(settings());
    const ContextStats stats = context.stats();
    ASSERT_EQ(stats.models.size(), 2u) << "loaded at start";
    Buffer<float> data(context, std::vector<float>(256, 1.0f));
    for (int i = 0; i < 6; ++i) context.spawn(scale, read_write(data));
    context.wait_all();
    for (const PerfModelStats& model : context.stats().models) {
      if (model.device == "cpu") {
        EXPECT_EQ(model.samples, 12u) << "the second run refines the first run's model";
        EXPECT_FALSE(model.calibrating);
      }
    }
  }
  std::filesystem::remove_all(directory);
}

// Relative output paths mean the working directory when the context was created: a program that
// changes directory meanwhile still finds its models, trace and decision log there (models used to
// be saved, and the trace written, under the directory current at destruction).
TEST(PerfModels, RelativeOutputPathsMeanTheDirectoryAtCreation) {
  const auto created_in = fresh_directory("nerve-paths-created");
  const auto moved_to = fresh_directory("nerve-paths-moved");
  std::filesystem::create_directories(created_in);
  std::filesystem::create_directories(moved_to);
  const auto original = std::filesystem::current_path();
  std::filesystem::current_path(created_in);
  try {
    Settings settings = make_settings(2);
    settings.set("scheduler.policy", "heft");
    settings.set("perf.model_dir", "models");
    settings.set("perf.trace", "trace.json");
    settings.set("perf.decision_log", "decisions.jsonl");
    Kernel scale("relative_scale");
    scale.cpu([](const KernelArgs& args) {
      for (float& v : args.span<float>(0)) v *= 1.5f;
    });
    {
      Context context(settings);
      std::filesystem::current_path(moved_to);
      EXPECT_EQ(context.stats().model_directory, (created_in / "models").string());
      Buffer<float> data(context, std::vector<float>(256, 1.0f));
      for (int i = 0; i < 3; ++i) context.spawn(scale, read_write(data));
      context.wait_all();
    }
    EXPECT_TRUE(std::filesystem::exists(created_in / "models" / "relative_scale.json"));
    EXPECT_TRUE(std::filesystem::exists(created_in / "trace.json"));
    EXPECT_TRUE(std::filesystem::exists(created_in / "decisions.jsonl"));
    EXPECT_TRUE(std::filesystem::is_empty(moved_to)) << "nothing is written where the program moved";
  } catch (...) {
    std::filesystem::current_path(original);
    throw;
  }
  std::filesystem::current_path(original);
  std::filesystem::remove_all(created_in);
  std::filesystem::remove_all(moved_to);
}

// A model directory that cannot be used is known when the context starts, as an unwritable
// perf.trace is, not at its end, when the run's learning would be lost: the directory the program
// named is an error; the default one, which heft turns on by itself, a warning (the context runs).
TEST(PerfModels, AnUnusableModelDirectoryIsKnownAtCreation) {
  const auto root = fresh_directory("nerve-unusable-models");
  std::filesystem::create_directories(root);
  const auto not_a_directory = root / "file";
  std::ofstream(not_a_directory) << "x";
  {
    Settings settings = make_settings(1);
    settings.set("perf.models", "true");
    settings.set("perf.model_dir", (not_a_directory / "models").string());
    try {
      Context context(settings);
      ADD_FAILURE() << "a model directory inside a regular file was accepted";
    } catch (const ConfigError& error) {
      EXPECT_EQ(error.key(), "perf.model_dir");
      EXPECT_EQ(std::string(error.what()).rfind("api: perf.model_dir: cannot create directory", 0), 0u)
          << error.what();
    }
  }
  {
    const char* cache = std::getenv("XDG_CACHE_HOME");
    const std::string saved = cache != nullptr ? cache : "";
    ::setenv("XDG_CACHE_HOME", not_a_directory.c_str(), 1);
    Settings settings = make_settings(1);
    settings.set("scheduler.policy", "heft");
    ::testing::internal::CaptureStderr();
    try {
      Context context(settings);
      EXPECT_TRUE(context.stats().models_enabled);
    } catch (...) {
      ADD_FAILURE() << "an unusable default model directory stopped a heft context";
    }
    const std::string logged = ::testing::internal::GetCapturedStderr();
    if (cache != nullptr) {
      ::setenv("XDG_CACHE_HOME", saved.c_str(), 1);
    } else {
      ::unsetenv("XDG_CACHE_HOME");
    }
    EXPECT_THAT(logged,
                ::testing::HasSubstr("performance models will not be saved: cannot create directory"));
  }
  std::filesystem::remove_all(root);
}

TEST(PerfModels, OffByDefaultAndNothingWritten) {
  Context context(make_settings(1));
  EXPECT_FALSE(context.stats().models_enabled);
  EXPECT_EQ(context.impl()->perf->models(), nullptr);
}

}  // namespace
}  // namespace nerve::testing
