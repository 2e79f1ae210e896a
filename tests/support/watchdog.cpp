#include "support/watchdog.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include <unistd.h>

namespace nerve::testing {

void start_watchdog_from_environment() {
  const char* text = std::getenv("NERVE_TEST_TIMEOUT");
  if (text == nullptr) return;
  const int timeout = std::atoi(text);
  if (timeout <= 0) return;
  const int fire_after = timeout > 20 ? timeout - 10 : timeout * 3 / 4;
  std::thread([fire_after] {
    std::this_thread::sleep_for(std::chrono::seconds(fire_after));
    std::fprintf(stderr, "\n*** test watchdog: still running after %d s; backtraces of all threads:\n", fire_after);
    const std::string command = "gdb -p " + std::to_string(getpid()) +
                                " -batch -nx -ex 'thread apply all bt' 2>/dev/null 1>&2";
    if (std::system(command.c_str()) != 0) std::fprintf(stderr, "(gdb unavailable)\n");
    std::abort();
  }).detach();
}

}  // namespace nerve::testing
