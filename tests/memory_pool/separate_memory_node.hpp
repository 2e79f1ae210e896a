// separate_memory_node.hpp — a NodeAllocator over memory the CPU cannot touch, for device-style pools.
#pragma once

#include <algorithm>
#include <cstddef>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>

#include <sys/mman.h>

#include <gtest/gtest.h>

#include "nerve/error.hpp"

#include "memory/pool/node_allocator.hpp"

namespace nerve::memory::testing {

// SeparateMemoryNode hands out ranges of an inaccessible (PROT_NONE) reservation, like a device's
// memory seen from the host: any read or write by the pool faults.
class SeparateMemoryNode final : public NodeAllocator {
 public:
  static constexpr std::size_t reservation = std::size_t{1} << 30;
  // capacity: the bytes of live blocks the "device" can hold (a full one refuses more).
  explicit SeparateMemoryNode(std::size_t capacity = reservation) : capacity_(capacity) {
    base_ = static_cast<std::byte*>(
        mmap(nullptr, reservation, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
    if (base_ == MAP_FAILED) throw std::runtime_error("cannot reserve address space");
  }
  ~SeparateMemoryNode() override { munmap(base_, reservation); }

  void* allocate_block(std::size_t bytes, std::size_t) override {
    std::lock_guard lock(mutex_);
    if (next_ + bytes > reservation || live_bytes_ + bytes > capacity_)
      throw Error(ErrorCode::out_of_memory, "separate memory node is full");
    live_bytes_ += bytes;
    void* block = base_ + next_;
    next_ += bytes + 256;  // not adjacent, and only 256-byte aligned, as a driver might give
    live_.emplace(block, bytes);
    return block;
  }
  void free_block(void* block, std::size_t bytes) noexcept override {
    std::lock_guard lock(mutex_);
    const auto it = live_.find(block);
    if (it == live_.end() || it->second != bytes) ADD_FAILURE() << "bad free_block";
    if (it != live_.end()) {
      live_bytes_ -= it->second;
      live_.erase(it);
    }
  }
  // offset_in_block(): where `address` lies in the live block holding it.
  std::size_t offset_in_block(const void* address) const {
    std::lock_guard lock(mutex_);
    auto it = live_.upper_bound(const_cast<void*>(address));
    if (it == live_.begin()) throw std::logic_error("not in a block");
    --it;
    const std::size_t offset = static_cast<std::size_t>(static_cast<const std::byte*>(address) -
                                                        static_cast<const std::byte*>(it->first));
    if (offset >= it->second) throw std::logic_error("not in a block");
    return offset;
  }
  std::size_t largest_block() const {
    std::lock_guard lock(mutex_);
    std::size_t largest = 0;
    for (const auto& [block, bytes] : live_) largest = std::max(largest, bytes);
    return largest;
  }
  std::size_t live_blocks() const {
    std::lock_guard lock(mutex_);
    return live_.size();
  }
  int node_index() const noexcept override { return 1; }
  bool host_addressable() const noexcept override { return false; }
  std::string describe() const override { return "separate memory node 1"; }
  NodeAllocatorStats stats() const override {
    std::lock_guard lock(mutex_);
    NodeAllocatorStats result;
    result.blocks = live_.size();
    return result;
  }

 private:
  const std::size_t capacity_;
  std::byte* base_ = nullptr;
  std::size_t live_bytes_ = 0;
  mutable std::mutex mutex_;
  std::size_t next_ = 0;
  std::map<void*, std::size_t> live_;
};

}  // namespace nerve::memory::testing
