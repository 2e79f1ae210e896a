// device.hpp — the interface every execution device implements (the CPU pool is not one of them:
// it is scheduled by sched/).
//
// A device receives tasks whose data is already valid in its memory node, runs them asynchronously
// and reports each one back through the DeviceHost it was started with. Backends (OpenCL, CUDA,
// plugins) implement this; TestDevice simulates one with separate memory for tests.
#pragma once

#include <exception>
#include <memory>
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
  // reports the outcome once (error == nullptr: success) from any thread.
  virtual DeviceLaunch prepare_launch(TaskRecord* task, Device& device) = 0;
  virtual void complete(TaskRecord* task, Device& device, std::exception_ptr error) noexcept = 0;

 protected:
  ~DeviceHost() = default;
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

  // can_run(): the device implements the task's kernel.
  virtual bool can_run(const TaskRecord& task) const noexcept = 0;
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
