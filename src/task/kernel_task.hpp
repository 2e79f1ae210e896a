// kernel_task.hpp — how a Kernel call is stored in a task record.
//
// A kernel task's closure is a KernelTask: the kernel (shared), the access modes and the plain values
// copied at submit. The CPU path calls the kernel's CPU body; a device backend asks for the
// implementation of its kind and the KernelCall (describe()) to launch it itself.
#pragma once

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "nerve/kernel.hpp"

#include "task/task_record.hpp"

namespace nerve::detail {

struct KernelState {
  std::string name;
  CpuKernel cpu;
  std::array<std::shared_ptr<const KernelImplementation>, 4> by_kind;  // indexed by DeviceKind

  // A Kernel is configured before first use, then immutable (kernel.hpp): `used` is set by the first
  // submit of a call and never cleared, and configuring calls (cpu(), implement(), so every backend's
  // attach()) are refused from then on. Each configuring call holds `configuring` while it checks and
  // changes the state, and the first submit takes it once to set `used`: a submit racing a
  // configuration sees it whole, or the configuration sees the kernel used and throws.
  mutable std::atomic<bool> used{false};
  mutable std::mutex configuring;

  bool implements(DeviceKind kind) const noexcept {
    return kind == DeviceKind::cpu ? static_cast<bool>(cpu)
                                   : by_kind[static_cast<std::size_t>(kind)] != nullptr;
  }
  // mark_used(): at each submit of a call, before the state is read; one load once set.
  void mark_used() const {
    if (used.load(std::memory_order_acquire)) [[likely]]
      return;
    std::lock_guard lock(configuring);
    used.store(true, std::memory_order_release);
  }
};

// model_name(): the name a task's run times are learnt under by the performance models and heft:
// its Kernel's, or a named C kernel's (nerve_task_set_name); nullptr for a task with no kernel
// identity (a C++ closure, an unnamed C kernel).
inline const char* model_name(const TaskRecord& task) noexcept {
  if (task.kernel != nullptr) return task.kernel->name.c_str();
  return task.ops != nullptr && task.ops->named_kernel ? task.name : nullptr;
}

struct KernelTask {
  std::shared_ptr<const KernelState> kernel;
  std::vector<Access> modes;
  std::vector<std::byte> value_bytes;
  std::vector<KernelValue> values;  // point into value_bytes

  KernelCall describe(const AccessView* views, int device, void* queue) const noexcept {
    return {kernel->name.c_str(), views,         modes.data(), modes.size(),
            values.data(),        values.size(), device,       queue};
  }

  static void invoke(void* self, const AccessView* views);
  static void destroy(void* self) noexcept { static_cast<KernelTask*>(self)->~KernelTask(); }
  static const ClosureOps ops;
};

// kernel_task_of(): the KernelTask inside `task`, or nullptr for a plain-closure task.
struct TaskRecord;
const KernelTask* kernel_task_of(TaskRecord& task) noexcept;

}  // namespace nerve::detail
