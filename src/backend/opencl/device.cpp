#include "backend/opencl/device.hpp"

#include <utility>

#include <fmt/format.h>

#include "memory/buffer_state.hpp"
#include "task/kernel_task.hpp"
#include "task/task_record.hpp"
#include "util/log.hpp"
#include "util/monotonic_clock.hpp"

namespace nerve::detail::opencl {
namespace {

std::unique_ptr<OpenclMemoryNode> make_node(const PlatformDevice& device, const DeviceOpenOptions& options) {
  auto engine = std::make_shared<Engine>(device, options.stream_count, options.max_pending_transfers);
  return std::make_unique<OpenclMemoryNode>(static_cast<unsigned>(options.index),
                                            options.node_name(device.name), std::move(engine),
                                            options.peer_access, staging_mode_from_environment());
}

bool cancelled(const TaskRecord& task) noexcept {
  return task.cancel_pending.load(std::memory_order_acquire) ||
         (task.group != nullptr && task.group->cancel_requested.load(std::memory_order_acquire));
}

}  // namespace

OpenclDevice::OpenclDevice(const PlatformDevice& device, DeviceInfo info, const DeviceOpenOptions& options)
    : Device(std::move(info), make_node(device, options)),
      engine_(static_cast<OpenclMemoryNode&>(memory()).shared_engine()),
      node_(&static_cast<OpenclMemoryNode&>(memory())),
      programs_(device, engine_->context(), this->info().index),
      pocl_sizes_(PoclSizeGuard::is_needed_for(device.platform_name, device.cpu_device)) {}

OpenclDevice::~OpenclDevice() { stop(); }

// Only nerve's own OpenCL programs (opencl::attach): an implementation a plugin attached for its
// devices of kind opencl is not one, and would reach launch() with nothing to build.
bool OpenclDevice::can_run(const TaskRecord& task) const noexcept {
  return task.kind == TaskKind::function && program_of(task) != nullptr;
}

std::optional<std::size_t> OpenclDevice::misaligned_access(const TaskRecord& task) const noexcept {
  const std::size_t alignment = engine_->device().base_alignment;
  for (std::size_t i = 0; i < task.access_count; ++i) {
    const AccessRecord& access = task.accesses[i];
    // Replicas start aligned, so an access starts aligned in its block exactly when its offset is.
    if (access.size != 0 && alignment != 0 && access.offset % alignment != 0) return i;
  }
  return std::nullopt;
}

bool OpenclDevice::takes_accesses(const TaskRecord& task) const noexcept {
  return !misaligned_access(task) && takes_work_size(task) && !refused_program(task);
}

std::string OpenclDevice::why_refused(const TaskRecord& task) const {
  if (const std::optional<std::size_t> i = misaligned_access(task)) {
    return fmt::format(
        "access {} starts at byte {}, and this device starts a sub-buffer only at a multiple of {} bytes", *i,
        task.accesses[*i].offset, engine_->device().base_alignment);
  }
  if (const OpenclProgram* program = program_of(task); program != nullptr && !takes_work_size(task)) {
    const std::size_t local = program->options.local_size;
    const std::size_t global = default_global_size(task);
    if (work_size_fit(local, 0) == WorkSizeFit::over_limit) {
      return fmt::format("its work-group size {} is over this device's limit of {}", local,
                         engine_->device().max_work_group);
    }
    return fmt::format("its work-group size {} does not divide the global size {}", local, global);
  }
  if (refused_program(task)) return "its program did not build here, or a launch of it was refused here";
  return "it cannot take this call";
}

// A launch the device refuses whatever the data — a work-group size over the device's limit, or one
// that does not divide the global size taken from access 0 — is known before placement: the call
// then goes where its kernel runs instead of failing here (under heft, every failed call left the
// device uncalibrated, so the next one was sent here again). A global size that Options::global_size
// computes is known at launch only (launch_refused() handles that one).
bool OpenclDevice::takes_work_size(const TaskRecord& task) const noexcept {
  const OpenclProgram* program = program_of(task);
  if (program == nullptr) return true;
  const bool global_known = !program->options.global_size && task.access_count != 0;
  return work_size_fit(program->options.local_size, global_known ? default_global_size(task) : 0) ==
         WorkSizeFit::fits;
}

OpenclDevice::WorkSizeFit OpenclDevice::work_size_fit(std::size_t local, std::size_t global) const noexcept {
  if (local == 0) return WorkSizeFit::fits;  // the driver chooses
  const std::size_t most = engine_->device().max_work_group;
  if (most != 0 && local > most) return WorkSizeFit::over_limit;
  return global % local == 0 ? WorkSizeFit::fits : WorkSizeFit::not_a_divisor;
}

std::size_t OpenclDevice::default_global_size(const TaskRecord& task) noexcept {
  const std::size_t element = task.accesses[0].buffer->element_size;
  return task.accesses[0].size / (element == 0 ? 1 : element);
}

const OpenclProgram* OpenclDevice::program_of(const TaskRecord& task) noexcept {
  if (task.kernel == nullptr) return nullptr;
  return dynamic_cast<const OpenclProgram*>(
      task.kernel->by_kind[static_cast<std::size_t>(DeviceKind::opencl)].get());
}

bool OpenclDevice::refused_program(const TaskRecord& task) const noexcept {
  if (!any_refused_.load(std::memory_order_acquire)) return false;
  const OpenclProgram* program = program_of(task);
  if (program == nullptr) return false;
  std::shared_lock lock(refused_mutex_);  // placements on every thread read it together
  return refused_programs_.contains(program->id);
}

void OpenclDevice::start(DeviceHost& host) {
  host_ = &host;
  launcher_.start([this](TaskRecord* task) { launch(task); });
}

void OpenclDevice::submit(TaskRecord* task) { launcher_.submit(task); }

void OpenclDevice::stop() noexcept { launcher_.stop(); }

DeviceCapabilities OpenclDevice::capabilities() const noexcept {
  return DeviceCapabilities{false, info().unified_memory, engine_->queue_count(),
                            engine_->max_pending_transfers()};
}

DeviceCounters OpenclDevice::counters() const {
  DeviceCounters counters = engine_->snapshot();
  counters.launches_held = pocl_sizes_.held();
  return counters;
}

bool OpenclDevice::can_access_peer(const Device& other) const noexcept {
  const auto* peer = dynamic_cast<const OpenclDevice*>(&other);
  return peer != nullptr && peer != this && node_->direct_peer(*peer->node_);
}

void OpenclDevice::launch(TaskRecord* task) {
  if (cancelled(*task)) {
    host_->run_on_device(task, *this);  // it sees the cancellation and finishes the task as cancelled
    return;
  }
  Operation* op = nullptr;
  std::exception_ptr failure;
  try {
    // The program first, before the task counts as running here: a call that cannot run here may
    // still go elsewhere.
    const OpenclProgram* program = program_of(*task);
    if (program == nullptr) {
      throw Error(ErrorCode::internal,
                  fmt::format("kernel '{}' reached OpenCL device '{}' without an OpenCL implementation",
                              task->kernel != nullptr ? task->kernel->name.c_str() : "(none)", info().name));
    }
    cl_kernel kernel = nullptr;
    std::exception_ptr build_failure;
    try {
      kernel = programs_.kernel(*program, task->kernel->name.c_str());
    } catch (const Error& error) {
      // Only the program's own failure (it does not build, or lacks its entry), which the cache keeps:
      // a passing shortage (out of memory) leaves the device in for later calls.
      if (error.code() != ErrorCode::task_failed) throw;
      refuse_program(*program, *task, error, "cannot run");
      // Placed here by nerve (before the failure was known) while another device runs the kernel:
      // it runs there, as the calls placed from now on do.
      if (host_->place_elsewhere(task, *this)) return;
      build_failure = std::current_exception();
    }
    if (build_failure != nullptr) {  // completed out of the handler (see below)
      // No kernel ran: the task took no time on the device (the build is no run, as when it succeeds).
      const std::int64_t now = monotonic_ns();
      task->start_ns = now;
      host_->complete(task, *this, std::move(build_failure), now);
      return;
    }
    DeviceLaunch launch = host_->prepare_launch(task, *this);
    // The run starts now: building (or loading) the program on first use is not the kernel's time,
    // and would teach the performance models that a fast device is slow.
    task->start_ns = monotonic_ns();
    std::size_t queue_index = 0;
    cl_command_queue queue = engine_->next_queue(&queue_index);
    launch.call.queue = queue;
    op = engine_->acquire();
    op->owner = this;
    op->task = task;
    op->finish = &OpenclDevice::finish_launch;
    std::size_t global = 0;
    // Whether a refusal below would refuse every call of the kernel alike (its arguments do not fit
    // the function, a work-group size over the device's limit, the driver refusing the kernel's
    // arguments or work sizes), or only this one (its own sizes; a shortage of the driver's).
    bool every_call = true;
    try {
      try {
        bind_arguments(kernel, launch, *task, *op);
      } catch (const Error& error) {
        every_call = error.code() == ErrorCode::invalid_argument;  // a mismatch, not the driver's failure
        throw;
      }
      global = global_size(*program, launch, *task);
      const std::size_t local = program->options.local_size;
      switch (work_size_fit(local, global)) {
        case WorkSizeFit::fits: break;
        case WorkSizeFit::over_limit:
          throw Error(
              ErrorCode::invalid_argument,
              fmt::format("kernel '{}': the local size {} is over OpenCL device '{}''s work-group limit {}",
                          launch.call.kernel_name, local, info().name, engine_->device().max_work_group));
        case WorkSizeFit::not_a_divisor:
          every_call = false;
          throw Error(ErrorCode::invalid_argument,
                      fmt::format("kernel '{}': the global size {} is not a multiple of the local size {}",
                                  launch.call.kernel_name, global, local));
      }
      if (global == 0) {  // nothing to run
        engine_->recycle(std::exchange(op, nullptr));
        host_->complete(task, *this, nullptr);
        return;
      }
      pocl_sizes_.before_launch(kernel, global);
      op->enqueued_ns = monotonic_ns();
      const cl_int status = clEnqueueNDRangeKernel(queue, kernel, 1, nullptr, &global,
                                                   local != 0 ? &local : nullptr, 0, nullptr, &op->event);
      every_call = status == CL_INVALID_WORK_GROUP_SIZE || status == CL_INVALID_WORK_ITEM_SIZE ||
                   status == CL_INVALID_KERNEL_ARGS || status == CL_INVALID_GLOBAL_WORK_SIZE;
      check(status,
            fmt::format("kernel '{}': launching '{}' (global size {}) on OpenCL device '{}'",
                        launch.call.kernel_name, program->entry, global, info().name),
            ErrorCode::task_failed);
    } catch (const Error& error) {
      // Refused before any of it ran: a call nerve placed goes where the kernel runs, as a call of
      // a program that does not build here does. (An internal error is a bug of nerve's: it fails.)
      engine_->recycle(std::exchange(op, nullptr));
      if (error.code() != ErrorCode::internal && launch_refused(*program, task, error, every_call)) return;
      throw;
    }
    pocl_sizes_.launched(kernel, op->event);
    op->queue = queue;
    clFlush(queue);
    engine_->count_launch(queue_index);
    engine_->watch(std::exchange(op, nullptr));
  } catch (...) {
    if (op != nullptr) engine_->recycle(op);
    failure = std::current_exception();
  }
  // Completed once the handler is left: the exception is then only the task's, whose last release
  // frees it (a handler still open on this thread could free it after a waiter read it, an order
  // ThreadSanitizer cannot see through libstdc++'s uninstrumented counts).
  if (failure != nullptr) {
    // Nothing of it ran: its record spans no time, from when the failure was found (PERF_STATS.md).
    task->start_ns = monotonic_ns();
    host_->complete(task, *this, std::move(failure), task->start_ns);
  }
}

// launch_refused(): `task`, placed here by nerve, could not be launched (`error`: its arguments do
// not fit the OpenCL function, its work sizes, or the driver refused the launch); nothing of it ran.
// It goes where the kernel runs, when some device does: true then. When the refusal holds for
// `every_call` of the kernel here, the kernel's calls that nerve places leave the device out from
// now on (under heft a failed call teaches the model nothing, so the next one would be sent here
// again); a refusal of this call alone (its own sizes, a shortage) leaves the device in. A call sent
// here with TaskOptions::device fails with `error` (false).
bool OpenclDevice::launch_refused(const OpenclProgram& program, TaskRecord* task, const Error& error,
                                  bool every_call) noexcept {
  if (task->device_hint >= 0) return false;
  if (every_call) refuse_program(program, *task, error, "could not be launched");
  return host_->place_elsewhere(task, *this);
}

void OpenclDevice::refuse_program(const OpenclProgram& program, const TaskRecord& task, const Error& error,
                                  std::string_view what) noexcept {
  try {
    bool first = false;
    {
      std::unique_lock lock(refused_mutex_);
      first = refused_programs_.insert(program.id).second;
      any_refused_.store(true, std::memory_order_release);
    }
    // Once per kernel and device, when its calls go to its CPU body from now on (they no longer
    // fail one by one, so the reason must show); a kernel nothing else runs fails each call saying it.
    if (first && task.kernel->cpu) {
      log::warn(
          "kernel '{}' {} on device {} (OpenCL device '{}'): its calls that nerve places fall back "
          "to the CPU workers (its CPU body), those already placed there included; calls sent there with "
          "TaskOptions::device fail with this error: {}",
          task.kernel->name, what, info().index, info().name, error.what());
    }
  } catch (...) {  // out of memory: the device is not left out; the failure is still reported
  }
}

void OpenclDevice::bind_arguments(cl_kernel kernel, const DeviceLaunch& launch, const TaskRecord& task,
                                  Operation& op) {
  const KernelCall& call = launch.call;
  cl_uint parameters = 0;
  check(clGetKernelInfo(kernel, CL_KERNEL_NUM_ARGS, sizeof parameters, &parameters, nullptr),
        "clGetKernelInfo");
  if (parameters != call.access_count + call.value_count) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("kernel '{}': its OpenCL function takes {} parameters, the call gives {} ({} "
                            "access(es), then {} value(s))",
                            call.kernel_name, parameters, call.access_count + call.value_count,
                            call.access_count, call.value_count));
  }
  auto known = parameters_.find(kernel);
  if (known == parameters_.end())
    known = parameters_.emplace(kernel, kernel_parameters(kernel, parameters)).first;
  const std::vector<KernelParameter>& kinds = known->second;
  using Kind = KernelParameter::Kind;
  for (std::size_t p = 0; p < kinds.size(); ++p) {
    const bool access = p < call.access_count;
    const Kind kind = kinds[p].kind;
    if (kind == Kind::unknown || kind == (access ? Kind::pointer : Kind::value)) continue;
    const std::string given =
        access ? fmt::format("access {}", p) : fmt::format("value {}", p - call.access_count);
    const char* wanted = kind == Kind::pointer ? "it takes a buffer access (read/write/read_write)"
                         : kind == Kind::value ? "it takes a nerve::value"
                                               : "nerve passes buffers and values only";
    throw Error(ErrorCode::invalid_argument,
                fmt::format("kernel '{}': {} goes to the {} of OpenCL function '{}', but {}; accesses come "
                            "first, then values, in the function's parameter order",
                            call.kernel_name, given, kinds[p].describe(static_cast<unsigned>(p)),
                            static_cast<const OpenclProgram*>(launch.implementation)->entry, wanted));
  }
  const std::size_t alignment = engine_->device().base_alignment;
  for (std::size_t i = 0; i < call.access_count; ++i) {
    const AccessView& view = call.views[i];
    const auto location = node_->locate(static_cast<const std::byte*>(view.data));
    if (!location) {
      throw Error(ErrorCode::internal,
                  fmt::format("kernel '{}': access {} is not in the memory of OpenCL device '{}'",
                              call.kernel_name, i, info().name));
    }
    cl_mem mem = location->mem;
    // Replicas are carved from bigger driver buffers at aligned offsets (memory.hpp): an access
    // starting at byte 0 of a block is the block itself; any other start is a sub-buffer, which
    // OpenCL allows only at aligned offsets — a replica's start always is, a slice's start may not be.
    if (location->offset != 0 && view.size != 0) {
      if (location->offset % alignment != 0) {
        throw Error(
            ErrorCode::invalid_argument,
            fmt::format("kernel '{}': access {} starts at byte {} of its buffer, but OpenCL device '{}' "
                        "can start a sub-buffer only at a multiple of {} bytes (CL_DEVICE_MEM_BASE_ADDR_"
                        "ALIGN); align the slice, or pass the whole buffer and the offset as a value",
                        call.kernel_name, i, task.accesses[i].offset, info().name, alignment));
      }
      const cl_buffer_region region{location->offset, view.size};
      cl_int status = CL_SUCCESS;
      cl_mem slice = clCreateSubBuffer(mem, 0, CL_BUFFER_CREATE_TYPE_REGION, &region, &status);
      check(status,
            fmt::format("kernel '{}': a sub-buffer for access {} (bytes {}..{})", call.kernel_name, i,
                        location->offset, location->offset + view.size),
            ErrorCode::task_failed);
      op.sub_buffers.push_back(slice);
      mem = slice;
    }
    check(clSetKernelArg(kernel, static_cast<cl_uint>(i), sizeof(cl_mem), &mem),
          fmt::format("kernel '{}': access {} as parameter {}", call.kernel_name, i, i),
          ErrorCode::invalid_argument);
  }
  for (std::size_t j = 0; j < call.value_count; ++j) {
    const auto parameter = static_cast<cl_uint>(call.access_count + j);
    const cl_int status = clSetKernelArg(kernel, parameter, call.values[j].size, call.values[j].data);
    if (status == CL_INVALID_ARG_SIZE) {
      throw Error(
          ErrorCode::invalid_argument,
          fmt::format("kernel '{}': value {} has {} bytes, not the size of the {} (match the OpenCL C "
                      "type: float 4, int/uint 4, long/ulong/double 8, ...)",
                      call.kernel_name, j, call.values[j].size, kinds[parameter].describe(parameter)));
    }
    check(status, fmt::format("kernel '{}': value {} as parameter {}", call.kernel_name, j, parameter),
          ErrorCode::invalid_argument);
  }
}

