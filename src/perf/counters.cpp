#include "perf/counters.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <dirent.h>
#include <linux/perf_event.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util/monotonic_clock.hpp"
#include "util/start_thread.hpp"

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

// start_time(tid): the thread's start in clock ticks since boot (field 22 of its stat), which tells
// a thread from a later one the kernel gave the same id; 0 when it has already gone.
std::uint64_t start_time(int tid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/self/task/%d/stat", tid);
  std::FILE* file = std::fopen(path, "re");
  if (file == nullptr) return 0;
  char text[1024];
  const std::size_t length = std::fread(text, 1, sizeof text - 1, file);
  std::fclose(file);
  text[length] = '\0';
  // The command name (field 2) is in parentheses and may hold spaces: count from its last ')'.
  const char* field = std::strrchr(text, ')');
  if (field == nullptr) return 0;
  for (int skipped = 2; skipped < 22 && field != nullptr; ++skipped) field = std::strchr(field + 1, ' ');
  return field == nullptr ? 0 : std::strtoull(field + 1, nullptr, 10);
}

std::vector<CounterSampler::ThreadKey> live_threads() {
  std::vector<CounterSampler::ThreadKey> threads;
  if (DIR* dir = opendir("/proc/self/task")) {
    while (const dirent* entry = readdir(dir)) {
      if (entry->d_name[0] == '.') continue;
      const int tid = std::atoi(entry->d_name);
      if (const std::uint64_t start = start_time(tid); start != 0) threads.push_back({tid, start});
    }
    closedir(dir);
  }
  return threads;
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

bool CounterSampler::open_thread(ThreadKey thread) {
  std::vector<int> fds;
  for (const Event& event : events()) {
    const int fd = open_event(event.type, event.config, thread.tid);
    if (fd < 0) {
      for (int open : fds) close(open);
      return false;
    }
    fds.push_back(fd);
  }
  fds_[thread] = std::move(fds);
  return true;
}

// retire_exited(): an exited thread's events hold its final counts: they join `retired_`, and its
// descriptors close, so a program that starts and ends threads by the thousand never runs out.
void CounterSampler::retire_exited(const std::vector<ThreadKey>& live) {
  for (auto it = fds_.begin(); it != fds_.end();) {
    if (std::find(live.begin(), live.end(), it->first) != live.end()) {
      ++it;
      continue;
    }
    for (std::size_t i = 0; i < it->second.size(); ++i) {
      std::uint64_t value = 0;
      if (read(it->second[i], &value, sizeof value) == static_cast<ssize_t>(sizeof value))
        retired_[i] += value;
      close(it->second[i]);
    }
    it = fds_.erase(it);
  }
}

CounterSampler::CounterSampler(std::chrono::milliseconds interval) : interval_(interval) {
  const int tid = static_cast<int>(syscall(SYS_gettid));
  const ThreadKey self{tid, start_time(tid)};
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
  retired_.assign(events().size(), 0);
  sample();
  try {
    thread_ = start_thread("the perf.enable_counters sampling thread", [this] { run(); });
  } catch (...) {
    close_all();  // the destructor does not run
    throw;
  }
}

CounterSampler::~CounterSampler() {
  stop();
  close_all();
}

void CounterSampler::close_all() noexcept {
  for (auto& [thread, fds] : fds_) {
    for (int fd : fds) close(fd);
  }
  fds_.clear();
}

// run(): samples on a fixed grid (start + k × interval), so the time a sample takes does not add up
// into drift; ticks a descheduled sampler missed are skipped, not caught up in a burst.
void CounterSampler::run() {
  std::unique_lock lock(mutex_);
  auto next = std::chrono::steady_clock::now() + interval_;
  while (!stopping_) {
    if (wake_.wait_until(lock, next, [this] { return stopping_; })) break;
    lock.unlock();
    sample();
    const auto now = std::chrono::steady_clock::now();
    next += interval_;
    if (next <= now) next += (now - next) / interval_ * interval_ + interval_;
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
    const std::vector<ThreadKey> live = live_threads();
    retire_exited(live);
    for (const ThreadKey& thread : live) {
      if (!fds_.contains(thread)) open_thread(thread);  // a thread it may not watch is skipped
    }
    point.values = retired_;
    for (const auto& [thread, fds] : fds_) {
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
