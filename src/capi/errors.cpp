// errors.cpp — the per-thread last error and the exception → status mapping.
#include "capi/errors.hpp"

#include <new>
#include <string>
#include <utility>

namespace nerve::capi {
namespace {

static_assert(NERVE_ERROR_INVALID_CONFIG == static_cast<int>(ErrorCode::invalid_config));
static_assert(NERVE_ERROR_INVALID_ARGUMENT == static_cast<int>(ErrorCode::invalid_argument));
static_assert(NERVE_ERROR_BUFFER_MISUSE == static_cast<int>(ErrorCode::buffer_misuse));
static_assert(NERVE_ERROR_OUT_OF_MEMORY == static_cast<int>(ErrorCode::out_of_memory));
static_assert(NERVE_ERROR_TASK_FAILED == static_cast<int>(ErrorCode::task_failed));
static_assert(NERVE_ERROR_CANCELLED == static_cast<int>(ErrorCode::cancelled));
static_assert(NERVE_ERROR_NOT_SUPPORTED == static_cast<int>(ErrorCode::not_supported));
static_assert(NERVE_ERROR_BUSY == static_cast<int>(ErrorCode::busy));
static_assert(NERVE_ERROR_INTERNAL == static_cast<int>(ErrorCode::internal));

struct LastError {
  nerve_status_t status = NERVE_OK;
  std::string message;
};

thread_local LastError last_error;

}  // namespace

nerve_status_t set_last_error(nerve_status_t status, const char* function,
                              const std::string& message) noexcept {
  last_error.status = status;
  try {
    last_error.message.assign(function);
    last_error.message.append(": ");
    last_error.message.append(message);
  } catch (...) {
    // Out of memory while reporting: keep the status, drop the text rather than throw.
    last_error.message.clear();
  }
  return status;
}

SavedLastError::SavedLastError() noexcept
    : status_(std::exchange(last_error.status, NERVE_OK)), message_(std::move(last_error.message)) {
  last_error.message.clear();  // a moved-from string is valid but unspecified
}

SavedLastError::~SavedLastError() {
  last_error.status = status_;
  last_error.message.swap(message_);
}

nerve_status_t record_exception(const char* function, nerve_status_t fallback) noexcept {
  try {
    throw;
  } catch (const Error& error) {
    return set_last_error(static_cast<nerve_status_t>(error.code()), function, error.what());
  } catch (const std::bad_alloc&) {
    return set_last_error(NERVE_ERROR_OUT_OF_MEMORY, function, "out of memory");
  } catch (const std::exception& error) {
    return set_last_error(fallback, function, error.what());
  } catch (...) {
    return set_last_error(fallback, function, "an exception that is not a std::exception");
  }
}

nerve_status_t record_wait_exception(const char* function) noexcept {
  try {
    throw;
  } catch (const Error& error) {
    const bool cancelled = error.code() == ErrorCode::cancelled;
    return set_last_error(cancelled ? NERVE_ERROR_CANCELLED : NERVE_ERROR_TASK_FAILED, function,
                          error.what());
  } catch (const std::exception& error) {
    return set_last_error(NERVE_ERROR_TASK_FAILED, function, error.what());
  } catch (...) {
    return set_last_error(NERVE_ERROR_TASK_FAILED, function,
                          "a task threw an exception that is not a std::exception");
  }
}

void fail(ErrorCode code, const std::string& message) { throw Error(code, message); }

}  // namespace nerve::capi

extern "C" {

const char* nerve_status_string(nerve_status_t status) {
  if (status == NERVE_OK) return "ok";
  if (status < NERVE_ERROR_INVALID_CONFIG || status > NERVE_ERROR_INTERNAL) return "unknown";
  return nerve::name(static_cast<nerve::ErrorCode>(status));
}

const char* nerve_last_error(void) { return nerve::capi::last_error.message.c_str(); }

nerve_status_t nerve_last_status(void) { return nerve::capi::last_error.status; }

void nerve_clear_last_error(void) {
  nerve::capi::last_error.status = NERVE_OK;
  nerve::capi::last_error.message.clear();
}

}  // extern "C"
