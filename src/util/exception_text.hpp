// exception_text.hpp — the message of a captured exception, for logs and for messages that wrap it.
#pragma once

#include <exception>
#include <string>

namespace nerve::detail {

// what_of(): `error`'s what(), or a placeholder for an exception that is not a std::exception.
inline std::string what_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "a non-standard exception";
  }
}

}  // namespace nerve::detail
