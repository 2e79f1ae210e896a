#include "memory/pool/staging_pool.hpp"

#include <bit>
#include <utility>

#include <fmt/format.h>

#include "nerve/error.hpp"

#include "util/log.hpp"

namespace nerve::memory {

StagingBuffer& StagingBuffer::operator=(StagingBuffer&& other) noexcept {
  if (this != &other) {
    release();
    pool_ = std::exchange(other.pool_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    capacity_ = std::exchange(other.capacity_, 0);
  }
  return *this;
}

void StagingBuffer::release() noexcept {
  if (data_ != nullptr) pool_->give_back(data_, capacity_);
  pool_ = nullptr;
  data_ = nullptr;
  size_ = capacity_ = 0;
}

StagingPool::StagingPool(std::unique_ptr<NodeAllocator> source, std::size_t limit_bytes)
    : source_(std::move(source)), budget_(*source_, limit_bytes) {
  if (!source_->host_addressable()) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("a staging pool needs host-addressable memory; {} is not", source_->describe()));
  }
}

StagingPool::~StagingPool() {
  std::lock_guard lock(mutex_);
  if (bytes_in_use_ != 0) {
    log::warn("{}: staging pool destroyed with {} bytes of buffers still acquired; they are freed now",
              source_->describe(), bytes_in_use_);
  }
  for (unsigned k = 0; k < class_count; ++k) {
    for (FreeBuffer* buffer = free_[k]; buffer != nullptr;) {
      FreeBuffer* next = buffer->next;
      budget_.release(buffer, std::size_t{1} << k);
      buffer = next;
    }
  }
  // Buffers still acquired are freed by the source's destructor (it frees every live block).
}

StagingBuffer StagingPool::acquire(std::size_t bytes) {
  if (bytes > max_buffer_bytes) [[unlikely]]
    throw_out_of_memory(bytes, bytes);
  const std::size_t capacity = std::bit_ceil(std::max(bytes, page_size()));
  const auto k = static_cast<unsigned>(std::countr_zero(capacity));
  StagingBuffer buffer;
  buffer.pool_ = this;
  buffer.size_ = bytes;
  buffer.capacity_ = capacity;
  {
    std::lock_guard lock(mutex_);
    ++acquisitions_;
    if (FreeBuffer* free = free_[k]) {
      free_[k] = free->next;
      ++reuses_;
      bytes_in_use_ += capacity;
      buffer.data_ = reinterpret_cast<std::byte*>(free);
      return buffer;
    }
  }
  void* block = retry_after_compacting(
      [&](std::exception_ptr& refusal) { return budget_.try_acquire(capacity, 0, capacity, refusal); },
      [this] { compact(); });
  if (block == nullptr) throw_out_of_memory(bytes, capacity);
  std::lock_guard lock(mutex_);
  bytes_in_use_ += capacity;
  buffer.data_ = static_cast<std::byte*>(block);
  return buffer;
}

void StagingPool::throw_out_of_memory(std::size_t bytes, std::size_t capacity) const {
  std::lock_guard lock(mutex_);
  throw Error(
      ErrorCode::out_of_memory,
      fmt::format("{}: out of memory: cannot acquire a staging buffer of {} bytes ({} reserved): the "
                  "staging pool {} and {} bytes are in use",
                  source_->describe(), bytes, capacity, describe_limit(budget_.limit()), bytes_in_use_));
}

void StagingPool::give_back(std::byte* data, std::size_t capacity) noexcept {
  const auto k = static_cast<unsigned>(std::countr_zero(capacity));
  auto* buffer = reinterpret_cast<FreeBuffer*>(data);
  std::lock_guard lock(mutex_);
  buffer->next = free_[k];
  free_[k] = buffer;
  bytes_in_use_ -= capacity;
}

std::size_t StagingPool::compact() {
  FreeBuffer* lists[class_count];
  {
    std::lock_guard lock(mutex_);
    for (unsigned k = 0; k < class_count; ++k) lists[k] = std::exchange(free_[k], nullptr);
  }
  std::size_t released = 0;
  for (unsigned k = 0; k < class_count; ++k) {
    for (FreeBuffer* buffer = lists[k]; buffer != nullptr;) {
      FreeBuffer* next = buffer->next;
      budget_.release(buffer, std::size_t{1} << k);
      released += std::size_t{1} << k;
      buffer = next;
    }
  }
  return released;
}

StagingPoolStats StagingPool::stats() const {
  StagingPoolStats result;
  result.node = source_->describe();
  result.limit_bytes = budget_.limit();
  result.bytes_reserved = budget_.reserved();
  result.locked_bytes = source_->stats().locked_bytes;
  std::lock_guard lock(mutex_);
  result.bytes_in_use = bytes_in_use_;
  result.acquisitions = acquisitions_;
  result.reuses = reuses_;
  return result;
}

}  // namespace nerve::memory
