// The shared main of every test executable: GoogleTest plus a hang watchdog.
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>

#include <unistd.h>

#include <gtest/gtest.h>

#include "support/watchdog.hpp"

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  nerve::testing::start_watchdog_from_environment();
  // Compiled OpenCL programs are cached on disk: each test process gets a cache of its own, gone
  // at exit, so that tests neither read nor fill the user's (~/.cache/nerve) nor leave one behind.
  std::filesystem::path cache;
  if (std::getenv("NERVE_CACHE_DIR") == nullptr) {
    cache = std::filesystem::temp_directory_path() / ("nerve-test-cache-" + std::to_string(::getpid()));
    ::setenv("NERVE_CACHE_DIR", cache.c_str(), 1);
  }
  const int result = RUN_ALL_TESTS();
  std::error_code ignored;
  if (!cache.empty()) std::filesystem::remove_all(cache, ignored);
  return result;
}
