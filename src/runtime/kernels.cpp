// kernels.cpp — submitting Kernel calls: where they may run, and their closure.
#include <fmt/format.h>

#include "nerve/error.hpp"
#include "nerve/task.hpp"

#include "runtime/context_impl.hpp"
#include "task/kernel_task.hpp"

namespace nerve::detail {

bool ContextImpl::can_run_on(const TaskRecord& task, int device) const noexcept {
  if (device == 0) return task.kernel == nullptr ? !task.stream_only : static_cast<bool>(task.kernel->cpu);
  return devices[static_cast<std::size_t>(device) - 1]->can_run(task);
}

bool ContextImpl::placeable_on(const TaskRecord& task, int device, bool strict) const noexcept {
  if (!can_run_on(task, device)) return false;
  return !strict || device == 0 || devices[static_cast<std::size_t>(device) - 1]->takes_accesses(task);
}

bool ContextImpl::strict_placement(const TaskRecord& task) const noexcept {
  for (int device = 0; device < static_cast<int>(device_count()); ++device) {
    if (placeable_on(task, device, true)) return true;
  }
  return false;
}

// A kernel call must have somewhere to run: the named device, or any enabled one.
void ContextImpl::check_placeable(const TaskRecord& task) const {
  if (task.device_hint >= 0) {
    if (!can_run_on(task, task.device_hint)) {
      throw Error(
          ErrorCode::invalid_argument,
          fmt::format("kernel '{}' has no implementation for device {} ({})", task.kernel->name,
                      task.device_hint, device_infos()[static_cast<std::size_t>(task.device_hint)].name));
    }
    return;
  }
  for (int device = 0; device < static_cast<int>(device_count()); ++device) {
    if (can_run_on(task, device)) return;
  }
  std::string kinds;
  for (const auto& info : device_infos())
    kinds += (kinds.empty() ? "" : ", ") + std::string(nerve::name(info.kind));
  throw Error(
      ErrorCode::invalid_argument,
      fmt::format("kernel '{}' implements none of this context's devices ({})", task.kernel->name, kinds));
}

TaskRecord* submit_kernel(ContextImpl* context, const TaskOptions* options, GroupState* group,
                          PoolState* pool, bool keep_handle, const KernelSubmission& call) {
  const Kernel& kernel = *call.kernel;
  kernel.state().mark_used();  // configured before first use, then immutable (kernel.hpp)
  TaskDraft draft = live(context).begin_task(sizeof(KernelTask), alignof(KernelTask));
  TaskRecord* task = draft.record;
  KernelTask* closure = nullptr;
  try {
    closure = ::new (draft.closure) KernelTask{kernel.shared_state(), {}, {}, {}};
    closure->modes.reserve(call.access_count);
    for (std::size_t i = 0; i < call.access_count; ++i) closure->modes.push_back(call.accesses[i].mode);
    std::size_t total = 0;
    for (std::size_t i = 0; i < call.value_count; ++i) total += call.values[i].size;
    closure->value_bytes.resize(total);
    std::size_t offset = 0;
    for (std::size_t i = 0; i < call.value_count; ++i) {
      std::memcpy(closure->value_bytes.data() + offset, call.values[i].data, call.values[i].size);
      offset += call.values[i].size;
    }
    offset = 0;
    for (std::size_t i = 0; i < call.value_count; ++i) {
      closure->values.push_back(KernelValue{closure->value_bytes.data() + offset, call.values[i].size});
      offset += call.values[i].size;
    }
    task->kernel = &kernel.state();
    task->kernel_keepalive = kernel.shared_state();
    task->device_hint = static_cast<std::int16_t>(options != nullptr ? options->device : -1);
    if (task->device_hint >= static_cast<int>(context->device_count()) || task->device_hint < -1) {
      context->validate_device_hint(task->device_hint, kernel.name().c_str());
    }
    context->check_placeable(*task);
  } catch (...) {
    if (closure != nullptr) closure->~KernelTask();
    task->kernel = nullptr;
    task->kernel_keepalive.reset();
    context->abandon_task(draft);
    throw;
  }
  SubmitInfo info{};
  info.ops = &KernelTask::ops;
  info.accesses = call.accesses;
  info.access_count = call.access_count;
  info.group = group;
  info.keep_handle = keep_handle;
  info.pool = pool;
  AfterRecords after;
  after.apply(options, info);
  if (info.name == nullptr) info.name = task->kernel->name.c_str();
  return context->commit_task(draft, info);
}

}  // namespace nerve::detail
