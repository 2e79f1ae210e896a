// submit.cpp — C tasks as runtime tasks: the kernel closure, the running-kernel record and submission.
#include "capi/submit.hpp"

#include <mutex>
#include <new>
#include <vector>

#include <fmt/format.h>

#include "nerve/error.hpp"

#include "capi/errors.hpp"
#include "capi/running_kernel.hpp"

namespace nerve::capi {
namespace {

thread_local RunningKernel* current_kernel = nullptr;

[[noreturn]] void throw_named_failure(const RunningKernel& running, const char* message) {
  throw Error(ErrorCode::task_failed, fmt::format("task '{}' failed: {}", running.name(), message));
}

// KernelClosure is what the runtime stores for a C task: the task object itself (fn, desc, accesses),
// and its interned name. Its views are ignored: a C kernel finds its data with
// nerve_buffer_get_device_ptr(), which checks the buffer against the task's accesses.
struct KernelClosure {
  std::unique_ptr<nerve_task> task;
  const char* name;

  static void invoke(void* self, const detail::AccessView* views) {
    const KernelClosure& closure = *static_cast<KernelClosure*>(self);
    RunningKernel running(*closure.task, closure.name, views);
    try {
      closure.task->fn(closure.task->desc, detail::running_device(), detail::running_stream());
    } catch (const Error& error) {
      if (error.code() == ErrorCode::cancelled) throw;  // it waited for a cancelled task: not its failure
      throw_named_failure(running, error.what());
    } catch (const std::exception& error) {
      throw_named_failure(running, error.what());  // a C++ kernel threw: the wait names the task
    } catch (...) {
      throw_named_failure(running, "an exception that is not a std::exception");
    }
    // Thrown after the kernel returned: C frames are never unwound.
    if (running.failed()) throw_named_failure(running, running.message().c_str());
  }
  static void destroy(void* self) noexcept { static_cast<KernelClosure*>(self)->~KernelClosure(); }
  static constexpr detail::ClosureOps ops{&invoke, &destroy, true};
};

// BufferPins hold a reference on each buffer of a task while it is submitted, so that a concurrent
// nerve_buffer_free() cannot delete a BufferState between the liveness check and the runtime taking
// its own references.
class BufferPins {
 public:
  explicit BufferPins(std::size_t count) { pinned_.reserve(count); }
  ~BufferPins() {
    for (detail::BufferState* state : pinned_) detail::release(state);
  }
  BufferPins(const BufferPins&) = delete;
  BufferPins& operator=(const BufferPins&) = delete;

  // pin() checks that `buffer` is alive and takes a reference on its state.
  detail::BufferState* pin(nerve_buffer& buffer) {
    std::lock_guard lock(buffer.lock);
    if (buffer.freed) {
      throw Error(ErrorCode::buffer_misuse,
                  fmt::format("submit of a task that accesses {}, which was already freed (use after free)",
                              describe(buffer)));
    }
    detail::retain(buffer.state);
    pinned_.push_back(buffer.state);  // cannot throw: reserved
    return buffer.state;
  }

 private:
  std::vector<detail::BufferState*> pinned_;
};

}  // namespace

RunningKernel::RunningKernel(const nerve_task& task, const char* name,
                             const detail::AccessView* views) noexcept
    : task_(task), name_(name), views_(views), previous_(current_kernel) {
  current_kernel = this;
}

RunningKernel::~RunningKernel() { current_kernel = previous_; }

RunningKernel* RunningKernel::current() noexcept { return current_kernel; }

bool RunningKernel::declares(const nerve_buffer* buffer) const noexcept { return data_of(buffer) != nullptr; }

void* RunningKernel::data_of(const nerve_buffer* buffer) const noexcept {
  for (std::size_t i = 0; i < task_.accesses.size(); ++i) {
    const TaskAccess& access = task_.accesses[i];
    if (access.buffer == buffer) return static_cast<std::byte*>(views_[i].data) - access.offset;
  }
  return nullptr;
}

void RunningKernel::fail(const char* message) noexcept {
  if (failed_) return;
  failed_ = true;
  try {
    message_ = message != nullptr && *message != '\0' ? message : "(nerve_task_fail gave no message)";
  } catch (...) {
    message_.clear();  // out of memory: the failure still counts, without its text
  }
}

void submit_task(nerve_context& ctx, std::unique_ptr<nerve_task> task, detail::PoolState* pool, int device) {
  if (task->declaration_failed) {
    fail(task->failed_declaration_code,
         fmt::format("not submitted: an access declaration of this task failed, and it would run without "
                     "that data ({})",
                     task->failed_declaration.empty() ? "no message" : task->failed_declaration));
  }
  // At most NERVE_TASK_MAX_ACCESSES: the declarations refused any beyond (capi/task.cpp).
  const std::size_t count = task->accesses.size();
  BufferPins pins(count);
  std::vector<detail::AccessSpec> specs;
  specs.reserve(count);
  for (const TaskAccess& access : task->accesses) {
    if (access.buffer->owner != &ctx) {
      fail(ErrorCode::buffer_misuse,
           fmt::format("a task submitted to one context accesses {} of another context",
                       describe(*access.buffer)));
    }
    specs.push_back({pins.pin(*access.buffer), access.offset, access.size, access.mode});
  }

  detail::SubmitInfo info{};
  info.ops = &KernelClosure::ops;
  info.accesses = specs.data();
  info.access_count = specs.size();
  info.name = task->name.empty() ? nullptr : ctx.names.intern(task->name);
  info.pool = pool;
  info.compute_intensive = task->compute_intensive;
  info.priority = task->priority;
  info.device = device;
  // A C kernel may be the seed's launcher: asked for by its kinds, or by submitting to a device's
  // index (a device that cannot run it refuses at submit).
  info.stream_launcher = (task->device_kinds & NERVE_DEVICE_KIND_CUDA) != 0 || device > 0;
  info.stream_only = info.stream_launcher && (task->device_kinds & NERVE_DEVICE_KIND_CPU) == 0;

  detail::ContextImpl* impl = ctx.impl();
  const detail::TaskDraft draft = detail::begin_task(impl, sizeof(KernelClosure), alignof(KernelClosure));
  ::new (draft.closure) KernelClosure{std::move(task), info.name};
  // On error commit_task() destroys the closure, and with it the task object.
  detail::commit_task(impl, draft, info);
}

}  // namespace nerve::capi
