// device.hpp — an OpenCL device running nerve kernel tasks.
//
// A task placed here arrives with its data valid in the device's memory node. submit() hands it to
// the device's launcher thread (submit may be called from a worker, a submitter or a completion
// thread, and never blocks): the launcher builds the kernel's program if needed (programs.hpp; a
// build can take seconds, so it never happens on a worker), binds the arguments (each access → a
// cl_mem or a sub-buffer of one, each value → a by-value argument), and enqueues the kernel on the
// next queue, round robin over gpu.stream_count in-order queues. The engine's completion thread
// reports the outcome to the runtime (DeviceHost::complete). Only the launcher thread touches
// cl_kernel objects (clSetKernelArg is not thread safe on one kernel).
//
// Errors are the task's: a program that does not build (with the compiler log), an unaligned
// slice, an argument count, kind or size mismatch, a launch the driver refuses or a kernel that fails
// while running. The task fails with a nerve::Error saying which; its dependents are cancelled. Only
// a program that does not build is found before the task counts as running here: a task nerve placed
// here then goes to another device that runs its kernel (DeviceHost::place_elsewhere), if any.
//
// Thread safety: submit(), can_run() and the queries may be called from any thread.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "backend/backend.hpp"
#include "backend/device.hpp"
#include "backend/launcher_thread.hpp"
#include "backend/opencl/engine.hpp"
#include "backend/opencl/kernel_parameters.hpp"
#include "backend/opencl/memory.hpp"
#include "backend/opencl/pocl_size_guard.hpp"
#include "backend/opencl/programs.hpp"

namespace nerve::detail::opencl {

class OpenclDevice final : public Device {
 public:
  OpenclDevice(const PlatformDevice& device, DeviceInfo info, const DeviceOpenOptions& options);
  ~OpenclDevice() override;

  bool can_run(const TaskRecord& task) const noexcept override;
  bool takes_accesses(const TaskRecord& task) const noexcept override;
  std::string why_refused(const TaskRecord& task) const override;
  void submit(TaskRecord* task) override;
  void start(DeviceHost& host) override;
  void stop() noexcept override;

  DeviceCapabilities capabilities() const noexcept override;
  bool can_access_peer(const Device& other) const noexcept override;
  DeviceCounters counters() const override;

 private:
  void launch(TaskRecord* task);
  void bind_arguments(cl_kernel kernel, const DeviceLaunch& launch, const TaskRecord& task, Operation& op);
  std::size_t global_size(const OpenclProgram& program, const DeviceLaunch& launch,
                          const TaskRecord& task) const;
  static bool finish_launch(Engine& engine, Operation& op);

  // Programs (OpenclProgram::id) that did not build here, lack their entry, or had a call nerve placed
  // here refused at launch (launch_refused()): placement by nerve
  // leaves this device out for their calls while another device can take them, so a broken OpenCL
  // body does not fail calls its CPU body would run (heft, whose calibration would otherwise keep
  // choosing a device that never yields a sample). A call sent here still fails at once; calls
  // placed here before the failure was known are placed again (launch()).
  bool refused_program(const TaskRecord& task) const noexcept;
  // misaligned_access(): the first access that does not start at a sub-buffer alignment, if any.
  std::optional<std::size_t> misaligned_access(const TaskRecord& task) const noexcept;
  bool launch_refused(const OpenclProgram& program, TaskRecord* task, const Error& error,
                      bool every_call) noexcept;
  // takes_work_size(): the call's work-group size fits this device and divides its global size
  // (where that is known before launch). work_size_fit(): the one rule, for placement and launch
  // alike; `local` 0 lets the driver choose, `global` 0 is unknown yet (any divides it).
  enum class WorkSizeFit { fits, over_limit, not_a_divisor };
  bool takes_work_size(const TaskRecord& task) const noexcept;
  WorkSizeFit work_size_fit(std::size_t local, std::size_t global) const noexcept;
  static const OpenclProgram* program_of(const TaskRecord& task) noexcept;
  // default_global_size(): access 0's element count, the global size without Options::global_size.
  static std::size_t default_global_size(const TaskRecord& task) noexcept;
  // refuse_program(): `program` failed here with `error` (from the launcher thread): remember it, and
  // warn once when the kernel's calls will fall back to its CPU body.
  // `what` says what happened, for the warning ("cannot run", "could not be launched").
  void refuse_program(const OpenclProgram& program, const TaskRecord& task, const Error& error,
                      std::string_view what) noexcept;
  mutable std::shared_mutex refused_mutex_;
  std::unordered_set<std::uint64_t> refused_programs_;
  std::atomic<bool> any_refused_{false};

  std::shared_ptr<Engine> engine_;
  OpenclMemoryNode* node_;
  ProgramCache programs_;  // the launcher thread's
  // Each kernel's parameters (kernel_parameters.hpp), learnt at its first launch; the launcher
  // thread's. Kernels live as long as programs_, so their handles stay valid keys.
  std::unordered_map<cl_kernel, std::vector<KernelParameter>> parameters_;
  PoclSizeGuard pocl_sizes_;  // the launcher thread's (PoCL's work-group function cache)
  DeviceHost* host_ = nullptr;

  LauncherThread launcher_;  // last: stopped (joined) before the members its thread uses go
};

}  // namespace nerve::detail::opencl
