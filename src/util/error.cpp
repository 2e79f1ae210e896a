#include "nerve/error.hpp"

#include <utility>

namespace nerve {

const char* name(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::invalid_config: return "invalid_config";
    case ErrorCode::invalid_argument: return "invalid_argument";
    case ErrorCode::buffer_misuse: return "buffer_misuse";
    case ErrorCode::out_of_memory: return "out_of_memory";
    case ErrorCode::task_failed: return "task_failed";
    case ErrorCode::cancelled: return "cancelled";
    case ErrorCode::not_supported: return "not_supported";
    case ErrorCode::busy: return "busy";
    case ErrorCode::internal: return "internal";
  }
  return "unknown";
}

Error::Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}

ConfigError::ConfigError(const std::string& message, std::string key, std::string file, int line)
    : Error(ErrorCode::invalid_config, message), key_(std::move(key)), file_(std::move(file)), line_(line) {}

TaskCancelled::TaskCancelled(const std::string& message, std::exception_ptr cause)
    : Error(ErrorCode::cancelled, message), cause_(std::move(cause)) {}

}  // namespace nerve
