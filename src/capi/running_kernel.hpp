// running_kernel.hpp — which C kernel the calling thread is running, for nerve_task_fail() and for
// checking nerve_buffer_get_device_ptr() against the task's declared buffers.
//
// A RunningKernel lives on the worker's stack around one kernel call. They nest: a kernel that waits
// may run another task on the same thread, whose RunningKernel shadows the outer one until it returns.
//
// Thread safety: per thread (the current kernel is thread_local); a RunningKernel is touched only by
// the thread that runs it.
#pragma once

#include <string>

#include "nerve/detail/runtime_api.hpp"
#include "nerve/nerve.h"

#include "capi/errors.hpp"

namespace nerve::capi {

class RunningKernel {
 public:
  // `views` are the task's accesses resolved on the device it runs on, in declaration order.
  RunningKernel(const nerve_task& task, const char* name, const detail::AccessView* views) noexcept;
  ~RunningKernel();
  RunningKernel(const RunningKernel&) = delete;
  RunningKernel& operator=(const RunningKernel&) = delete;

  // current() is the innermost C kernel running on this thread, or nullptr.
  static RunningKernel* current() noexcept;

  // declares() tells whether the task listed `buffer` among its accesses.
  bool declares(const nerve_buffer* buffer) const noexcept;
  // data_of() is where `buffer`'s bytes are on the device the kernel runs on (nullptr if undeclared).
  void* data_of(const nerve_buffer* buffer) const noexcept;
  const char* name() const noexcept { return name_ != nullptr ? name_ : "(unnamed)"; }

  // fail() records the kernel's failure; the first message wins.
  void fail(const char* message) noexcept;
  bool failed() const noexcept { return failed_; }
  const std::string& message() const noexcept { return message_; }

 private:
  const nerve_task& task_;
  const char* name_;
  const detail::AccessView* views_;
  RunningKernel* previous_;
  SavedLastError caller_error_;  // restored when the kernel returns
  bool failed_ = false;
  std::string message_;
};

}  // namespace nerve::capi
