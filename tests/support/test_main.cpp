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
  // Performance models and compiled OpenCL programs default to $XDG_CACHE_HOME/nerve: each test
  // process gets a cache of its own, gone at exit, so that tests neither read nor fill the user's
  // (whose models would steer heft's choices from one run to the next) nor leave one behind.
  const auto cache =
      std::filesystem::temp_directory_path() / ("nerve-test-cache-" + std::to_string(::getpid()));
  // It starts empty even where an aborted process with this pid left one; NERVE_CACHE_DIR, which
  // would win over it for the programs, is unset.
  std::error_code ignored;
  std::filesystem::remove_all(cache, ignored);
  ::setenv("XDG_CACHE_HOME", cache.c_str(), 1);
  ::unsetenv("NERVE_CACHE_DIR");
  const int result = RUN_ALL_TESTS();
  std::filesystem::remove_all(cache, ignored);
  return result;
}
