// task.cpp — nerve_task_*: building a task, submitting it, and failing it from its kernel.
#include "nerve/task.hpp"

#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <vector>

#include <fmt/format.h>

#include "nerve/nerve.h"

#include "capi/errors.hpp"
#include "capi/handles.hpp"
#include "capi/running_kernel.hpp"
#include "capi/submit.hpp"
#include "util/byte_range.hpp"

namespace nerve::capi {
namespace {

// declared_access() validates one access against a live buffer: what set_memory_deps and add_access
// check at once, so that the error points at the call that declared it.
TaskAccess declared_access(nerve_buffer* buffer, Access mode, std::size_t offset, std::size_t size,
                           bool whole_buffer) {
  nerve_buffer& handle = checked_buffer(buffer);
  std::lock_guard lock(handle.lock);
  if (handle.freed) {
    fail(ErrorCode::buffer_misuse,
         fmt::format("a task declares {}, which was already freed (use after free)", describe(handle)));
  }
  if (whole_buffer) return {buffer, 0, handle.bytes, mode};
  if (offset > handle.bytes || size > handle.bytes - offset) {
    fail(ErrorCode::buffer_misuse,
         fmt::format("access to bytes {} is outside {}", detail::byte_range(offset, size), describe(handle)));
  }
  return {buffer, offset, size, mode};
}

// A task record stores its access count in 16 bits.
static_assert(NERVE_TASK_MAX_ACCESSES == std::numeric_limits<std::uint16_t>::max());

// check_access_count() refuses a declaration that would give the task more accesses than it may
// have, when it is made: found only at submission, the error came after the caller had built all of
// them, and from a call that declared none.
void check_access_count(std::size_t count) {
  if (count > NERVE_TASK_MAX_ACCESSES) {
    fail(ErrorCode::invalid_argument,
         fmt::format("a task may declare at most {} accesses; this would give it {}", NERVE_TASK_MAX_ACCESSES,
                     count));
  }
}

// declare() runs an access declaration of `task`; if it fails, the task remembers why, and its
// submission is refused (see nerve_task::declaration_failed).
template <class Body>
void declare(nerve_task& task, const char* function, Body&& body) {
  try {
    body();
  } catch (const Error& error) {
    task.declaration_failed = true;
    task.failed_declaration_code = error.code();
    try {
      task.failed_declaration = fmt::format("{}: {}", function, error.what());
    } catch (...) {  // out of memory for the text: still refused, without it
    }
    throw;
  } catch (...) {  // out of memory: refused too
    task.declaration_failed = true;
    task.failed_declaration_code = ErrorCode::out_of_memory;
    throw;
  }
}

}  // namespace
}  // namespace nerve::capi

using namespace nerve::capi;
using nerve::ErrorCode;

extern "C" {

nerve_task_t* nerve_task_create(nerve_kernel_fn fn, void* desc) {
  return guard_value<nerve_task_t*>("nerve_task_create", nullptr, [&] {
    if (fn == nullptr) fail(ErrorCode::invalid_argument, "the kernel function is NULL");
    auto task = std::make_unique<nerve_task>();
    task->fn = fn;
    task->desc = desc;
    return task.release();
  });
}

nerve_status_t nerve_task_set_memory_deps(nerve_task_t* task, size_t count, nerve_buffer_t* const* buffers) {
  return guard("nerve_task_set_memory_deps", [&] {
    nerve_task& checked = checked_task(task);
    declare(checked, "nerve_task_set_memory_deps", [&] {
      if (count != 0 && buffers == nullptr) {
        fail(ErrorCode::invalid_argument, fmt::format("the buffer array is NULL but count is {}", count));
      }
      check_access_count(count);
      std::vector<TaskAccess> accesses;
      accesses.reserve(count);
      for (std::size_t i = 0; i < count; ++i) {
        const nerve_buffer& handle = checked_buffer(buffers[i]);
        accesses.push_back(declared_access(buffers[i], handle.default_mode, 0, 0, true));
      }
      checked.accesses = std::move(accesses);
      checked.declaration_failed = false;  // every earlier declaration is replaced
      checked.failed_declaration.clear();
    });
  });
}

nerve_status_t nerve_task_add_access(nerve_task_t* task, nerve_buffer_t* buffer, nerve_access_mode_t mode,
                                     size_t offset, size_t size) {
  return guard("nerve_task_add_access", [&] {
    nerve_task& checked = checked_task(task);
    declare(checked, "nerve_task_add_access", [&] {
      if (mode != NERVE_ACCESS_READ && mode != NERVE_ACCESS_WRITE && mode != NERVE_ACCESS_READ_WRITE) {
        fail(ErrorCode::invalid_argument,
             fmt::format("{} is not a nerve_access_mode_t", static_cast<int>(mode)));
      }
      if (size == 0) fail(ErrorCode::invalid_argument, "an access needs at least one byte");
      check_access_count(checked.accesses.size() + 1);
      checked.accesses.push_back(
          declared_access(buffer, static_cast<nerve::Access>(mode), offset, size, false));
    });
  });
}

nerve_status_t nerve_task_set_compute_intensive(nerve_task_t* task, int compute_intensive) {
  return guard("nerve_task_set_compute_intensive",
               [&] { checked_task(task).compute_intensive = compute_intensive != 0; });
}

static_assert(NERVE_PRIORITY_HIGH == nerve::Priority::high && NERVE_PRIORITY_LOW == nerve::Priority::low &&
              NERVE_PRIORITY_NORMAL == nerve::Priority::normal);

nerve_status_t nerve_task_set_priority(nerve_task_t* task, int priority) {
  return guard("nerve_task_set_priority", [&] { checked_task(task).priority = priority; });
}

nerve_status_t nerve_task_set_device_kinds(nerve_task_t* task, uint32_t kinds) {
  return guard("nerve_task_set_device_kinds", [&] {
    nerve_task& checked = checked_task(task);
    constexpr std::uint32_t known = NERVE_DEVICE_KIND_CPU | NERVE_DEVICE_KIND_CUDA;
    if (kinds == 0 || (kinds & ~known) != 0) {
      fail(ErrorCode::invalid_argument,
           fmt::format("device kinds {:#x}: expected NERVE_DEVICE_KIND_CPU, NERVE_DEVICE_KIND_CUDA or both",
                       kinds));
    }
    checked.device_kinds = kinds;
  });
}

nerve_status_t nerve_task_set_name(nerve_task_t* task, const char* name) {
  return guard("nerve_task_set_name", [&] {
    nerve_task& checked = checked_task(task);
    if (name == nullptr) fail(ErrorCode::invalid_argument, "the name is NULL");
    checked.name = name;
  });
}

nerve_status_t nerve_task_submit(nerve_context_t* ctx, nerve_task_t* task, nerve_device_t device) {
  std::unique_ptr<nerve_task> owned(task);  // consumed whatever happens
  return guard("nerve_task_submit", [&] {
    nerve_context& context = checked_context(ctx);
    checked_task(owned.get());
    check_device(context, device, "device");
    submit_task(context, std::move(owned), nullptr, device);
  });
}

void nerve_task_destroy(nerve_task_t* task) { delete task; }

void nerve_task_fail(const char* message) {
  if (RunningKernel* kernel = RunningKernel::current()) {
    kernel->fail(message);
    return;
  }
  set_last_error(NERVE_ERROR_INVALID_ARGUMENT, "nerve_task_fail",
                 "called outside a task's kernel; only a running kernel can fail its task");
}

}  // extern "C"
