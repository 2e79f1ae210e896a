// devices.cpp — placing tasks on the CPU workers or a device, moving their data there first, and
// running them on devices.
#include <fmt/format.h>

#include "nerve/error.hpp"

#include "memory/buffer_state.hpp"
#include "perf/history_model.hpp"
#include "runtime/context_impl.hpp"
#include "task/kernel_task.hpp"

namespace nerve::detail {

int ContextImpl::add_test_device(const TestDeviceOptions& options) {
  const auto index = static_cast<int>(devices.size()) + 1;
  return add_device(std::make_unique<TestDevice>(index, static_cast<unsigned>(index), options));
}

int ContextImpl::add_device(std::unique_ptr<Device> device) {
  if (buffer_ids.load(std::memory_order_relaxed) != 0 || in_flight() != 0) {
    throw Error(ErrorCode::invalid_argument, "devices must be added before the first buffer or task");
  }
  const auto index = static_cast<int>(devices.size()) + 1;
  if (device->info().index != index || device->memory().index() != static_cast<unsigned>(index)) {
    throw Error(ErrorCode::internal,
                fmt::format("device '{}' is numbered {} (memory node {}), expected {}", device->info().name,
                            device->info().index, device->memory().index(), index));
  }
  const TaskRecord closure_probe{};
  if (device->can_run(closure_probe)) ++closure_devices;
  devices.push_back(std::move(device));
  devices.back()->start(*this);
  std::vector<MemoryNode*> nodes{&host_memory};
  for (auto& each : devices) nodes.push_back(&each->memory());
  coherence = std::make_unique<CoherenceEngine>(std::move(nodes), *this);
  coherence->set_transfer_observer(recorder);
  if (config.scheduler.policy == SchedulerPolicy::heft) {
    heft = std::make_unique<HeftPlacer>(device_count(), scheduler.slot_count());
    if (bus == nullptr) bus = std::make_unique<BusModel>(perf->models()->directory());
  }
  return index;
}

std::vector<AccessView> ContextImpl::device_views(const TaskRecord& task, const Device& device) const {
  std::vector<AccessView> views(task.access_count);
  for (std::size_t i = 0; i < task.access_count; ++i) {
    const AccessRecord& access = task.accesses[i];
    views[i] =
        AccessView{coherence->replica(*access.buffer, device.memory().index()) + access.offset, access.size};
  }
  return views;
}

DeviceLaunch ContextImpl::prepare_launch(TaskRecord* task, Device& device) {
  DeviceLaunch launch;
  const KernelTask* kernel = kernel_task_of(*task);
  if (kernel == nullptr) {
    throw Error(ErrorCode::internal,
                fmt::format("task '{}' on {} is not a kernel call",
                            task->name != nullptr ? task->name : "(unnamed)", device.info().name));
  }
  launch.implementation = kernel->kernel->by_kind[static_cast<std::size_t>(device.info().kind)].get();
  launch.views = device_views(*task, device);
  launch.call = kernel->describe(launch.views.data(), device.info().index, nullptr);
  task->phase.store(status_running, std::memory_order_relaxed);
  task->start_ns = monotonic_ns();
  return launch;
}

void ContextImpl::complete(TaskRecord* task, Device& /*device*/, std::exception_ptr error,
                           std::int64_t end_ns) noexcept {
  destroy_closure(task);
  std::uint32_t outcome = status_succeeded;
  if (error != nullptr) {
    task->error = std::move(error);
    outcome = status_failed;
  }
  ThreadState& thread = current_thread();
  perf->device_task(thread, *task, task->start_ns, end_ns != 0 ? end_ns : monotonic_ns(), outcome);
  if (heft != nullptr) heft_finished(task);
  finish(task, thread, outcome);
}

// A call nerve placed on a device that turned out unable to run it (its program does not build there,
// or the device refused its launch) goes where its kernel can run, as a call placed after the failure was
// known would: the device is left out by placeable_on() from now on. Its replicas there are released first,
// and acquire() on the new device brings its data there through the coherence layer — what the device already
// holds as the only valid copy (a write claimed there, bytes copied there) is copied back, not lost.
bool ContextImpl::place_elsewhere(TaskRecord* task, Device& device) noexcept {
  if (task->device_hint >= 0 || task->kind != TaskKind::function) return false;  // sent there: it fails
  const int from = device.info().index;
  int fallback = -1;
  try {
    const PlacementNeeds needs{true, CoherenceEngine::replica_footprint(*task)};
    for (int each = 0; each < static_cast<int>(device_count()) && fallback < 0; ++each) {
      if (each != from && placeable_on(*task, each, needs)) fallback = each;
    }
  } catch (const std::bad_alloc&) {  // no memory to weigh the others: it fails with the device's error
  }
  if (fallback < 0) return false;  // no other device runs the kernel: it fails with the device's error
  task->phase.store(status_ready, std::memory_order_relaxed);  // prepare_launch() may have said running
  task->start_ns = 0;
  coherence->release(task, device.memory().index());
  if (heft != nullptr) heft_finished(task);  // its expected run on `from` will not happen
  int chosen = fallback;
  try {
    chosen = choose_device(task);  // leaves `from` out (placeable_on), heft's decision log included
  } catch (...) {                  // out of memory while weighing the choices: the first that runs it
  }
  if (chosen == from) chosen = fallback;
  task->device = static_cast<std::int16_t>(chosen);
  // It waited for the device meanwhile: its data is valid on the new device when acquired there.
  acquire_and_dispatch(task, current_thread(), false, /*retried=*/true);
  return true;
}

std::vector<DeviceInfo> ContextImpl::device_infos() const {
  std::vector<DeviceInfo> infos;
  DeviceInfo cpu;
  cpu.index = 0;
  cpu.kind = DeviceKind::cpu;
  cpu.name = fmt::format("CPU workers ({})", scheduler.slot_count());
  cpu.compute_units = scheduler.slot_count();
  cpu.memory_node = 0;
  infos.push_back(cpu);
  for (const auto& device : devices) infos.push_back(device->info());
  return infos;
}

void ContextImpl::validate_device_hint(int device, const char* name) const {
  if (device < -1 || device >= static_cast<int>(device_count())) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("task '{}' asks for device {}, but this context has devices 0..{}",
                            name != nullptr ? name : "(unnamed)", device, device_count() - 1));
  }
}

