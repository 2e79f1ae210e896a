// watchdog.hpp — prints every thread's backtrace and aborts a test that runs too long.
#pragma once

namespace nerve::testing {

// start_watchdog_from_environment() reads NERVE_TEST_TIMEOUT (seconds, set by CTest from the test's
// TIMEOUT) and, if it is set, starts a detached thread that fires a few seconds before CTest would kill
// the test (a quarter of the timeout, between 3 and 15 seconds, earlier). When it fires it prints
// "backtraces of all threads" to stderr, then every thread's stack, then aborts:
//  - with gdb (`gdb -p <pid> -batch -ex "thread apply all bt"`) when gdb is on PATH and can attach;
//    the process first allows any tracer (PR_SET_PTRACER) so that Yama ptrace_scope=1 does not block it;
//  - otherwise, or when gdb fails, by signalling each thread in /proc/self/task with SIGUSR2, whose
//    handler prints backtrace_symbols_fd() output (function names need -rdynamic, which the test
//    main's link options add). NERVE_TEST_WATCHDOG_NO_GDB=1 forces this path.
// Calling it more than once has no further effect. Without NERVE_TEST_TIMEOUT it does nothing, so a
// test run by hand is never aborted.
void start_watchdog_from_environment();

}  // namespace nerve::testing
