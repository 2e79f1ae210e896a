// launcher_thread.hpp — the thread that launches a device's tasks, in the order they were submitted.
//
// Device::submit() is called by whichever thread made the task ready (a worker finishing a
// predecessor, a copy engine's completion thread) and must not block; a driver launch can (a full
// queue, a first-time program build). So a backend's device hands each task to its LauncherThread,
// whose thread calls the device's launch function one task at a time.
//
// Thread safety: submit() from any thread; start() and stop() from the device's owner. stop() lets
// the thread launch what was submitted before it, then joins it; it is idempotent.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

#include "util/start_thread.hpp"

namespace nerve::detail {

struct TaskRecord;

class LauncherThread {
 public:
  LauncherThread() = default;
  LauncherThread(const LauncherThread&) = delete;
  LauncherThread& operator=(const LauncherThread&) = delete;
  ~LauncherThread() { stop(); }

  // start(): launch each submitted task with `launch`, on a thread of its own (once; later calls do
  // nothing).
  void start(std::function<void(TaskRecord*)> launch) {
    if (thread_.joinable()) return;
    launch_ = std::move(launch);
    thread_ = start_thread("a device's launcher thread", [this] { run(); });
  }

  void submit(TaskRecord* task) {
    {
      std::lock_guard lock(mutex_);
      tasks_.push_back(task);
    }
    ready_.notify_one();
  }

  void stop() noexcept {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    ready_.notify_one();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void run() {
    std::unique_lock lock(mutex_);
    while (true) {
      ready_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;
      TaskRecord* task = tasks_.front();
      tasks_.pop_front();
      lock.unlock();
      launch_(task);
      lock.lock();
    }
  }

  std::function<void(TaskRecord*)> launch_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<TaskRecord*> tasks_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace nerve::detail
