// The shared main of every test executable: GoogleTest plus a hang watchdog.
#include <gtest/gtest.h>

#include "support/watchdog.hpp"

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  nerve::testing::start_watchdog_from_environment();
  return RUN_ALL_TESTS();
}
