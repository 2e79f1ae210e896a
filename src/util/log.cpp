#include "util/log.hpp"

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>

#include <poll.h>
#include <unistd.h>

#include "util/cpu.hpp"
#include "util/fork_generation.hpp"

namespace nerve::log {
namespace {

Level level_from_environment() noexcept {
  Level level = Level::warn;
  if (const char* text = std::getenv("NERVE_LOG_LEVEL"); text != nullptr && !parse_level(text, level)) {
    static constexpr char message[] = "[nerve] warn: NERVE_LOG_LEVEL has an unknown value; using 'warn'\n";
    [[maybe_unused]] auto written = ::write(2, message, sizeof(message) - 1);
  }
  return level;
}

// The threshold is process-wide configuration read from the environment, not runtime state.
std::atomic<int>& threshold_storage() noexcept {
  static std::atomic<int> storage{static_cast<int>(level_from_environment())};
  return storage;
}

constexpr const char* level_name(Level level) noexcept {
  switch (level) {
    case Level::trace: return "trace";
    case Level::debug: return "debug";
    case Level::info: return "info";
    case Level::warn: return "warn";
    case Level::error: return "error";
    case Level::off: return "off";
  }
  return "?";
}

// The kernel writes a line to a pipe atomically only up to PIPE_BUF (4 KiB), and write() returns early
// when a signal interrupts it: an OpenCL build log or a long list in a message would come out mixed
// with other threads' lines. So the process writes its lines one at a time, each whole. The lock word
// holds the writer's fork generation + 1: a child forked while one of its parent's threads held it
// (a thread the child does not have) takes it over instead of waiting for ever.
class LineLock {
 public:
  LineLock() noexcept : mine_(detail::fork_generation() + 1) {
    for (int spins = 0;; ++spins) {
      std::uint64_t seen = owner().load(std::memory_order_relaxed);
      if (seen != mine_ && owner().compare_exchange_weak(seen, mine_, std::memory_order_acquire)) return;
      if (spins < 64) {
        cpu_relax();
      } else if (spins < 256) {
        std::this_thread::yield();
      } else {  // the holder waits for a full pipe or a stopped terminal: sleep, do not burn a core
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    }
  }
  ~LineLock() { owner().store(0, std::memory_order_release); }
  LineLock(const LineLock&) = delete;
  LineLock& operator=(const LineLock&) = delete;

 private:
  // Process-wide, as stderr is.
  static std::atomic<std::uint64_t>& owner() noexcept {
    static std::atomic<std::uint64_t> word{0};
    return word;
  }
  std::uint64_t mine_;
};

void write_whole(int descriptor, std::string_view text) noexcept {
  int full_waits = 0;  // a non-blocking stderr that stays full: at most about a second per line
  while (!text.empty()) {
    const ssize_t written = ::write(descriptor, text.data(), text.size());
    if (written > 0) {
      text.remove_prefix(static_cast<std::size_t>(written));
    } else if (written < 0 && errno == EINTR) {
      continue;
    } else if (written < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) && full_waits++ < 10) {
      pollfd ready{descriptor, POLLOUT, 0};
      ::poll(&ready, 1, 100);
    } else {
      return;  // stderr closed or failing: a log line is not worth a hang
    }
  }
}

}  // namespace

Level threshold() noexcept { return static_cast<Level>(threshold_storage().load(std::memory_order_relaxed)); }

void set_threshold(Level level) noexcept {
  threshold_storage().store(static_cast<int>(level), std::memory_order_relaxed);
}

bool parse_level(std::string_view text, Level& level) noexcept {
  for (int i = 0; i <= static_cast<int>(Level::off); ++i) {
    if (text == level_name(static_cast<Level>(i))) {
      level = static_cast<Level>(i);
      return true;
    }
  }
  if (text == "warning") {
    level = Level::warn;
    return true;
  }
  return false;
}

void write(Level level, std::string_view message) {
  std::string line = "[nerve] ";
  line += level_name(level);
  line += ": ";
  line += message;
  line += '\n';
  const LineLock lock;
  write_whole(2, line);
}

}  // namespace nerve::log
