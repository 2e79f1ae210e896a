#include "backend/cuda/device.hpp"

#include <utility>

#include <fmt/format.h>

#include "backend/cuda_launcher.hpp"
#include "memory/buffer_state.hpp"
#include "task/kernel_task.hpp"
#include "task/task_record.hpp"

namespace nerve::detail::cuda {
namespace {

std::unique_ptr<CudaMemoryNode> make_node(const std::shared_ptr<Driver>& driver, int ordinal,
                                          const DeviceInfo& info, const DeviceOpenOptions& options,
                                          const CudaDeviceOptions& cuda) {
  auto engine = std::make_shared<Engine>(driver, ordinal, options.stream_count, cuda.reserved_high_streams,
                                         options.max_pending_transfers, cuda.completion);
  CudaMemoryOptions memory;
  memory.peer_access = options.peer_access;
  memory.unified_memory = cuda.unified_memory;
  memory.pool = cuda.pool;
  memory.pin_host_buffers = cuda.pin_host_buffers;
  // A little of the device stays free for the CUDA context, cuBLAS workspaces and user launchers.
  memory.limit_bytes = static_cast<std::size_t>(static_cast<double>(info.memory_bytes) * 0.9);
  return std::make_unique<CudaMemoryNode>(static_cast<unsigned>(options.index), options.node_name(info.name),
                                          std::move(engine), memory);
}

bool cancelled(const TaskRecord& task) noexcept {
  return task.cancel_pending.load(std::memory_order_acquire) ||
         (task.group != nullptr && task.group->cancel_requested.load(std::memory_order_acquire));
}

}  // namespace

CudaDevice::CudaDevice(std::shared_ptr<Driver> driver, int ordinal, const DeviceInfo& info,
                       const DeviceOpenOptions& options, const CudaDeviceOptions& cuda)
    : Device(info, make_node(driver, ordinal, info, options, cuda)),
      driver_(std::move(driver)),
      ordinal_(ordinal),
      options_(cuda),
      engine_(static_cast<CudaMemoryNode&>(memory()).shared_engine()),
      node_(&static_cast<CudaMemoryNode&>(memory())) {}

CudaDevice::~CudaDevice() { stop(); }

// Only launchers of cuda::attach: an implementation a plugin attached for its devices of kind cuda
// is not one, and would reach launch() with nothing to call.
bool CudaDevice::can_run(const TaskRecord& task) const noexcept {
  if (task.kind != TaskKind::function) return false;
  if (task.kernel == nullptr) return task.stream_launcher();
  return dynamic_cast<const CudaLauncher*>(
             task.kernel->by_kind[static_cast<std::size_t>(DeviceKind::cuda)].get()) != nullptr;
}

void CudaDevice::start(DeviceHost& host) {
  host_ = &host;
  launcher_.start([this](TaskRecord* task) { launch(task); });
}

void CudaDevice::submit(TaskRecord* task) { launcher_.submit(task); }

void CudaDevice::stop() noexcept { launcher_.stop(); }

DeviceCapabilities CudaDevice::capabilities() const noexcept {
  return DeviceCapabilities{false, info().unified_memory, static_cast<unsigned>(engine_->streams().size()),
                            engine_->max_pending_transfers()};
}

bool CudaDevice::can_access_peer(const Device& other) const noexcept {
  const auto* peer = dynamic_cast<const CudaDevice*>(&other);
  return peer != nullptr && peer != this && node_->direct_peer(*peer->node_);
}

void CudaDevice::hint_and_prefetch(const DeviceLaunch& launch, Stream stream) {
  const KernelCall& call = launch.call;
  for (std::size_t i = 0; i < call.access_count; ++i) {
    const AccessView& view = call.views[i];
    if (view.size == 0) continue;
    if (options_.cache_hints) {
      // Read-only data may be duplicated on every device that reads it; written data should live here.
      const Advice advice = call.modes[i] == Access::read ? Advice::read_mostly : Advice::preferred_location;
      if (advised_.size() > 4096) advised_.clear();  // bounded; advice given again is harmless
      if (advised_.emplace(view.data, view.size, static_cast<int>(advice)).second) {
        driver_->advise(view.data, view.size, advice, ordinal_);
      }
    }
    // Stream-ordered, before the launch: the pages migrate while earlier work on the stream runs,
    // instead of faulting in one by one under the kernel.
    if (options_.async_prefetch) driver_->prefetch_async(view.data, view.size, ordinal_, stream);
  }
}

void CudaDevice::launch(TaskRecord* task) {
  if (cancelled(*task)) {
    host_->run_on_device(task, *this);  // it sees the cancellation and finishes the task as cancelled
    return;
  }
  // Once the launcher was called, work of the task may be on `stream` whatever happened after; the
  // task must then end behind that work, never before it (its replicas would be released while
  // kernels still write them).
  Stream stream = nullptr;
  std::size_t index = 0;
  bool launched = false;
  std::exception_ptr failure;
  try {
    // Before every launch, not once per thread: a launcher may have made another device current
    // (multi-GPU code, a library), and the next one is promised this one (cuda.hpp). Setting the
    // device that is already current costs a thread-local check in the runtime; a failure fails
    // this task, not silently the launcher's calls.
    driver_->make_current(ordinal_);
    if (task->kernel == nullptr) {
      // A C kernel in the launcher form: it gets this device's index and a stream and enqueues.
      index = engine_->streams().pick_for_task(task->priority);
      stream = engine_->streams().stream(index);
      launched = true;
      if (std::exception_ptr error = host_->launch_closure(task, *this, stream))
        std::rethrow_exception(error);
    } else {
      DeviceLaunch launch = host_->prepare_launch(task, *this);
      const auto* implementation = dynamic_cast<const CudaLauncher*>(launch.implementation);
      if (implementation == nullptr) {
        throw Error(ErrorCode::internal,
                    fmt::format("kernel '{}' reached CUDA device '{}' without a CUDA launcher",
                                launch.call.kernel_name, info().name));
      }
      index = engine_->streams().pick_for_task(task->priority);
      stream = engine_->streams().stream(index);
      launch.call.queue = stream;
      launched = true;  // prefetches are the task's work on the stream too
      if (node_->unified_memory()) hint_and_prefetch(launch, stream);
      implementation->launcher(KernelArgs(launch.call), ordinal_, stream);
    }
    driver_->check_launch(ordinal_);
  } catch (...) {
    // Completed once the handler is left (here, as below): the exception is then only the task's,
    // whose last release frees it (a handler still open on this thread could free it after a waiter
    // read it, an order ThreadSanitizer cannot see through libstdc++'s uninstrumented counts).
    failure = std::current_exception();
  }
  if (failure != nullptr && !launched) {
    host_->complete(task, *this, std::move(failure));
    return;
  }
  // A launch error the failure left pending is this task's: the next task's check must not report it.
  if (failure != nullptr) driver_->clear_launch_error(ordinal_);
  complete_behind(task, index, stream, std::move(failure));
}

// The task completes when the work enqueued on `stream` so far is done (flag and event), failed with
// `error` when the launch failed after enqueueing some of it.
void CudaDevice::complete_behind(TaskRecord* task, std::size_t stream_index, Stream stream,
                                 std::exception_ptr error) noexcept {
  Operation* op = nullptr;
  try {
    op = engine_->acquire();
    op->owner = this;
    op->task = task;
    op->finish = &CudaDevice::finish_launch;
    op->launch_error = error;
    engine_->arm(op, stream);
  } catch (...) {
    if (op != nullptr) engine_->recycle(op);
    if (error == nullptr) error = std::current_exception();
    // No completion on the stream: wait for the task's work here instead.
    try {
      driver_->synchronize_stream(stream);
    } catch (...) {  // the task fails with the first error either way
    }
    host_->complete(task, *this, error);
    return;
  }
  if (error == nullptr) engine_->count_launch(stream_index);
  try {
    engine_->watch(op);
  } catch (const std::exception& failure) {  // no memory to queue it: armed, so wait for the stream
    try {
      driver_->synchronize_stream(stream);
    } catch (...) {
    }
    engine_->fail(op, failure.what());
  }
}

bool CudaDevice::finish_launch(Engine& /*engine*/, Operation& op) {
  auto& device = *static_cast<CudaDevice*>(op.owner);
  TaskRecord* task = op.task;
  // Launched behind earlier work on its stream, it began on the device once that work was done.
  if (op.stream_free_ns > task->start_ns) task->start_ns = op.stream_free_ns;
  std::exception_ptr error = op.launch_error;  // the launcher's or the launch check's, first
  if (error == nullptr && op.failed) {
    error = std::make_exception_ptr(
        Error(ErrorCode::task_failed,
              fmt::format("kernel '{}' failed on CUDA device '{}': {}",
                          task->kernel != nullptr ? task->kernel->name.c_str()
                                                  : (task->name != nullptr ? task->name : "(unnamed)"),
                          device.info().name, op.error)));
  }
  device.host_->complete(task, device, error);
  return true;
}

}  // namespace nerve::detail::cuda
