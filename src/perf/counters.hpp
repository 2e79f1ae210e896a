// counters.hpp — CounterSampler: process-wide counters sampled on a thread of its own
// (perf.enable_counters, every perf.counter_interval_ms).
//
// Source, the first that works: perf_event_open hardware events (cycles, instructions, cache
// misses), perf_event_open software events (task clock, context switches, page faults), getrusage
// (the same software figures). perf_event counters are opened per thread of the process (threads
// are found in /proc/self/task at each sample) and added up; a thread that exits keeps its final
// count, and its descriptors are closed. Nothing here ever fails the context: a missing source falls through
// to the next.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "nerve/stats.hpp"

namespace nerve::detail {

class CounterSampler {
 public:
  explicit CounterSampler(std::chrono::milliseconds interval);
  ~CounterSampler();
  CounterSampler(const CounterSampler&) = delete;
  CounterSampler& operator=(const CounterSampler&) = delete;

  // stop() takes a last sample and joins the thread (idempotent).
  void stop() noexcept;
  // snapshot(): source, names and the samples so far (times in monotonic_ns).
  CounterStats snapshot() const;

  static constexpr std::size_t max_samples = 100'000;

  // A thread as the kernel names it: its id, and its start time (ticks since boot), since the
  // kernel hands an exited thread's id to a later one.
  struct ThreadKey {
    int tid;
    std::uint64_t start;
    bool operator==(const ThreadKey&) const = default;
    bool operator<(const ThreadKey& other) const noexcept {
      return tid != other.tid ? tid < other.tid : start < other.start;
    }
  };

 private:
  enum class Source { hardware, software, rusage };
  struct Event {
    std::uint32_t type;
    std::uint64_t config;
    const char* name;
  };
  const std::vector<Event>& events() const;
  bool open_thread(ThreadKey thread);  // opens every event for it; false if one cannot be opened
  void close_all() noexcept;           // every event of every thread
  void retire_exited(const std::vector<ThreadKey>& live);
  void sample();
  void run();

  std::chrono::milliseconds interval_;
  Source source_ = Source::rusage;
  std::map<ThreadKey, std::vector<int>> fds_;  // a live thread -> one fd per event
  std::vector<std::uint64_t> retired_;         // per event: the final counts of exited threads
  // Software events count from when they were opened: what the process had spent before (CPU time,
  // page faults, from getrusage) is added, so every source's values are the process's whole life.
  std::uint64_t task_clock_before_ = 0, page_faults_before_ = 0;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  CounterStats stats_;
  std::thread thread_;
};

}  // namespace nerve::detail
