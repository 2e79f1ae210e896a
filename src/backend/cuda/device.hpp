// device.hpp — a CUDA device running nerve kernel tasks.
//
// A task placed here arrives with its data valid in the device's memory node. submit() hands it to
// the device's launcher thread (submit never blocks; a CUDA launch can, when a stream's queue is
// full). The launcher thread makes the device current, picks the task's stream (stream_set.hpp:
// high-priority tasks on the streams scheduler.gpu_stream_priorities reserves), with
// gpu.unified_memory sends gpu.cache_hints advice and gpu.async_prefetch prefetches for each access on
// that stream, calls the kernel's launcher (nerve/cuda.hpp; a C kernel in the launcher form is
// called with the device index and the stream: DeviceHost::launch_closure), checks the launch, and arms the
// operation (completion flag and event, engine.hpp); the engine's completion thread reports the
// outcome to the runtime (DeviceHost::complete).
//
// Errors are the task's: a launcher that throws, a launch error, a kernel failing while it runs. Once
// the launcher was called the task ends behind its stream's work even when it failed (work it
// enqueued before throwing still writes the task's replicas), and a launch error it left pending is
// cleared so that the next task does not report it.
//
// Thread safety: submit(), can_run() and the queries may be called from any thread.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>

#include "backend/backend.hpp"
#include "backend/cuda/driver.hpp"
#include "backend/cuda/engine.hpp"
#include "backend/cuda/memory.hpp"
#include "backend/device.hpp"
#include "backend/launcher_thread.hpp"

namespace nerve::detail::cuda {

struct CudaDeviceOptions {
  unsigned reserved_high_streams = 0;  // scheduler.gpu_stream_priorities, for this device
  bool unified_memory = false;         // gpu.unified_memory
  bool async_prefetch = true;          // gpu.async_prefetch
  bool cache_hints = true;             // gpu.cache_hints
  bool pin_host_buffers = true;        // gpu.pin_host_buffers
  CompletionMode completion = CompletionMode::flag;
  PoolKind pool = PoolKind::arena;
};

class CudaDevice final : public Device {
 public:
  CudaDevice(std::shared_ptr<Driver> driver, int ordinal, const DeviceInfo& info,
             const DeviceOpenOptions& options, const CudaDeviceOptions& cuda);
  ~CudaDevice() override;

  bool can_run(const TaskRecord& task) const noexcept override;
  void submit(TaskRecord* task) override;
  void start(DeviceHost& host) override;
  void stop() noexcept override;

  DeviceCapabilities capabilities() const noexcept override;
  bool can_access_peer(const Device& other) const noexcept override;
  DeviceCounters counters() const override { return engine_->snapshot(); }

  int ordinal() const noexcept { return ordinal_; }
  Engine& engine() noexcept { return *engine_; }
  CudaMemoryNode& node() noexcept { return *node_; }

 private:
  void launch(TaskRecord* task);
  void hint_and_prefetch(const DeviceLaunch& launch, Stream stream);
  void complete_behind(TaskRecord* task, std::size_t stream_index, Stream stream,
                       std::exception_ptr error) noexcept;
  static bool finish_launch(Engine& engine, Operation& op);

  std::shared_ptr<Driver> driver_;  // outlives the engine and the node
  const int ordinal_;
  const CudaDeviceOptions options_;
  std::shared_ptr<Engine> engine_;
  CudaMemoryNode* node_;
  DeviceHost* host_ = nullptr;
  // Advice already given (pointer, bytes, advice): the launcher thread's; advice is per range, not
  // per task, so it is sent once.
  std::set<std::tuple<const void*, std::size_t, int>> advised_;

  LauncherThread launcher_;  // last: stopped (joined) before the members its thread uses go
};

}  // namespace nerve::detail::cuda
