#include "backend/cuda/device_pools.hpp"

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include <fmt/format.h>

#include "nerve/error.hpp"

namespace nerve::detail::cuda {

PoolKind pool_kind_from_environment() {
  const char* value = std::getenv("NERVE_CUDA_POOL");
  if (value != nullptr && std::string_view(value) == "stream_ordered") return PoolKind::stream_ordered;
  return PoolKind::arena;
}

DeviceArena::DeviceArena(std::unique_ptr<memory::NodeAllocator> node, std::size_t limit_bytes,
                         std::size_t chunk_bytes)
    : node_(std::move(node)), budget_(*node_, limit_bytes), chunk_bytes_(chunk_bytes) {}

DeviceArena::~DeviceArena() {
  for (const auto& [start, chunk] : chunks_) budget_.release(reinterpret_cast<void*>(start), chunk.bytes);
}

void DeviceArena::add_free(std::uintptr_t start, std::size_t bytes) {
  free_.emplace(start, bytes);
  by_size_.emplace(bytes, start);
}

void DeviceArena::remove_free(std::map<std::uintptr_t, std::size_t>::iterator range) {
  auto [first, last] = by_size_.equal_range(range->second);
  for (auto it = first; it != last; ++it) {
    if (it->second == range->first) {
      by_size_.erase(it);
      break;
    }
  }
  free_.erase(range);
}

void* DeviceArena::take(std::size_t bytes) {
  const auto best = by_size_.lower_bound(bytes);
  if (best == by_size_.end()) return nullptr;
  const std::uintptr_t start = best->second;
  const std::size_t size = best->first;
  by_size_.erase(best);
  free_.erase(start);
  if (size > bytes) add_free(start + bytes, size - bytes);
  auto chunk = std::prev(chunks_.upper_bound(start));
  chunk->second.used += bytes;
  in_use_ += bytes;
  return reinterpret_cast<void*>(start);
}

bool DeviceArena::new_chunk(std::size_t bytes) {
  constexpr std::size_t granule = std::size_t{2} << 20;
  const std::size_t size = std::max(chunk_bytes_, (bytes + granule - 1) / granule * granule);
  void* block = nullptr;
  try {
    block = budget_.try_acquire(size, alignment);
  } catch (const Error& error) {
    if (error.code() != ErrorCode::out_of_memory) throw;
  }
  if (block == nullptr) return false;
  const auto start = reinterpret_cast<std::uintptr_t>(block);
  chunks_.emplace(start, Chunk{size, 0});
  add_free(start, size);
  ++from_node_;
  return true;
}

void* DeviceArena::allocate(std::size_t bytes) {
  const std::size_t size = rounded(std::max<std::size_t>(bytes, 1));
  std::lock_guard lock(mutex_);
  ++allocations_;
  if (void* found = take(size)) return found;
  if (new_chunk(size)) return take(size);
  // Empty chunks are kept for reuse; a chunk of another size may fit once they are given back.
  if (release_empty_chunks() != 0 && new_chunk(size)) return take(size);
  --allocations_;
  throw Error(ErrorCode::out_of_memory,
              fmt::format("{}: {} bytes asked; the pool holds {} bytes ({} in use) of its limit {}",
                          node_->describe(), bytes, budget_.reserved(), in_use_,
                          budget_.limit() == 0 ? std::string("(none)") : std::to_string(budget_.limit())));
}

void DeviceArena::deallocate(void* pointer, std::size_t bytes) noexcept {
  if (pointer == nullptr) return;
  std::size_t size = rounded(std::max<std::size_t>(bytes, 1));
  std::uintptr_t start = reinterpret_cast<std::uintptr_t>(pointer);
  std::lock_guard lock(mutex_);
  auto chunk = std::prev(chunks_.upper_bound(start));
  chunk->second.used -= size;
  in_use_ -= size;
  const std::uintptr_t chunk_start = chunk->first, chunk_end = chunk->first + chunk->second.bytes;
  try {
    // Coalesce with the free neighbours inside the same chunk (chunks are separate driver blocks).
    auto next = free_.lower_bound(start);
    if (next != free_.end() && next->first == start + size && next->first < chunk_end) {
      size += next->second;
      remove_free(next);
    }
    auto previous = free_.lower_bound(start);
    if (previous != free_.begin()) {
      --previous;
      if (previous->first >= chunk_start && previous->first + previous->second == start) {
        start = previous->first;
        size += previous->second;
        remove_free(previous);
      }
    }
    add_free(start, size);
  } catch (...) {  // bookkeeping out of host memory: the range is lost until the chunk is released
  }
}

std::size_t DeviceArena::release_empty_chunks() {
  std::size_t released = 0;
  for (auto chunk = chunks_.begin(); chunk != chunks_.end();) {
    if (chunk->second.used != 0) {
      ++chunk;
      continue;
    }
    remove_free(free_.find(chunk->first));  // an empty chunk is one free range
    budget_.release(reinterpret_cast<void*>(chunk->first), chunk->second.bytes);
    released += chunk->second.bytes;
    chunk = chunks_.erase(chunk);
  }
  return released;
}

std::size_t DeviceArena::compact() {
  std::lock_guard lock(mutex_);
  return release_empty_chunks();
}

std::size_t DeviceArena::chunks() const {
  std::lock_guard lock(mutex_);
  return chunks_.size();
}

MemoryPoolStats DeviceArena::stats() const {
  std::lock_guard lock(mutex_);
  MemoryPoolStats s;
  s.node = node_->describe();
  s.limit_bytes = budget_.limit();
  s.bytes_reserved = budget_.reserved();
  s.bytes_in_use = in_use_;
  s.allocations = allocations_;
  s.from_node = from_node_;
  s.from_central = allocations_ - from_node_;
  return s;
}

StreamOrderedPool::StreamOrderedPool(Driver& driver, int device,
                                     std::unique_ptr<memory::NodeAllocator> describe, std::size_t limit_bytes)
    : driver_(driver), device_(device), describe_(std::move(describe)), limit_(limit_bytes) {
  int least = 0, greatest = 0;
  driver_.priority_range(device_, least, greatest);
  stream_ = driver_.create_stream(device_, least);
}

StreamOrderedPool::~StreamOrderedPool() { driver_.destroy_stream(device_, stream_); }

void* StreamOrderedPool::allocate(std::size_t bytes) {
  std::lock_guard lock(mutex_);
  if (limit_ != 0 && in_use_ + bytes > limit_) {
    throw Error(ErrorCode::out_of_memory, fmt::format("{}: {} bytes asked, {} of the limit {} in use",
                                                      describe_->describe(), bytes, in_use_, limit_));
  }
  void* pointer = driver_.malloc_async(device_, std::max<std::size_t>(bytes, 1), stream_);
  // Synchronised here so that work on any other stream may use it (allocations are per replica,
  // not per task: the wait is rare).
  driver_.synchronize_stream(stream_);
  in_use_ += bytes;
  ++allocations_;
  return pointer;
}

void StreamOrderedPool::deallocate(void* pointer, std::size_t bytes) noexcept {
  if (pointer == nullptr) return;
  std::lock_guard lock(mutex_);
  // The runtime frees a replica only after every copy and task using it completed on the host's
  // side, so freeing in this stream's order is safe.
  driver_.free_async(device_, pointer, stream_);
  in_use_ -= bytes;
}

MemoryPoolStats StreamOrderedPool::stats() const {
  std::lock_guard lock(mutex_);
  MemoryPoolStats s;
  s.node = describe_->describe();
  s.limit_bytes = limit_;
  s.bytes_reserved = in_use_;
  s.bytes_in_use = in_use_;
  s.allocations = allocations_;
  s.from_node = allocations_;
  return s;
}

}  // namespace nerve::detail::cuda
