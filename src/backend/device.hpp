// device.hpp — the interface every execution device implements (the CPU pool is not one of them:
// it is scheduled by sched/).
//
// A device receives tasks whose data is already valid in its memory node, runs them asynchronously
// and reports each one back through the DeviceHost it was started with. Backends (OpenCL, CUDA,
// plugins) implement this; TestDevice simulates one with separate memory for tests. The whole
// contract — memory node, copies, queues, events, capabilities — is in docs/BACKENDS.md.
#pragma once

#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "nerve/device.hpp"
#include "nerve/kernel.hpp"

#include "memory/memory_node.hpp"

namespace nerve::detail {

struct TaskRecord;
class Device;

// What a backend launches for one task: the kernel's implementation for the device's kind and the
// call (its accesses resolved in the device's memory, in declaration order, and its values).
struct DeviceLaunch {
  const KernelImplementation* implementation = nullptr;
  KernelCall call{};
  std::vector<AccessView> views;  // call.views points here
};

// The runtime side of a device.
class DeviceHost {
 public:
  // run_on_device(): run the task's CPU body here, synchronously, and finish it (test devices).
  virtual void run_on_device(TaskRecord* task, Device& device) = 0;
  // prepare_launch() / complete(): a backend launching asynchronously asks what to launch, then
  // reports the outcome once (error == nullptr: success) from any thread; `end_ns`, when known, is
  // when the device was seen done with it (monotonic_ns(); 0: now), which may be well before the
  // report when reports are queued behind each other.
  virtual DeviceLaunch prepare_launch(TaskRecord* task, Device& device) = 0;
  virtual void complete(TaskRecord* task, Device& device, std::exception_ptr error,
                        std::int64_t end_ns = 0) noexcept = 0;
  // place_elsewhere(): `task` cannot run on `device` after all, and nothing of it ran there (its
  // kernel's program does not build there, or the device refused its launch): when nerve placed it
  // there (not TaskOptions::device) and another device can run it, it is placed again — its replicas
  // on `device` released, its data made valid on the new device through the coherence layer, what
  // prepare_launch() recorded undone — and true is returned: the device must forget it. False: the
  // device fails it as usual (complete()). Called from the device's launching thread.
  virtual bool place_elsewhere(TaskRecord* task, Device& device) noexcept = 0;
  // launch_closure(): a C kernel in the launcher form (TaskRecord::stream_launcher) is called here,
  // on the device's launcher thread, with the device's index, `stream` and its data's addresses on
  // the device; it only enqueues work. Returns what it threw (or reported failing), else null; the
  // backend then reports the outcome with complete() once the stream's work is done.
  virtual std::exception_ptr launch_closure(TaskRecord* task, Device& device, void* stream) noexcept = 0;

 protected:
  ~DeviceHost() = default;
};

// What a device can do, for placement, tests and nerve-info.
struct DeviceCapabilities {
  bool host_addressable = false;       // a CPU may dereference its memory node's pointers
  bool unified_memory = false;         // it shares physical memory with the host
  unsigned queues = 1;                 // queues (streams) its copies and kernels are spread over
  unsigned max_pending_transfers = 0;  // copies it keeps in flight at once (0: no bound)
};

// Bookkeeping of a device's queues and events (a snapshot; zeros where a device does not count).
struct DeviceCounters {
  std::uint64_t launches = 0;
  std::vector<std::uint64_t> launches_per_queue;
  std::uint64_t copies = 0;           // asynchronous copies started (either direction)
  std::uint64_t copies_deferred = 0;  // copies that waited for the max_pending_transfers bound
  std::uint64_t peak_copies_in_flight = 0;
  std::uint64_t peer_copies = 0;        // device-to-device copies done directly
  std::uint64_t staged_copies = 0;      // copies that went through host staging memory
  std::uint64_t pinned_copies = 0;      // host<->device copies DMA'd in place (page-locked host buffer)
  std::uint64_t events_live = 0;        // driver events not released yet (0 when idle)
  std::uint64_t operation_records = 0;  // pooled in-flight records ever created (bounded, not per task)
  // Launches held until the earlier launches of their kernel finished (OpenCL on PoCL: a launch over
  // a global size new to its kernel; see opencl/pocl_size_guard.hpp).
  std::uint64_t launches_held = 0;
};

class Device {
 public:
  Device(DeviceInfo info, std::unique_ptr<MemoryNode> memory)
      : info_(std::move(info)), memory_(std::move(memory)) {
    info_.memory_node = static_cast<int>(memory_->index());
  }
  virtual ~Device() = default;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const DeviceInfo& info() const noexcept { return info_; }
  MemoryNode& memory() noexcept { return *memory_; }
  const MemoryNode& memory() const noexcept { return *memory_; }

  virtual DeviceCapabilities capabilities() const noexcept {
    return DeviceCapabilities{memory_->host_addressable(), info_.unified_memory, 1, 0};
  }
  // can_access_peer(): copies between this device's memory and `other`'s go directly, without
  // staging through host memory.
  virtual bool can_access_peer(const Device& /*other*/) const noexcept { return false; }
  virtual DeviceCounters counters() const { return {}; }

  // can_run(): the device implements the task's kernel.
  virtual bool can_run(const TaskRecord& task) const noexcept = 0;
  // takes_accesses(): the task can be handed to its kernel here as it is (OpenCL: a slice's
  // sub-buffer must start at an aligned offset, and the kernel's program must not have failed to
  // build here). Placement by nerve avoids a device that cannot while another can run the task; a
  // task forced there fails, saying why.
  virtual bool takes_accesses(const TaskRecord& /*task*/) const noexcept { return true; }
  // why_refused(): for a task takes_accesses() refuses, why, in words for heft's decision log ("access
  // 0 starts at byte 4; this device starts a sub-buffer only at a multiple of 128 bytes").
  virtual std::string why_refused(const TaskRecord& /*task*/) const { return "it cannot take this call"; }
  // submit(): run `task` (its data is valid in memory()) and call host.run_on_device from the
  // device's execution context. Never blocks on the task.
  virtual void submit(TaskRecord* task) = 0;
  virtual void start(DeviceHost& host) = 0;
  // stop(): after every submitted task has been run.
  virtual void stop() noexcept = 0;

 private:
  DeviceInfo info_;
  std::unique_ptr<MemoryNode> memory_;
};

}  // namespace nerve::detail
