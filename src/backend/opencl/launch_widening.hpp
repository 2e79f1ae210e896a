// launch_widening.hpp — holds the launches that would make PoCL's CPU drivers miscount a kernel.
//
// PoCL's CPU drivers (pthread, basic: Debian 12's PoCL 3.1, lib/CL/devices/common.c) keep each
// kernel's compiled work-group function in a process-wide cache with one entry per specialization:
// the local size, and the widest grid the function serves. A launch takes a reference on the first
// entry that serves it, making a new entry when none does; its completion drops a reference from the
// first entry with the kernel's hash and local size, whatever that entry's width. Once one kernel has
// two such entries (a launch's grid was wider than every entry's), a completion may drop another
// launch's reference, and a later completion aborts the process (`pocl_release_dlhandle_cache:
// Assertion 'found->ref_count > 0' failed`). It takes launches of one kernel over different sizes in
// flight at once on several queues (gpu.stream_count), and shows mostly with a cold PoCL cache, whose
// compilations hold the launches back until they pile up: a fresh machine's first run.
//
// So on PoCL, a launch of a kernel over a grid wider than every earlier launch of that kernel on the
// device waits until the kernel's launches still in flight have finished: when its wider entry is
// made, no launch holds an older one, and every later launch of the kernel takes the wider entry (the
// cache keeps it first among the kernel's, and it serves them all). Such a launch comes at most once
// per new widest size; other launches are not held. Other drivers do not have the defect: the guard
// is off for them.
//
// Not covered: two PoCL devices, or two contexts, running the same program source at once share the
// cache but not this guard (each device keeps its own).
//
// Thread safety: the launcher thread's, but for held().
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/opencl/cl.hpp"

namespace nerve::detail::opencl {

class LaunchWidening {
 public:
  explicit LaunchWidening(bool enabled) noexcept : enabled_(enabled) {}
  ~LaunchWidening();
  LaunchWidening(const LaunchWidening&) = delete;
  LaunchWidening& operator=(const LaunchWidening&) = delete;

  // is_needed_for(): whether the driver of a device with this platform name, CPU or not, has the defect.
  static bool is_needed_for(const std::string& platform_name, bool cpu_device) noexcept;

  // before_launch(): before `kernel` is enqueued over `global` work-items; waits for the kernel's
  // launches in flight when this one is wider than every earlier one.
  void before_launch(cl_kernel kernel, std::size_t global);
  // launched(): `event` is the launch's, after before_launch() for it (retained here until it is known
  // to be complete; out of memory, it is not kept, and a wider launch will not wait for it).
  void launched(cl_kernel kernel, cl_event event) noexcept;

  // held(): launches that waited for earlier launches of their kernel.
  std::uint64_t held() const noexcept { return held_.load(std::memory_order_relaxed); }

 private:
  struct KernelLaunches {
    std::size_t widest = 0;         // the widest grid launched so far
    std::vector<cl_event> pending;  // retained; some may have completed since
  };
  static void release_completed(std::vector<cl_event>& events) noexcept;

  const bool enabled_;
  std::unordered_map<cl_kernel, KernelLaunches> kernels_;
  std::atomic<std::uint64_t> held_{0};
};

}  // namespace nerve::detail::opencl