void ContextImpl::check_closure_device(const TaskRecord& task, int device, const char* name) const {
  if (device == -1) {  // anywhere: some device must run it
    for (int each = 0; each < static_cast<int>(device_count()); ++each) {
      if (can_run_on(task, each)) return;
    }
    const std::string why = why_no_device_of(DeviceKind::cuda);
    throw Error(
        ErrorCode::invalid_argument,
        fmt::format("task '{}' is a C kernel for CUDA devices only, and this context has no device of "
                    "the built-in CUDA backend (C kernels run on its devices alone, not on a plugin's "
                    "devices, whatever their kind){}{}",
                    name != nullptr ? name : "(unnamed)", why.empty() ? "" : ": ", why));
  }
  validate_device_hint(device, name);
  if (device == 0) {
    if (!task.stream_only()) return;
    throw Error(ErrorCode::invalid_argument,
                fmt::format("task '{}' is a C kernel for CUDA devices only, submitted to the CPU workers",
                            name != nullptr ? name : "(unnamed)"));
  }
  const Device& target = *devices[static_cast<std::size_t>(device) - 1];
  if (target.can_run(task)) return;
  throw Error(
      ErrorCode::invalid_argument,
      fmt::format("task '{}' asks for device {} ({} '{}', backend '{}'), which cannot run {}: only "
                  "Kernel calls with an implementation for that device run there",
                  name != nullptr ? name : "(unnamed)", device, nerve::name(target.info().kind),
                  target.info().name, target.info().backend,
                  task.stream_launcher() ? "a C kernel (the built-in CUDA backend's devices alone can)"
                                         : "a plain function"));
}

// Data locality first: the device holding the most bytes the task reads, the CPU workers on a tie
// (or when no device can run it). An explicit TaskOptions::device wins. A device that runs the
// kernel but cannot take the task's accesses as they are, or whose memory is too small for the
// task's replicas however much of it were free, is left out while another can run it: the task
// would only fail there.
int ContextImpl::choose_device(TaskRecord* task) {
  if (task->device_hint >= 0) return task->device_hint;
  // Most tasks have one choice (closures, single-kind kernels): no need to weigh their data — unless
  // heft explains each kernel call's placement, even a forced one, in its decision log.
  if (heft == nullptr || task->kernel == nullptr) {
    int only = -1;
    unsigned choices = 0;
    for (int device = 0; device < static_cast<int>(device_count()) && choices < 2; ++device) {
      if (can_run_on(*task, device)) {
        only = device;
        ++choices;
      }
    }
    if (choices == 1) return only;
  }
  const PlacementNeeds needs = placement_needs(*task);
  int best = -1;
  std::size_t best_bytes = 0;
  if (placeable_on(*task, 0, needs)) {
    best = 0;
    for (std::size_t i = 0; i < task->access_count; ++i) {
      const AccessRecord& access = task->accesses[i];
      if (access.mode == Access::write) continue;
      best_bytes += coherence->valid_bytes(*access.buffer, access.offset, access.size, 0);
    }
  }
  for (auto& device : devices) {
    if (!placeable_on(*task, device->info().index, needs)) continue;
    std::size_t bytes = 0;
    for (std::size_t i = 0; i < task->access_count; ++i) {
      const AccessRecord& access = task->accesses[i];
      if (access.mode == Access::write) continue;
      bytes += coherence->valid_bytes(*access.buffer, access.offset, access.size, device->memory().index());
    }
    if (best < 0 || bytes > best_bytes) {
      best = device->info().index;
      best_bytes = bytes;
    }
  }
  if (heft != nullptr && model_name(*task) != nullptr) [[unlikely]]
    return place_heft(task, best, needs);
  return best;
}

