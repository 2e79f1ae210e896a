#include "memory/pool/device_arena.hpp"

#include <algorithm>
#include <bit>
#include <string>

#include <fmt/format.h>

#include "nerve/error.hpp"

namespace nerve::memory {

DeviceArena::DeviceArena(std::unique_ptr<NodeAllocator> node, const DeviceArenaOptions& options)
    : node_(std::move(node)),
      budget_(*node_, options.limit_bytes),
      alignment_(options.alignment),
      chunk_bytes_(std::min(options.chunk_bytes, options.max_chunk_bytes)),
      max_chunk_bytes_(options.max_chunk_bytes) {
  if (!std::has_single_bit(alignment_) || alignment_ > chunk_granule || chunk_bytes_ < alignment_) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("{}: a device arena needs a power-of-two alignment of at most {} bytes and "
                            "chunks of at least that (alignment {}, chunk {} bytes)",
                            node_->describe(), chunk_granule, alignment_, chunk_bytes_));
  }
}

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

bool DeviceArena::try_chunk(std::size_t size) {
  std::exception_ptr refusal;  // a full device is a smaller chunk to try, or the caller's report
  void* block = budget_.try_acquire(size, alignment_, size, refusal);
  if (block == nullptr) return false;
  const auto start = reinterpret_cast<std::uintptr_t>(block);
  try {  // the bookkeeping may fail to allocate its nodes: the chunk then goes back to the node
    chunks_.emplace(start, Chunk{size, 0});
    add_free(start, size);
  } catch (...) {
    chunks_.erase(start);
    if (free_.erase(start) != 0)
      std::erase_if(by_size_, [start](const auto& entry) { return entry.second == start; });
    budget_.release(block, size);
    throw;
  }
  ++from_node_;
  return true;
}

bool DeviceArena::new_chunk(std::size_t bytes) {
  if (bytes > max_chunk_bytes_) return false;
  const std::size_t usual = std::min(
      std::max(chunk_bytes_, (bytes + chunk_granule - 1) / chunk_granule * chunk_granule), max_chunk_bytes_);
  // A chunk of just the request when the usual one is refused: a small limit or a nearly full device
  // must still serve what fits.
  const std::size_t page = 4096;  // node blocks are whole pages
  const std::size_t just = std::min((bytes + page - 1) / page * page, max_chunk_bytes_);
  return try_chunk(usual) || (usual > just && try_chunk(just));
}

void* DeviceArena::allocate(std::size_t bytes) {
  const std::size_t size =
      bytes > NodeBudget::max_block_bytes ? bytes : rounded(std::max<std::size_t>(bytes, 1));
  std::lock_guard lock(mutex_);
  ++allocations_;
  if (size <= NodeBudget::max_block_bytes) {
    if (void* found = take(size)) return found;
    if (new_chunk(size)) return take(size);
    // Empty chunks are kept for reuse; a chunk of another size may fit once they are given back.
    if (release_empty_chunks() != 0 && new_chunk(size)) return take(size);
  }
  --allocations_;
  throw Error(ErrorCode::out_of_memory,
              fmt::format("{}: {} bytes asked; the pool holds {} bytes ({} in use) of its limit {}{}",
                          node_->describe(), bytes, budget_.reserved(), in_use_,
                          budget_.limit() == 0 ? std::string("(none)") : std::to_string(budget_.limit()),
                          bytes > max_chunk_bytes_
                              ? fmt::format("; the node's largest single block is {} bytes", max_chunk_bytes_)
                              : std::string()));
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
    // Coalesce with the free neighbours inside the same chunk (chunks are separate node blocks).
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

}  // namespace nerve::memory
