// pocl_size_guard.hpp — holds the launches that would make PoCL's CPU drivers miscount a kernel.
//
// PoCL's CPU drivers (pthread, basic: Debian 12's PoCL 3.1, lib/CL/devices/common.c) keep each
// kernel's compiled work-group function in a process-wide cache with one entry per specialization:
// the local size (which the driver picks from the global size when the call leaves it free), and the
// widest grid the function serves. A launch takes a reference on the first entry that serves it,
// making a new entry when none does; its completion drops a reference from the first entry with the
// kernel's hash and local size, whatever that entry's width. Once one kernel has two entries of one
// local size, a completion may drop another launch's reference, and a later completion aborts the
// process (`pocl_release_dlhandle_cache: Assertion 'found->ref_count > 0' failed`). It takes launches
// of one kernel over different sizes in flight at once on several queues (gpu.stream_count), and shows
// mostly with a cold PoCL cache, whose compilations hold launches back until they pile up: a fresh
// machine's first run.
//
// A new entry is made only for a global size the kernel was never launched over (an entry that served
// a size stays in the cache and serves it again). So on PoCL, a launch over a global size new to its
// kernel on the device waits until the kernel's launches still in flight have finished: no launch then
// holds an entry of the kernel when the new one is made. Launches over sizes seen before are not held:
// once per size per kernel at most (each kernel remembers its last 64 sizes; beyond, a size
// forgotten is new again). Other drivers do not have the defect: the guard is off for them.
//
// Not covered: two PoCL devices, or two contexts, running the same program source at once share the
// cache but not this guard (each device keeps its own); and the cache's eviction, past 128 entries
// in the process, of an entry that served a size, which makes that size need a new entry again.
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

class PoclSizeGuard {
 public:
  explicit PoclSizeGuard(bool enabled) noexcept : enabled_(enabled) {}
  ~PoclSizeGuard();
  PoclSizeGuard(const PoclSizeGuard&) = delete;
  PoclSizeGuard& operator=(const PoclSizeGuard&) = delete;

  // is_needed_for(): whether the driver of a device of this platform, a CPU or not, has the defect.
  static bool is_needed_for(const std::string& platform_name, bool cpu_device) noexcept;

  // before_launch(): before `kernel` is enqueued over `global` work-items; waits for the kernel's
  // launches in flight when it was never launched over that size.
  void before_launch(cl_kernel kernel, std::size_t global);
  // launched(): `event` is the launch's, after before_launch() for it (retained here until it is known
  // to be complete; out of memory, it is not kept, and a launch over a new size will not wait for it).
  void launched(cl_kernel kernel, cl_event event) noexcept;

  // held(): launches that waited for earlier launches of their kernel.
  std::uint64_t held() const noexcept { return held_.load(std::memory_order_relaxed); }

 private:
  struct KernelLaunches {
    std::vector<std::size_t> sizes;  // global sizes launched, at most max_sizes
    std::vector<cl_event> pending;   // retained; some may have completed since
  };
  static void release_completed(std::vector<cl_event>& events) noexcept;

  const bool enabled_;
  std::unordered_map<cl_kernel, KernelLaunches> kernels_;
  std::atomic<std::uint64_t> held_{0};
};

}  // namespace nerve::detail::opencl