std::size_t OpenclDevice::global_size(const OpenclProgram& program, const DeviceLaunch& launch,
                                      const TaskRecord& task) const {
  if (program.options.global_size) return program.options.global_size(KernelArgs(launch.call));
  if (launch.call.access_count == 0) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("kernel '{}' has no access to take its global size from: give "
                            "opencl::Options::global_size",
                            launch.call.kernel_name));
  }
  return default_global_size(task);
}

bool OpenclDevice::finish_launch(Engine& engine, Operation& op) {
  auto& device = *static_cast<OpenclDevice*>(op.owner);
  TaskRecord* task = op.task;
  // Enqueued behind earlier work on its in-order queue, it began once that work was done.
  if (op.queue_free_ns > task->start_ns) task->start_ns = op.queue_free_ns;
  std::exception_ptr error;
  if (op.status < 0 || !op.error.empty()) {
    error = std::make_exception_ptr(
        Error(ErrorCode::task_failed,
              fmt::format("kernel '{}' failed on OpenCL device '{}': {}", task->kernel->name,
                          engine.device().name, op.error.empty() ? error_name(op.status) : op.error)));
  }
  for (cl_mem slice : op.sub_buffers) clReleaseMemObject(slice);
  op.sub_buffers.clear();
  // Ended when its completion was seen: the next kernel on its queue starts then (queue_free_ns), so
  // a report queued behind others must not stretch this one over that one.
  device.host_->complete(task, device, error, op.completed_ns);
  return true;
}

}  // namespace nerve::detail::opencl
