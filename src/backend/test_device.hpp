// test_device.hpp — a simulated accelerator with separate memory, for testing data movement.
//
// Its memory node allocates its own storage (ordinary RAM, but only ever reached through replicas
// and copies, like device memory) under a byte limit, and copies on its own "DMA" thread, so every
// transfer is genuinely asynchronous. Its execution thread runs CPU task bodies with views into the
// device's replicas. Optional per-copy latency and bandwidth make transfers cost time.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "backend/device.hpp"

namespace nerve::detail {

struct TestDeviceOptions {
  std::size_t memory_limit = std::size_t{1} << 30;
  std::chrono::microseconds copy_latency{0};
  double copy_bytes_per_second = 0;  // 0: as fast as memcpy
  // Copies done inside start_copy(), completion included, as a driver may for small ones: the
  // runtime must not assume a copy it starts is still in flight when the call returns.
  bool synchronous_copies = false;
  // The largest single allocation, as a driver bounds it (OpenCL's CL_DEVICE_MAX_MEM_ALLOC_SIZE):
  // a larger replica is refused with out_of_memory, whatever the limit leaves free.
  std::size_t max_allocation = SIZE_MAX;
};

// A single worker thread with a FIFO of jobs.
class SerialExecutor {
 public:
  SerialExecutor() = default;
  ~SerialExecutor();
  void start();
  void post(std::function<void()> job);
  void stop() noexcept;  // runs what is queued, then joins
  // wait_idle(): waits until every job posted has run; how many were posted.
  std::uint64_t wait_idle() noexcept;

 private:
  void run();
  std::mutex mutex_;
  std::condition_variable ready_;
  std::condition_variable idle_;
  std::deque<std::function<void()>> jobs_;
  std::uint64_t posted_ = 0;
  bool running_ = false;  // a job is being run
  bool stopping_ = false;
  std::thread thread_;
};

class TestMemoryNode final : public MemoryNode {
 public:
  TestMemoryNode(unsigned index, std::string name, const TestDeviceOptions& options);
  ~TestMemoryNode() override;
  void drain() noexcept override { dma_.stop(); }
  std::uint64_t wait_idle() noexcept override { return dma_.wait_idle(); }

 protected:
  std::byte* allocate_storage(std::size_t bytes) override;
  void free_storage(std::byte* data, std::size_t bytes) noexcept override;
  void start_copy(MemoryNode& from, const std::byte* source, MemoryNode& to, std::byte* destination,
                  std::size_t bytes, CopyCompletion& completion) override;

 private:
  TestDeviceOptions options_;
  SerialExecutor dma_;
};

class TestDevice final : public Device {
 public:
  TestDevice(int device_index, unsigned memory_node_index, const TestDeviceOptions& options);
  ~TestDevice() override;

  bool can_run(const TaskRecord& task) const noexcept override;
  void submit(TaskRecord* task) override;
  void start(DeviceHost& host) override;
  void stop() noexcept override;

 private:
  DeviceHost* host_ = nullptr;
  SerialExecutor executor_;
};

}  // namespace nerve::detail
