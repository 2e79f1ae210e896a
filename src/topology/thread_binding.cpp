// Reading and setting the calling thread's CPU affinity (Linux sched_{get,set}affinity).
#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <string>

#include <sched.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "topology/affinity.hpp"
#include "util/log.hpp"

namespace nerve::topology {
namespace {

// CpuSet owns a dynamically sized cpu_set_t, so that machines with more than CPU_SETSIZE (1024) CPUs
// work too.
class CpuSet {
 public:
  explicit CpuSet(int capacity)
      : capacity_(capacity), set_(CPU_ALLOC(capacity)), size_(CPU_ALLOC_SIZE(capacity)) {
    if (set_ != nullptr) CPU_ZERO_S(size_, set_);
  }
  CpuSet(const CpuSet&) = delete;
  CpuSet& operator=(const CpuSet&) = delete;
  ~CpuSet() { CPU_FREE(set_); }

  bool valid() const { return set_ != nullptr; }
  std::size_t size() const { return size_; }
  cpu_set_t* get() { return set_; }
  void add(int cpu) { CPU_SET_S(static_cast<std::size_t>(cpu), size_, set_); }

  std::vector<int> cpus() const {
    std::vector<int> result;
    for (int cpu = 0; cpu < capacity_; ++cpu) {
      if (CPU_ISSET_S(static_cast<std::size_t>(cpu), size_, set_)) result.push_back(cpu);
    }
    return result;
  }

 private:
  int capacity_;
  cpu_set_t* set_;
  std::size_t size_;
};

constexpr int initial_capacity = 1024;
constexpr int maximum_capacity = 1 << 20;

}  // namespace

std::vector<int> current_thread_cpus() {
  // The kernel answers EINVAL while the set is smaller than its CPU mask; grow until it fits.
  for (int capacity = initial_capacity; capacity <= maximum_capacity; capacity *= 2) {
    CpuSet set(capacity);
    if (!set.valid()) return {};
    if (sched_getaffinity(0, set.size(), set.get()) == 0) return set.cpus();
    if (errno != EINVAL) return {};
  }
  return {};
}

bool set_current_thread_cpus(const std::vector<int>& cpus) {
  if (cpus.empty() || *std::ranges::min_element(cpus) < 0) {
    errno = EINVAL;
    return false;
  }
  const int highest = *std::ranges::max_element(cpus);
  CpuSet set(std::max(initial_capacity, highest + 1));
  if (!set.valid()) return false;
  for (int cpu : cpus) set.add(cpu);
  return sched_setaffinity(0, set.size(), set.get()) == 0;
}

bool bind_current_thread(const WorkerPlacement& placement, const Topology& topology,
                         std::atomic_flag& warned) {
  if (topology.synthetic()) return false;  // its PUs are not this machine's
  if (set_current_thread_cpus(placement.pu_os_indices)) return true;
  const std::string reason = std::strerror(errno);
  const auto level = warned.test_and_set() ? log::Level::debug : log::Level::warn;
  log::emit(level, "cannot bind a worker thread to core {} (PU [{}]): {}; it runs unbound", placement.core,
            fmt::join(placement.pu_os_indices, ", "), reason);
  return false;
}

bool bind_current_thread(const WorkerPlacement& placement, const Topology& topology) {
  std::atomic_flag warned;
  return bind_current_thread(placement, topology, warned);
}

}  // namespace nerve::topology
