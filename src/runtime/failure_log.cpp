// failure_log.cpp — logging the task failures that no wait rethrows.
#include "runtime/failure_log.hpp"

#include "util/exception_text.hpp"
#include "util/log.hpp"

namespace nerve::detail {

void log_unkept_failure(KeptFailure& kept, const std::exception_ptr& error, std::string_view owner) noexcept {
  if (kept.count_other() >= logged_failures) return;
  try {
    log::warn("another task failure in a {}, not rethrown by its wait (it rethrows the first): {}", owner,
              what_of(error));
  } catch (...) {  // out of memory for the message: it stays counted
  }
}

void log_unlisted_failures(KeptFailure& kept, std::string_view owner) noexcept {
  const std::uint32_t others = kept.take_others();
  if (others <= logged_failures) return;
  try {
    log::warn("and {} more task failures in this {}, not rethrown", others - logged_failures, owner);
  } catch (...) {
  }
}

void log_unreported_failure(KeptFailure& kept, std::string_view owner) noexcept {
  if (std::exception_ptr error = kept.take()) {
    try {
      log::warn("{} destroyed with an unreported task failure: {}", owner, what_of(error));
    } catch (...) {  // out of memory for the message: the failure stays unreported
    }
    log_unlisted_failures(kept, owner);
  }
}

}  // namespace nerve::detail
