// transfer_gate.hpp — gpu.max_pending_transfers for a device whose copies nerve starts one by one.
//
// At most `limit` copies hold a place at once; a copy that finds none free waits, in FIFO order, and
// is handed out by the leave() of a copy that finishes, which passes its place on. Nobody blocks:
// enter() says whether the copy may start now, and the thread that finishes a copy starts the next
// one (the OpenCL and CUDA engines keep the same bound inside their own operation records).
//
// Thread safety: every member may be called from any thread. Memory ordering: the gate's mutex
// orders a waiting copy's enter() before the leave() that hands it out.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <utility>

#include "backend/device.hpp"

namespace nerve::detail {

template <class Copy>
class TransferGate {
 public:
  explicit TransferGate(unsigned limit) : limit_(std::max(limit, 1u)) {}

  // enter(): true when `copy` may start now (it holds a place until its leave()); false when it
  // waits, to be returned by a later leave().
  bool enter(Copy copy) {
    std::lock_guard lock(mutex_);
    ++copies_;
    if (in_flight_ < limit_ && waiting_.empty()) {
      ++in_flight_;
      peak_ = std::max<std::uint64_t>(peak_, in_flight_);
      return true;
    }
    waiting_.push_back(std::move(copy));
    ++deferred_;
    return false;
  }

  // leave(): a copy holding a place finished. Returns the first waiting copy, which holds that place
  // now and must be started by the caller, or nothing.
  std::optional<Copy> leave() {
    std::lock_guard lock(mutex_);
    if (waiting_.empty()) {
      --in_flight_;
      return std::nullopt;
    }
    Copy next = std::move(waiting_.front());
    waiting_.pop_front();
    return next;
  }

  // count(): its copies in `counters` (copies, copies_deferred, peak_copies_in_flight).
  void count(DeviceCounters& counters) const {
    std::lock_guard lock(mutex_);
    counters.copies = copies_;
    counters.copies_deferred = deferred_;
    counters.peak_copies_in_flight = peak_;
  }

 private:
  const unsigned limit_;
  mutable std::mutex mutex_;
  unsigned in_flight_ = 0;
  std::deque<Copy> waiting_;
  std::uint64_t copies_ = 0, deferred_ = 0, peak_ = 0;
};

}  // namespace nerve::detail
