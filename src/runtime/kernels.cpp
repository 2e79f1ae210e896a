// kernels.cpp — submitting Kernel calls: where they may run, and their closure.
#include <algorithm>

#include <fmt/format.h>

#include "nerve/error.hpp"
#include "nerve/task.hpp"

#include "runtime/context_impl.hpp"
#include "task/kernel_task.hpp"

namespace nerve::detail {

bool ContextImpl::can_run_on(const TaskRecord& task, int device) const noexcept {
  if (device == 0) return task.kernel == nullptr ? !task.stream_only() : static_cast<bool>(task.kernel->cpu);
  return devices[static_cast<std::size_t>(device) - 1]->can_run(task);
}

bool ContextImpl::placeable_on(const TaskRecord& task, int device,
                               const PlacementNeeds& needs) const noexcept {
  if (!can_run_on(task, device)) return false;
  if (!needs.strict || device == 0) return true;  // the CPU workers use the host copies: no replica
  const Device& target = *devices[static_cast<std::size_t>(device) - 1];
  return needs.replica_bytes <= target.memory().limit() && target.takes_accesses(task);
}

std::string ContextImpl::why_left_out(const TaskRecord& task, int device, const PlacementNeeds& needs) const {
  const Device& target = *devices[static_cast<std::size_t>(device) - 1];
  if (needs.strict && needs.replica_bytes > target.memory().limit()) {
    return fmt::format("its memory ({} bytes) is smaller than the whole buffers the call touches ({} bytes)",
                       target.memory().limit(), needs.replica_bytes);
  }
  return target.why_refused(task);
}

ContextImpl::PlacementNeeds ContextImpl::placement_needs(const TaskRecord& task) const {
  PlacementNeeds needs{true, CoherenceEngine::replica_footprint(task)};
  for (int device = 0; device < static_cast<int>(device_count()); ++device) {
    if (placeable_on(task, device, needs)) return needs;
  }
  needs.strict = false;
  return needs;
}

namespace {
// not_for_backend(): why a device of a kind the kernel implements does not run it. One kind, two
// backends: a plugin's devices of kind opencl or cuda run the plugin's own implementation, which
// nerve's OpenCL and CUDA devices cannot, and the other way round.
std::string not_for_backend(const std::string& kernel, const DeviceInfo& device) {
  return fmt::format(
      "kernel '{}' has an implementation for {} devices, but not one that device {} ('{}', "
      "backend '{}') runs: each backend runs only the implementations made for it "
      "(nerve::opencl::attach, nerve::cuda::attach, or a plugin's own)",
      kernel, nerve::name(device.kind), device.index, device.name, device.backend);
}
}  // namespace

std::string ContextImpl::why_no_device_of(DeviceKind kind) const {
  if (config.gpu.devices.empty()) return "gpu.devices is none (no accelerator was opened)";
  std::string why;
  for (const BackendWithoutDevices& backend : backends_without_devices) {
    if (backend.kind != kind) continue;
    why += fmt::format("{}the backend '{}' found no device{}{}", why.empty() ? "" : "; ", backend.name,
                       backend.reason.empty() ? "" : ": ", backend.reason);
  }
  return why;
}

// A kernel call must have somewhere to run: the named device, or any enabled one.
void ContextImpl::check_placeable(const TaskRecord& task) const {
  const auto foreign = [&](const DeviceInfo& info) {
    return info.index > 0 && task.kernel->implements(info.kind);
  };
  if (task.device_hint >= 0) {
    if (can_run_on(task, task.device_hint)) return;
    const std::vector<DeviceInfo> infos = device_infos();
    const DeviceInfo& info = infos[static_cast<std::size_t>(task.device_hint)];
    if (foreign(info)) throw Error(ErrorCode::invalid_argument, not_for_backend(task.kernel->name, info));
    throw Error(ErrorCode::invalid_argument,
                fmt::format("kernel '{}' has no implementation for device {} ({})", task.kernel->name,
                            task.device_hint, info.name));
  }
  for (int device = 0; device < static_cast<int>(device_count()); ++device) {
    if (can_run_on(task, device)) return;
  }
  const std::vector<DeviceInfo> infos = device_infos();
  std::string kinds;
  for (const auto& info : infos) kinds += (kinds.empty() ? "" : ", ") + std::string(nerve::name(info.kind));
  std::string why;
  for (const auto& info : infos) {
    if (why.empty() && foreign(info)) why = ": " + not_for_backend(task.kernel->name, info);
  }
  // A kind the kernel implements and no device here has: say why there is none, as gpu.devices
  // naming that backend would (a CUDA-only kernel on a machine without a GPU driver, say).
  for (const DeviceKind kind : {DeviceKind::opencl, DeviceKind::cuda, DeviceKind::test}) {
    if (!task.kernel->implements(kind) ||
        std::any_of(infos.begin(), infos.end(), [&](const DeviceInfo& info) { return info.kind == kind; }))
      continue;
    if (const std::string reason = why_no_device_of(kind); !reason.empty()) {
      why += fmt::format("{} it has an implementation for {} devices, and {}", why.empty() ? ":" : ";",
                         nerve::name(kind), reason);
    }
  }
  throw Error(ErrorCode::invalid_argument,
              fmt::format("kernel '{}' implements none of this context's devices ({}){}", task.kernel->name,
                          kinds, why));
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
