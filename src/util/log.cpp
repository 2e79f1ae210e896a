#include "util/log.hpp"

#include <atomic>
#include <cstdlib>
#include <string>

#include <unistd.h>

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
  [[maybe_unused]] auto written = ::write(2, line.data(), line.size());
}

}  // namespace nerve::log
