// stream_set.hpp — one device's streams: gpu.stream_count for kernels, the high-priority ones among
// them, and one stream per copy direction.
//
// scheduler.gpu_stream_priorities reserves streams for high-priority tasks (TaskOptions::priority
// > 0): those streams are created with the device's greatest priority, so the GPU's block scheduler
// starts their kernels before the others' pending blocks, and no ordinary task or copy is queued on
// them, so a latency-sensitive task never waits behind bulk work in its own stream. At least one
// stream always stays ordinary (a reservation of all streams keeps one back). Tasks of priority <= 0
// go round robin over the ordinary streams; high-priority tasks round robin over the reserved ones
// (over the ordinary ones when none is reserved).
//
// Copies have streams of their own, one into the device and one out of it: the two directions run
// at once on the GPU's copy engines, and a copy never waits behind a kernel (or a copy the other way)
// that happens to share its stream. (Mixed into the kernel streams round robin, H2D and D2H copies of
// a streaming pipeline reached 45 % of the link's bandwidth on an H200.) One stream per direction
// loses nothing: a copy engine moves one copy at a time.
//
// Thread safety: pick_*() may be called from any thread (an atomic counter each).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/cuda/driver.hpp"

namespace nerve::detail::cuda {

class StreamSet {
 public:
  // `count` streams on `device`, `reserved_high` of them (clamped to count - 1) high priority.
  StreamSet(Driver& driver, int device, unsigned count, unsigned reserved_high);
  ~StreamSet();
  StreamSet(const StreamSet&) = delete;
  StreamSet& operator=(const StreamSet&) = delete;

  std::size_t size() const noexcept { return streams_.size(); }
  unsigned reserved_high() const noexcept { return reserved_; }
  Stream stream(std::size_t index) const noexcept { return streams_[index]; }
  bool is_high_priority(std::size_t index) const noexcept { return index < reserved_; }

  // pick_for_task(): the stream (and its index) for a task of `priority`.
  std::size_t pick_for_task(std::int32_t priority) noexcept;
  // copy_stream(): the stream for copies into the device (device to device ones too) or out of it.
  Stream copy_stream(bool into_device) const noexcept { return into_device ? copy_in_ : copy_out_; }
  // sync_stream(): a stream of its own for blocking copies (copy_sync), so they wait only for
  // themselves.
  Stream sync_stream() const noexcept { return sync_; }

 private:
  std::size_t next_ordinary(std::atomic<std::size_t>& counter) noexcept;

  Driver& driver_;
  const int device_;
  unsigned reserved_ = 0;
  std::vector<Stream> streams_;  // [0, reserved_): high priority
  Stream sync_ = nullptr;
  Stream copy_in_ = nullptr, copy_out_ = nullptr;
  std::atomic<std::size_t> next_{0}, next_high_{0};
};

}  // namespace nerve::detail::cuda
