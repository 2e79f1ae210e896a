// watchdog_fixture.cpp — a test that hangs on purpose, in two threads, so that check-watchdog.sh can
// prove the watchdog prints every thread's backtrace and aborts. Never run it without the wrapper.
#include <atomic>
#include <chrono>
#include <thread>

#include <gtest/gtest.h>

namespace nerve::testing {

std::atomic<bool> release_hanging_threads{false};  // nothing sets it: the hang ends with the abort

// hang_in_watchdog_fixture() waits forever; noinline keeps it a named frame in every stack.
[[gnu::noinline]] void hang_in_watchdog_fixture() {
  while (!release_hanging_threads.load()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

}  // namespace nerve::testing

TEST(WatchdogFixture, HangsInTwoThreadsUntilTheWatchdogAborts) {
  std::thread helper([] { nerve::testing::hang_in_watchdog_fixture(); });
  nerve::testing::hang_in_watchdog_fixture();
  helper.join();
}
