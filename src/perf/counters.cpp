#include "perf/counters.hpp"

#include <array>
#include <cstdlib>
#include <cstring>

#include <dirent.h>
#include <linux/perf_event.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util/monotonic_clock.hpp"

namespace nerve::detail {
namespace {

int open_event(std::uint32_t type, std::uint64_t config, int tid) {
  perf_event_attr attr;
  std::memset(&attr, 0, sizeof attr);
  attr.size = sizeof attr;
  attr.type = type;
  attr.config = config;
  attr.exclude_kernel = 1;  // allowed at perf_event_paranoid 2
  attr.exclude_hv = 1;
  return static_cast<int>(syscall(SYS_perf_event_open, &attr, tid, -1, -1, PERF_FLAG_FD_CLOEXEC));
}

std::vector<int> thread_ids() {
  std::vector<int> ids;
  if (DIR* dir = opendir("/proc/self/task")) {
    while (const dirent* entry = readdir(dir)) {
      if (entry->d_name[0] != '.') ids.push_back(std::atoi(entry->d_name));
    }
    closedir(dir);
  }
  return ids;
}

// rusage_values(): the software events' figures for the whole process: CPU time (ns), context
// switches (voluntary and involuntary), page faults (minor and major).
std::array<std::uint64_t, 3> rusage_values() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const auto to_ns = [](const timeval& t) {
    return static_cast<std::uint64_t>(t.tv_sec) * 1'000'000'000u +
           static_cast<std::uint64_t>(t.tv_usec) * 1000u;
  };
  return {to_ns(usage.ru_utime) + to_ns(usage.ru_stime),
          static_cast<std::uint64_t>(usage.ru_nvcsw + usage.ru_nivcsw),
          static_cast<std::uint64_t>(usage.ru_minflt + usage.ru_majflt)};
}

}  // namespace

const std::vector<CounterSampler::Event>& CounterSampler::events() const {
  static const std::vector<Event> hardware{{PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES, "cycles"},
                                           {PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS, "instructions"},
                                           {PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_MISSES, "cache_misses"}};
  static const std::vector<Event> software{
      {PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK, "task_clock_ns"},
      {PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CONTEXT_SWITCHES, "context_switches"},
      {PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS, "page_faults"}};
  return source_ == Source::hardware ? hardware : software;  // rusage reports the software names
}

bool CounterSampler::open_thread(int tid) {
  std::vector<int> fds;
  for (const Event& event : events()) {
    const int fd = open_event(event.type, event.config, tid);
    if (fd < 0) {
      for (int open : fds) close(open);
      return false;
    }
    fds.push_back(fd);
  }
  fds_[tid] = std::move(fds);
  return true;
}

CounterSampler::CounterSampler(std::chrono::milliseconds interval) : interval_(interval) {
  const int self = static_cast<int>(syscall(SYS_gettid));
  source_ = Source::hardware;
  if (!open_thread(self)) {
    source_ = Source::software;
    const std::array<std::uint64_t, 3> before = rusage_values();
    if (open_thread(self)) {
      task_clock_before_ = before[0];
      page_faults_before_ = before[2];
    } else {
      source_ = Source::rusage;
    }
  }
  stats_.enabled = true;
  stats_.source = source_ == Source::hardware   ? "perf_event hardware"
                  : source_ == Source::software ? "perf_event software"
                                                : "getrusage";
  for (const Event& event : events()) stats_.names.emplace_back(event.name);
  sample();
  thread_ = std::thread([this] { run(); });
}

CounterSampler::~CounterSampler() {
  stop();
  for (auto& [tid, fds] : fds_) {
    for (int fd : fds) close(fd);
  }
}

void CounterSampler::run() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    wake_.wait_for(lock, interval_);
    if (stopping_) break;
    lock.unlock();
    sample();
    lock.lock();
  }
}

void CounterSampler::stop() noexcept {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return;
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  sample();
}

// sample() runs on the sampling thread (or the stopping thread once it is joined): fds_ is its own.
void CounterSampler::sample() {
  CounterSample point;
  point.time_ns = monotonic_ns();
  point.values.assign(events().size(), 0);
  if (source_ == Source::rusage) {
    const std::array<std::uint64_t, 3> usage = rusage_values();
    point.values.assign(usage.begin(), usage.end());
  } else {
    for (int tid : thread_ids()) {
      if (!fds_.contains(tid)) open_thread(tid);  // a thread it may not watch is skipped
    }
    for (const auto& [tid, fds] : fds_) {
      for (std::size_t i = 0; i < fds.size(); ++i) {
        std::uint64_t value = 0;
        if (read(fds[i], &value, sizeof value) == static_cast<ssize_t>(sizeof value))
          point.values[i] += value;
      }
    }
    // A switch happens in the kernel, which a user-only event (exclude_kernel, all that
    // perf_event_paranoid 2 allows) never counts: the process's own count comes from getrusage.
    if (source_ == Source::software) {
      point.values[0] += task_clock_before_;
      point.values[1] = rusage_values()[1];
      point.values[2] += page_faults_before_;
    }
  }
  std::lock_guard lock(mutex_);
  if (stats_.samples.size() < max_samples) stats_.samples.push_back(std::move(point));
}

CounterStats CounterSampler::snapshot() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

}  // namespace nerve::detail
