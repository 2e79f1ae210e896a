#include "backend/test_device.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "nerve/error.hpp"

#include "memory/buffer_state.hpp"
#include "task/kernel_task.hpp"
#include "task/task_record.hpp"
#include "util/start_thread.hpp"

namespace nerve::detail {

SerialExecutor::~SerialExecutor() { stop(); }

void SerialExecutor::start() {
  if (thread_.joinable()) return;
  stopping_ = false;
  thread_ = start_thread("the test device's executor thread", [this] { run(); });
}

void SerialExecutor::post(std::function<void()> job) {
  {
    std::lock_guard lock(mutex_);
    jobs_.push_back(std::move(job));
    ++posted_;
  }
  ready_.notify_one();
}

std::uint64_t SerialExecutor::wait_idle() noexcept {
  std::unique_lock lock(mutex_);
  idle_.wait(lock, [&] { return (jobs_.empty() && !running_) || stopping_; });  // stopping: stop() runs them
  return posted_;
}

void SerialExecutor::stop() noexcept {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  ready_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void SerialExecutor::run() {
  std::unique_lock lock(mutex_);
  while (true) {
    ready_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
    if (jobs_.empty()) return;
    auto job = std::move(jobs_.front());
    jobs_.pop_front();
    running_ = true;
    lock.unlock();
    job();
    lock.lock();
    running_ = false;
    if (jobs_.empty()) idle_.notify_all();
  }
}

TestMemoryNode::TestMemoryNode(unsigned index, std::string name, const TestDeviceOptions& options)
    : MemoryNode(index, std::move(name), options.memory_limit, true), options_(options) {
  dma_.start();
}

TestMemoryNode::~TestMemoryNode() { dma_.stop(); }

// The simulated device memory is plain heap memory of its own, so a missed transfer shows up as
// wrong data rather than as shared host bytes.
std::byte* TestMemoryNode::allocate_storage(std::size_t bytes) {
  if (bytes > options_.max_allocation) {
    throw Error(ErrorCode::out_of_memory,
                fmt::format("a replica of {} bytes is larger than {} allows for one allocation ({} bytes)",
                            bytes, name(), options_.max_allocation));
  }
  const std::size_t rounded = (std::max<std::size_t>(bytes, 1) + 63) / 64 * 64;
  void* data = std::aligned_alloc(64, rounded);
  if (data == nullptr) {
    throw Error(ErrorCode::out_of_memory, fmt::format("{}: cannot allocate {} bytes", name(), bytes));
  }
  return static_cast<std::byte*>(data);
}

void TestMemoryNode::free_storage(std::byte* data, std::size_t /*bytes*/) noexcept { std::free(data); }

void TestMemoryNode::start_copy(MemoryNode& from, const std::byte* source, MemoryNode& to,
                                std::byte* destination, std::size_t bytes, CopyCompletion& completion) {
  auto copy = [this, &from, source, &to, destination, bytes, &completion] {
    // The bytes land at the end of the simulated transfer, as a DMA's do: a copy the runtime failed
    // to order after another shows up as stale data.
    auto cost = std::chrono::duration<double>(options_.copy_latency);
    if (options_.copy_bytes_per_second > 0)
      cost += std::chrono::duration<double>(static_cast<double>(bytes) / options_.copy_bytes_per_second);
    std::this_thread::sleep_for(std::chrono::duration_cast<std::chrono::nanoseconds>(cost));
    try {
      // A peer whose memory the CPU cannot reach (an OpenCL device) copies its side itself.
      if (!from.host_addressable()) {
        from.copy_sync(from, source, to, destination, bytes);
      } else if (!to.host_addressable()) {
        to.copy_sync(from, source, to, destination, bytes);
      } else {
        std::memcpy(destination, source, bytes);
      }
    } catch (const std::exception& error) {
      completion.copy_done(false, error.what());
      return;
    }
    completion.copy_done(true, {});
  };
  if (options_.synchronous_copies) {
    copy();
  } else {
    dma_.post(std::move(copy));
  }
}

namespace {
DeviceInfo test_device_info(int device_index, const TestDeviceOptions& options) {
  DeviceInfo info;
  info.index = device_index;
  info.kind = DeviceKind::test;
  info.name = fmt::format("test device {}", device_index);
  info.memory_bytes = options.memory_limit;
  info.compute_units = 1;
  info.backend = "test";
  return info;
}
}  // namespace

TestDevice::TestDevice(int device_index, unsigned memory_node_index, const TestDeviceOptions& options)
    : Device(test_device_info(device_index, options),
             std::make_unique<TestMemoryNode>(memory_node_index, test_device_info(device_index, options).name,
                                              options)) {}

TestDevice::~TestDevice() { stop(); }

// Test devices run CPU task bodies: their memory is ordinary RAM reached through replicas.
bool TestDevice::can_run(const TaskRecord& task) const noexcept {
  return task.kind == TaskKind::function && (task.kernel == nullptr || static_cast<bool>(task.kernel->cpu));
}

void TestDevice::submit(TaskRecord* task) {
  executor_.post([this, task] { host_->run_on_device(task, *this); });
}

void TestDevice::start(DeviceHost& host) {
  host_ = &host;
  executor_.start();
}

void TestDevice::stop() noexcept { executor_.stop(); }

}  // namespace nerve::detail
