// perf_test.hpp — helpers of the monitoring tests: settings with perf keys, JSON loading.
#pragma once

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "support/runtime_fixture.hpp"

namespace nerve::testing {

// A new name on every call: a trace file named by an earlier context of the process is kept by it
// (later contexts write <stem>.<context id>.json), so a repeated test (--gtest_repeat) needs its own.
inline std::filesystem::path temp_file(const std::string& stem) {
  static std::atomic<int> calls{0};
  return std::filesystem::temp_directory_path() /
         (stem + "." + std::to_string(getpid()) + "-" + std::to_string(++calls) + ".json");
}

// fresh_directory() is an empty directory for models or calibrations of this process: removed if an
// earlier run left it, created by whoever writes into it.
inline std::filesystem::path fresh_directory(const std::string& stem) {
  const auto directory = std::filesystem::temp_directory_path() / (stem + "." + std::to_string(getpid()));
  std::filesystem::remove_all(directory);
  return directory;
}

// load_json() parses the file with a real JSON parser (throws, failing the test, if it is not JSON).
inline nlohmann::json load_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return nlohmann::json::parse(in);
}

inline nlohmann::json dump_stats(const Context& context) {
  const auto path = temp_file("nerve-perf-stats");
  context.dump_perf_stats(path);
  nlohmann::json json = load_json(path);
  std::filesystem::remove(path);
  return json;
}

}  // namespace nerve::testing
