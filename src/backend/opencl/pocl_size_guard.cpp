#include "backend/opencl/pocl_size_guard.hpp"

#include <algorithm>
#include <new>
#include <string>

namespace nerve::detail::opencl {
namespace {

// A bound on each kernel's retained events between two pruning passes (each pass drops the
// completed ones): a kernel launched without end keeps as many as are in flight, plus this many.
constexpr std::size_t prune_at = 32;
// The sizes each kernel remembers: a linear search per launch, against a launch's microseconds.
constexpr std::size_t max_sizes = 64;

bool complete(cl_event event) noexcept {
  cl_int status = CL_COMPLETE;
  if (clGetEventInfo(event, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, nullptr) != CL_SUCCESS)
    return true;                               // nothing to wait for that the driver can tell
  return status == CL_COMPLETE || status < 0;  // a failed command is over too
}

}  // namespace

PoclSizeGuard::~PoclSizeGuard() {
  for (auto& [kernel, launches] : kernels_) {
    for (cl_event event : launches.pending) clReleaseEvent(event);
  }
}

bool PoclSizeGuard::is_needed_for(const std::string& platform_name, bool cpu_device) noexcept {
  return cpu_device && platform_name == "Portable Computing Language";
}

void PoclSizeGuard::release_completed(std::vector<cl_event>& events) noexcept {
  const auto kept = std::remove_if(events.begin(), events.end(), [](cl_event event) {
    if (!complete(event)) return false;
    clReleaseEvent(event);
    return true;
  });
  events.erase(kept, events.end());
}

void PoclSizeGuard::before_launch(cl_kernel kernel, std::size_t global) {
  if (!enabled_) return;
  KernelLaunches& launches = kernels_[kernel];  // may throw std::bad_alloc: nothing is enqueued then
  auto& sizes = launches.sizes;
  if (std::find(sizes.begin(), sizes.end(), global) != sizes.end()) return;
  if (sizes.size() == max_sizes) sizes.erase(sizes.begin());
  sizes.push_back(global);
  release_completed(launches.pending);  // the kernel's first launch has none
  if (launches.pending.empty()) return;
  // The launches' status does not matter, only that they are over: a failed one fails its own task.
  clWaitForEvents(static_cast<cl_uint>(launches.pending.size()), launches.pending.data());
  for (cl_event event : launches.pending) clReleaseEvent(event);
  launches.pending.clear();
  held_.fetch_add(1, std::memory_order_relaxed);
}

void PoclSizeGuard::launched(cl_kernel kernel, cl_event event) noexcept {
  if (!enabled_) return;
  KernelLaunches* launches = nullptr;
  try {
    launches = &kernels_[kernel];  // before_launch() made it: no allocation
    if (launches->pending.size() >= prune_at) release_completed(launches->pending);
    launches->pending.reserve(launches->pending.size() + 1);
  } catch (const std::bad_alloc&) {
    return;  // out of memory: a launch over a new size will not wait for this one
  }
  clRetainEvent(event);
  launches->pending.push_back(event);  // into the room reserved
}

}  // namespace nerve::detail::opencl
