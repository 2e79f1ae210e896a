#include "backend/cuda/stream_set.hpp"

#include <algorithm>

namespace nerve::detail::cuda {

StreamSet::StreamSet(Driver& driver, int device, unsigned count, unsigned reserved_high)
    : driver_(driver), device_(device) {
  count = std::max(count, 1u);
  reserved_ = std::min(reserved_high, count - 1);
  int least = 0, greatest = 0;
  driver_.priority_range(device_, least, greatest);
  try {
    for (unsigned i = 0; i < count; ++i)
      streams_.push_back(driver_.create_stream(device_, i < reserved_ ? greatest : least));
    sync_ = driver_.create_stream(device_, least);
    copy_in_ = driver_.create_stream(device_, least);
    copy_out_ = driver_.create_stream(device_, least);
  } catch (...) {
    for (Stream stream : streams_) driver_.destroy_stream(device_, stream);
    for (Stream stream : {sync_, copy_in_}) {
      if (stream != nullptr) driver_.destroy_stream(device_, stream);
    }
    throw;
  }
}

StreamSet::~StreamSet() {
  for (Stream stream : streams_) driver_.destroy_stream(device_, stream);
  for (Stream stream : {sync_, copy_in_, copy_out_}) {
    if (stream != nullptr) driver_.destroy_stream(device_, stream);
  }
}

std::size_t StreamSet::next_ordinary(std::atomic<std::size_t>& counter) noexcept {
  const std::size_t ordinary = streams_.size() - reserved_;
  return reserved_ + counter.fetch_add(1, std::memory_order_relaxed) % ordinary;
}

std::size_t StreamSet::pick_for_task(std::int32_t priority) noexcept {
  if (priority > 0 && reserved_ > 0) return next_high_.fetch_add(1, std::memory_order_relaxed) % reserved_;
  return next_ordinary(next_);
}

}  // namespace nerve::detail::cuda
