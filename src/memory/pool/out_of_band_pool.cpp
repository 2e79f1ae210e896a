#include "memory/pool/out_of_band_pool.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "nerve/error.hpp"

#include "util/log.hpp"

namespace nerve::memory {

OutOfBandPool::OutOfBandPool(std::unique_ptr<NodeAllocator> node, const PoolOptions& options)
    : node_(std::move(node)),
      budget_(*node_, options.limit_bytes),
      large_(budget_, 0, options.large_cache_bytes, options.large_cache_blocks) {}

OutOfBandPool::~OutOfBandPool() {
  std::lock_guard lock(mutex_);
  std::size_t live = 0;
  for (const auto& [start, slab] : slabs_) live += slab->live();
  if (live != 0) log::warn("{}: pool destroyed with {} chunk(s) still allocated", node_->describe(), live);
  for (const auto& [start, slab] : slabs_) budget_.release(reinterpret_cast<void*>(start), slab->bytes);
}

void* OutOfBandPool::allocate(std::size_t bytes) {
  if (bytes <= max_small_size) return allocate_small(bytes, size_class_of(bytes));
  bool from_cache = false;
  void* block = retry_after_compacting(
      [&](std::exception_ptr& refusal) { return large_.try_allocate(bytes, &from_cache, refusal); },
      [this] { compact(); });
  if (block == nullptr) throw_out_of_memory(bytes, LargeAllocations::rounded_size(bytes));
  return block;
}

void* OutOfBandPool::allocate_small(std::size_t bytes, unsigned size_class) {
  const std::size_t chunk_bytes = class_size(size_class);
  std::unique_lock lock(mutex_);
  auto& partial = partial_[size_class];
  if (partial.empty()) {
    // A new slab; the node is called without the mutex.
    const std::size_t slab_size = slab_bytes(size_class);
    lock.unlock();
    void* block = retry_after_compacting(
        [&](std::exception_ptr& refusal) { return budget_.try_acquire(slab_size, 0, slab_size, refusal); },
        [this] { compact(); });
    if (block == nullptr) throw_out_of_memory(bytes, slab_size);
    auto slab = std::make_unique<Slab>();
    slab->start = reinterpret_cast<std::uintptr_t>(block);
    slab->bytes = slab_size;
    slab->size_class = size_class;
    slab->capacity = static_cast<std::uint32_t>(slab_size / chunk_bytes);
    lock.lock();
    try {
      slab->listed = true;
      partial.push_back(slab.get());
      slabs_.emplace(slab->start, std::move(slab));
    } catch (...) {
      if (slab != nullptr) {
        std::erase(partial, slab.get());
        lock.unlock();
        budget_.release(block, slab_size);
      }
      throw;
    }
    ++from_node_;
  }
  Slab* slab = partial.back();
  std::uint32_t index = 0;
  if (!slab->free.empty()) {
    index = slab->free.back();
    slab->free.pop_back();
  } else {
    index = slab->carved++;
  }
  if (slab->free.empty() && slab->carved == slab->capacity) {
    partial.pop_back();
    slab->listed = false;
  }
  ++allocations_[size_class];
  ++in_use_[size_class];
  return reinterpret_cast<void*>(slab->start + static_cast<std::uintptr_t>(index) * chunk_bytes);
}

void OutOfBandPool::deallocate(void* pointer, std::size_t bytes) noexcept {
  if (pointer == nullptr) return;
  if (bytes > max_small_size) return large_.free(pointer, bytes);
  const unsigned size_class = size_class_of(bytes);
  const auto address = reinterpret_cast<std::uintptr_t>(pointer);
  std::lock_guard lock(mutex_);
  auto it = slabs_.upper_bound(address);
  Slab* slab = it == slabs_.begin() ? nullptr : std::prev(it)->second.get();
  if (slab == nullptr || address >= slab->start + slab->bytes || slab->size_class != size_class ||
      (address - slab->start) % class_size(size_class) != 0) {
    log::error("{}: deallocate({}, {}) of memory this pool did not allocate with that size; ignored",
               node_->describe(), pointer, bytes);
    return;
  }
  try {
    slab->free.push_back(static_cast<std::uint32_t>((address - slab->start) / class_size(size_class)));
    if (!slab->listed) {
      partial_[size_class].push_back(slab);
      slab->listed = true;
    }
  } catch (...) {
    // No host memory for the bookkeeping: the chunk is lost until the pool is destroyed.
    log::error("{}: out of host memory while freeing a chunk; it stays unusable", node_->describe());
  }
  --in_use_[size_class];
}

std::size_t OutOfBandPool::release_empty_slabs() {
  std::vector<std::pair<void*, std::size_t>> empty;
  {
    std::lock_guard lock(mutex_);
    for (auto& partial : partial_) {
      std::erase_if(partial, [&](Slab* slab) {
        if (slab->live() != 0) return false;
        empty.emplace_back(reinterpret_cast<void*>(slab->start), slab->bytes);
        slabs_.erase(slab->start);  // destroys the record: nothing below may use `slab`
        return true;
      });
    }
  }
  std::size_t released = 0;
  for (const auto& [block, bytes] : empty) {
    budget_.release(block, bytes);
    released += bytes;
  }
  return released;
}

std::size_t OutOfBandPool::compact() { return release_empty_slabs() + large_.release_cached(); }

void OutOfBandPool::throw_out_of_memory(std::size_t requested, std::size_t block_bytes) {
  const MemoryPoolStats current = stats();
  throw Error(ErrorCode::out_of_memory,
              fmt::format("{}: out of memory: cannot allocate {} bytes (a new block of {} bytes): the pool "
                          "{}, {} bytes are in use and {} reserved from the node",
                          node_->describe(), requested, block_bytes, describe_limit(budget_.limit()),
                          current.bytes_in_use, current.bytes_reserved));
}

MemoryPoolStats OutOfBandPool::stats() const {
  MemoryPoolStats result;
  result.node = node_->describe();
  result.limit_bytes = budget_.limit();
  result.bytes_reserved = budget_.reserved();
  std::uint64_t small = 0;
  {
    std::lock_guard lock(mutex_);
    std::size_t slabs[size_class_count] = {};
    for (const auto& [start, slab] : slabs_) ++slabs[slab->size_class];
    for (unsigned k = 0; k < size_class_count; ++k) {
      result.size_classes.push_back({class_size(k), allocations_[k], in_use_[k], slabs[k]});
      result.bytes_in_use += in_use_[k] * class_size(k);
      small += allocations_[k];
    }
    result.from_node = from_node_;
  }
  const LargeAllocations::Stats large = large_.stats();
  result.large_allocations = large.allocations;
  result.large_from_cache = large.from_cache;
  result.large_bytes_cached = large.bytes_cached;
  result.bytes_in_use += large.bytes_in_use;
  result.allocations = small + large.allocations;
  result.from_central = small - std::min(small, result.from_node) + large.from_cache;
  result.from_node += large.allocations - large.from_cache;
  const NodeAllocatorStats node_stats = node_->stats();
  result.numa_binding_failures = node_stats.binding_failures;
  result.huge_page_bytes = node_stats.huge_page_bytes;
  return result;
}

}  // namespace nerve::memory
