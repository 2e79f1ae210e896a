// log.hpp — nerve's one named logger ("nerve").
//
// Silent by default apart from warnings and errors. NERVE_LOG_LEVEL (trace, debug, info, warn, error,
// off) changes the threshold; it is read once, when the first context is created. Messages go to
// stderr as "[nerve] <level>: <text>". Thread safe: the process writes its messages one at a time,
// each whole (also past a pipe's 4 KiB atomic limit and across an interrupting signal).
#pragma once

#include <string_view>

#include <fmt/format.h>

namespace nerve::log {

enum class Level { trace = 0, debug, info, warn, error, off };

// threshold() is the current level; set_threshold() overrides it (tests).
Level threshold() noexcept;
void set_threshold(Level level) noexcept;
// parse_level() reads a level name; returns false for an unknown name.
bool parse_level(std::string_view text, Level& level) noexcept;

void write(Level level, std::string_view message);

template <class... Args>
void emit(Level level, fmt::format_string<Args...> format, Args&&... args) {
  if (level < threshold()) return;
  write(level, fmt::format(format, std::forward<Args>(args)...));
}

template <class... Args>
void trace(fmt::format_string<Args...> f, Args&&... a) {
  emit(Level::trace, f, std::forward<Args>(a)...);
}
template <class... Args>
void debug(fmt::format_string<Args...> f, Args&&... a) {
  emit(Level::debug, f, std::forward<Args>(a)...);
}
template <class... Args>
void info(fmt::format_string<Args...> f, Args&&... a) {
  emit(Level::info, f, std::forward<Args>(a)...);
}
template <class... Args>
void warn(fmt::format_string<Args...> f, Args&&... a) {
  emit(Level::warn, f, std::forward<Args>(a)...);
}
template <class... Args>
void error(fmt::format_string<Args...> f, Args&&... a) {
  emit(Level::error, f, std::forward<Args>(a)...);
}

}  // namespace nerve::log
