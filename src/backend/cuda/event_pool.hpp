// event_pool.hpp — CUDA events reused across operations (seeds/000 §3.3: no cudaEventCreate per task).
//
// Creating and destroying an event costs a driver call each; an operation in flight needs one only
// until it completes. The pool hands out a free event, or creates one when none is free, and takes
// it back when its operation is over; the pool's size is the peak number of operations in flight.
// Every event is destroyed with the pool.
//
// Thread safety: acquire() and release() may be called from any thread (one mutex, held for a
// vector push/pop; the driver is called outside it).
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

#include "backend/cuda/driver.hpp"

namespace nerve::detail::cuda {

class EventPool {
 public:
  EventPool(Driver& driver, int device) : driver_(driver), device_(device) {}
  ~EventPool();
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;

  Event acquire();
  void release(Event event) noexcept;

  std::uint64_t created() const;  // events ever created (the pool's size)
  std::uint64_t in_use() const;

 private:
  Driver& driver_;
  const int device_;
  mutable std::mutex mutex_;
  std::vector<Event> free_;
  std::uint64_t created_ = 0;
};

}  // namespace nerve::detail::cuda