void ContextImpl::place_with_data(TaskRecord* task, ThreadState& thread, bool submission) {
  if (task->cancel_pending.load(std::memory_order_acquire)) {
    task->device = -1;  // it will not run: cancel it on the CPU side without moving data
    if (task->kind == TaskKind::function && !cpu_may_run(*task))
      cancelled_unplaced.fetch_add(1, std::memory_order_relaxed);
    scheduler.enqueue(task, thread, submission, -1);
    return;
  }
  task->device = static_cast<std::int16_t>(task->kind == TaskKind::function ? choose_device(task) : 0);
  acquire_and_dispatch(task, thread, submission);
}

void ContextImpl::acquire_and_dispatch(TaskRecord* task, ThreadState& thread, bool submission, bool retried) {
  const unsigned node =
      task->device == 0 ? 0 : devices[static_cast<std::size_t>(task->device) - 1]->memory().index();
  const std::uint64_t frees = memory_frees[node].load(std::memory_order_acquire);
  bool ready = false;
  std::exception_ptr failure;
  try {
    ready = coherence->acquire(task, node);
  } catch (const MemoryBusy&) {
    {
      std::lock_guard lock(memory_waiters_mutex);
      memory_waiters[node].push_back(task);
    }
    if (memory_frees[node].load(std::memory_order_acquire) != frees) memory_freed(node);
    return;
  } catch (...) {
    failure = std::current_exception();
  }
  if (failure != nullptr) {
    // The task's data can never fit there: it fails with that error (dependents cancelled). Finished
    // out of the handler: the exception is then only the task's, whose last release frees it (a
    // handler still open here could free it after a waiter read it, an order ThreadSanitizer cannot
    // see through libstdc++'s uninstrumented counts).
    if (heft != nullptr) heft_finished(task);
    task->error = std::move(failure);
    task->device = -1;
    destroy_closure(task);  // it never runs: nothing else releases what the closure holds
    finish(task, thread, status_failed);
    return;
  }
  // Copies that acquire() started may all have finished before it returned: the data became valid
  // now, not when the task became ready (a recorded task counts the bytes its copies moved).
  const bool copied = recorder != nullptr && task->bytes_moved.load(std::memory_order_relaxed) != 0;
  if (ready) dispatch(task, thread, submission, /*waited=*/retried || copied);
}

void ContextImpl::memory_freed(unsigned node) noexcept {
  memory_frees[node].fetch_add(1, std::memory_order_acq_rel);
  std::vector<TaskRecord*> retry;
  {
    std::lock_guard lock(memory_waiters_mutex);
    retry.swap(memory_waiters[node]);
  }
  if (retry.empty()) return;
  ThreadState& thread = current_thread();
  for (TaskRecord* task : retry) acquire_and_dispatch(task, thread, false, /*retried=*/true);
}

void ContextImpl::data_ready(TaskRecord* task) { dispatch(task, current_thread(), false, /*waited=*/true); }

void ContextImpl::dispatch(TaskRecord* task, ThreadState& thread, bool submission, bool waited) {
  if (task->kind == TaskKind::host_access) {
    grant_mapping(task, thread);
    return;
  }
  // Copies done (or room made for them) now; with nothing to wait for, the data was valid when the
  // task became ready.
  if (recorder != nullptr) task->data_valid_ns = waited ? monotonic_ns() : task->ready_ns;
  if (task->device == 0) {
    scheduler.enqueue(task, thread, submission, preferred_numa_node(task));
  } else {
    devices[static_cast<std::size_t>(task->device) - 1]->submit(task);
  }
}

void ContextImpl::run_on_device(TaskRecord* task, Device& device) {
  ThreadState& thread = current_thread();
  std::uint32_t outcome = status_cancelled;
  if (!task->cancel_pending.load(std::memory_order_acquire) &&
      (task->group == nullptr || !task->group->cancel_requested.load(std::memory_order_acquire))) {
    task->phase.store(status_running, std::memory_order_relaxed);
    const std::vector<AccessView> views = device_views(*task, device);
    const std::int64_t start = monotonic_ns();
    outcome = invoke_closure(task, thread, views.data());
    perf->device_task(thread, *task, start, monotonic_ns(), outcome);
  } else if (task->cancel_cause == TaskRecord::CancelCause::data) {
    outcome = status_failed;  // its input could not be brought: it fails, it was not cancelled
  }
  if (heft != nullptr) heft_finished(task);
  destroy_closure(task);
  finish(task, thread, outcome);
}

}  // namespace nerve::detail
