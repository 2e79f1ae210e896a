// settle() (bench/workloads/measure.hpp): before each variant the benchmarks wait until no other
// thread of the process is runnable, not just settle_ms. OpenBLAS's threads spin for ~115 ms after the
// library loads and after every threaded call, and ran against the first variant timed after them.
#include <atomic>
#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#include "measure.hpp"

namespace nerve::bench {
namespace {

using namespace std::chrono_literals;

// A thread that keeps a core busy until it has used `busy` of CPU time of its own, or is stopped.
class Spinner {
 public:
  explicit Spinner(std::chrono::milliseconds busy) : thread_([this, busy] { spin(busy); }) {
    while (!started_.load()) std::this_thread::yield();
  }
  ~Spinner() {
    stop_.store(true);
    thread_.join();
  }
  bool finished() const { return finished_.load(); }

 private:
  void spin(std::chrono::milliseconds busy) {
    started_.store(true);
    timespec start{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &start);
    while (!stop_.load(std::memory_order_relaxed)) {
      timespec now{};
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
      const auto used = std::chrono::seconds(now.tv_sec - start.tv_sec) +
                        std::chrono::nanoseconds(now.tv_nsec - start.tv_nsec);
      if (used >= busy) break;
    }
    finished_.store(true);
  }

  std::atomic<bool> started_{false}, stop_{false}, finished_{false};
  std::thread thread_;
};

TEST(Settle, WaitsUntilNoOtherThreadRuns) {
  Spinner spinner(120ms);
  WorkloadOptions options;
  options.settle_ms = 1;
  settle(options);
  EXPECT_TRUE(spinner.finished()) << "settle() returned while another thread of the process still ran";
}

TEST(Settle, ZeroSettlesNothing) {
  Spinner spinner(2000ms);
  WorkloadOptions options;
  options.settle_ms = 0;
  const auto start = std::chrono::steady_clock::now();
  settle(options);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1000ms);
  EXPECT_FALSE(spinner.finished());
}

TEST(Settle, GivesUpOnAThreadThatNeverStops) {
  Spinner spinner(std::chrono::hours(1));
  EXPECT_FALSE(wait_until_quiet(50ms));
  WorkloadOptions options;
  options.settle_ms = 1;
  settle(options);  // returns after max_quiet_wait, not when the spinner stops (it never does)
  EXPECT_FALSE(spinner.finished());
}

TEST(Settle, SleepingThreadsAreQuiet) {
  std::atomic<bool> asleep{false};
  std::thread sleeper([&asleep] {
    asleep.store(true);
    std::this_thread::sleep_for(2s);
  });
  while (!asleep.load()) std::this_thread::yield();
  // Quiet once the sleeper has gone to sleep (on a loaded machine it may wait for a core first).
  EXPECT_TRUE(wait_until_quiet(1500ms));
  EXPECT_EQ(runnable_other_threads(), 0);
  sleeper.join();
}

TEST(Settle, CountsASpinningThread) {
  Spinner spinner(std::chrono::hours(1));
  EXPECT_GE(runnable_other_threads(), 1);
}

}  // namespace
}  // namespace nerve::bench
