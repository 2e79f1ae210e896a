// watchdog.hpp — prints every thread's backtrace and aborts a test that runs too long.
#pragma once

namespace nerve::testing {

// start_watchdog_from_environment() reads NERVE_TEST_TIMEOUT (seconds, set by CTest from the test's
// TIMEOUT) and, if set, starts a detached thread that fires a few seconds before CTest would kill
// the test: it prints all threads' backtraces to stderr, then aborts.
void start_watchdog_from_environment();

}  // namespace nerve::testing
