// error.hpp — the exceptions the C++ API throws.
//
// Every error nerve reports is a nerve::Error (derived from std::runtime_error) with an ErrorCode;
// the C API maps the same codes to nerve_status_t. Messages say what happened and where (the config
// key, file and line; the buffer and the offending range; the task's name), so that they can be shown
// to a user as they are. One exception, as in the standard library: the heap running out for the
// calling thread's own bookkeeping (a task's record, closure or dependency lists, a group's or pool's
// state) is std::bad_alloc, and the call changed nothing; a memory node that cannot hold a buffer's
// bytes, or a thread the system refuses, is Error(out_of_memory) saying which. The C API reports
// both as NERVE_ERROR_OUT_OF_MEMORY.
#pragma once

#include <exception>
#include <stdexcept>
#include <string>

#include "nerve/export.hpp"

namespace nerve {

enum class ErrorCode {
  invalid_config = 1,    // a configuration key, value, file or environment variable is wrong
  invalid_argument = 2,  // an API argument is out of its documented domain
  buffer_misuse = 3,     // use after free, double free, out-of-range slice, unmap without map, ...
  out_of_memory = 4,     // a memory node cannot satisfy an allocation, even after eviction; or the
                         // system refuses a thread nerve starts (its thread limit, or memory for a stack)
  task_failed = 5,       // a task threw (the original exception is rethrown where possible), its
                         // kernel failed on its device, or a copy of its input failed
  cancelled = 6,         // a task was cancelled because a task it depends on failed or was cancelled
  not_supported = 7,     // the feature exists in the API but not in this build or on this machine
  busy = 8,              // C nerve_buffer_try_map: a conflicting task is pending (C++ try_map: nullopt)
  internal = 9,          // a bug in nerve; please report it
};

// name() gives the stable lower-case name of an error code ("invalid_config", ...).
NERVE_API const char* name(ErrorCode code) noexcept;

class NERVE_API Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message);
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

// ConfigError names the key and, when the value came from a file, the file and line.
class NERVE_API ConfigError : public Error {
 public:
  ConfigError(const std::string& message, std::string key, std::string file = {}, int line = 0);
  const std::string& key() const noexcept { return key_; }
  const std::string& file() const noexcept { return file_; }
  int line() const noexcept { return line_; }  // 1-based; 0 when not from a file

 private:
  std::string key_;
  std::string file_;
  int line_;
};

// TaskCancelled is what waiting on a cancelled task throws. cause() is the exception of the task
// whose failure led to the cancellation (null when the task was cancelled by request).
class NERVE_API TaskCancelled : public Error {
 public:
  TaskCancelled(const std::string& message, std::exception_ptr cause);
  std::exception_ptr cause() const noexcept { return cause_; }

 private:
  std::exception_ptr cause_;
};

}  // namespace nerve
