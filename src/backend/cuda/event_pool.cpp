#include "backend/cuda/event_pool.hpp"

namespace nerve::detail::cuda {

EventPool::~EventPool() {
  // In the events' device's context: the runtime would make device 0's current on a thread without one.
  const QuietDeviceScope scope(driver_, device_);
  for (Event event : free_) driver_.destroy_event(event);
}

Event EventPool::acquire() {
  {
    std::lock_guard lock(mutex_);
    if (!free_.empty()) {
      Event event = free_.back();
      free_.pop_back();
      return event;
    }
  }
  Event event = driver_.create_event(device_);
  std::lock_guard lock(mutex_);
  ++created_;
  return event;
}

void EventPool::release(Event event) noexcept {
  if (event == nullptr) return;
  std::lock_guard lock(mutex_);
  try {
    free_.push_back(event);
  } catch (...) {  // out of memory for the free list: give the event back to the driver instead
    --created_;
    driver_.destroy_event(event);
  }
}

std::uint64_t EventPool::created() const {
  std::lock_guard lock(mutex_);
  return created_;
}

std::uint64_t EventPool::in_use() const {
  std::lock_guard lock(mutex_);
  return created_ - free_.size();
}

}  // namespace nerve::detail::cuda
