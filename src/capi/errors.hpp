// errors.hpp — how the C API turns C++ exceptions into nerve_status_t and nerve_last_error().
//
// Every exported function runs its body inside guard() (or catches with record_exception()), so that
// no exception ever crosses the C boundary. The message of a failing call is kept per thread, prefixed
// with the C function's name ("nerve_buffer_free: double free of buffer 3 (64 bytes)").
//
// Thread safety: the last error is thread_local; nothing here is shared between threads.
#pragma once

#include <exception>
#include <string>

#include "nerve/error.hpp"
#include "nerve/nerve.h"

namespace nerve::capi {

// set_last_error() records a failing call's status and message on this thread; returns `status`.
nerve_status_t set_last_error(nerve_status_t status, const char* function,
                              const std::string& message) noexcept;

// record_exception() records the exception being handled (call it inside `catch (...)`) and returns
// its status: an Error's code; std::bad_alloc → out of memory; anything else → `fallback`.
nerve_status_t record_exception(const char* function,
                                nerve_status_t fallback = NERVE_ERROR_INTERNAL) noexcept;

// record_wait_exception() records what a wait rethrew (call it inside `catch (...)`): a cancellation is
// NERVE_ERROR_CANCELLED; anything else came from a task and is NERVE_ERROR_TASK_FAILED, whatever
// exception type a C++ kernel used.
nerve_status_t record_wait_exception(const char* function) noexcept;

// A kernel's failing calls are the kernel's: a task run by a thread that waits (nerve_wait_all, a
// pool's wait) must not change what that wait's caller reads from nerve_last_error() afterwards.
// SavedLastError takes the thread's last error (the kernel starts with none) and puts it back.
class SavedLastError {
 public:
  SavedLastError() noexcept;
  ~SavedLastError();
  SavedLastError(const SavedLastError&) = delete;
  SavedLastError& operator=(const SavedLastError&) = delete;

 private:
  nerve_status_t status_;
  std::string message_;
};

// fail() throws the Error a C function reports for a bad argument or misuse.
[[noreturn]] void fail(ErrorCode code, const std::string& message);

// guard() runs `body` (which returns nothing) and reports what it throws.
template <class Body>
nerve_status_t guard(const char* function, Body&& body) noexcept {
  try {
    body();
    return NERVE_OK;
  } catch (...) {
    return record_exception(function);
  }
}

// guard_value() runs `body` and returns its result, or `on_error` after recording the exception.
template <class T, class Body>
T guard_value(const char* function, T on_error, Body&& body) noexcept {
  try {
    return body();
  } catch (...) {
    record_exception(function);
    return on_error;
  }
}

}  // namespace nerve::capi
