// device.hpp — the interface every execution device implements (the CPU pool is not one of them:
// it is scheduled by sched/).
//
// A device receives tasks whose data is already valid in its memory node, runs them asynchronously
// and reports each one back through the DeviceHost it was started with. Backends (OpenCL, CUDA,
// plugins) implement this; TestDevice simulates one with separate memory for tests.
#pragma once

#include <memory>

#include "nerve/device.hpp"

#include "memory/memory_node.hpp"

namespace nerve::detail {

struct TaskRecord;
class Device;

// The runtime side of a device: runs a task's implementation for this device and finishes it.
class DeviceHost {
 public:
  virtual void run_on_device(TaskRecord* task, Device& device) = 0;

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
