// failure_log.hpp — logging the task failures that no wait rethrows.
#pragma once

#include <cstddef>
#include <exception>
#include <string_view>

#include "nerve/detail/runtime_api.hpp"

namespace nerve::detail {

// A wait rethrows one failure; it logs this many of the others by message, then a count.
inline constexpr std::size_t logged_failures = 16;

// log_unkept_failure(): a task of a group or pool failed after another one whose failure `kept`
// holds (the one its wait will rethrow): logged now while fewer than logged_failures were,
// counted otherwise. `owner` is "task group" or "task pool".
void log_unkept_failure(KeptFailure& kept, const std::exception_ptr& error, std::string_view owner) noexcept;
// log_unlisted_failures(): at a wait that takes the kept failure, how many of the others were not logged (and
// restarts the count).
void log_unlisted_failures(KeptFailure& kept, std::string_view owner) noexcept;
// log_unreported_failure(): the group or pool is destroyed while `kept` holds a failure no wait took.
void log_unreported_failure(KeptFailure& kept, std::string_view owner) noexcept;

}  // namespace nerve::detail
