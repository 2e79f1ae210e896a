#include "task/record_allocator.hpp"

#include <algorithm>

namespace nerve::detail {

RecordAllocator::~RecordAllocator() = default;

void RecordAllocator::register_cache(Cache& cache) {
  std::lock_guard lock(mutex_);
  caches_.push_back(&cache);
}

void RecordAllocator::refill(Cache& cache) {
  std::lock_guard lock(mutex_);
  if (!depot_.empty()) {
    cache.head = depot_.back().head;
    cache.count = magazine_size;
    depot_.pop_back();
    return;
  }
  // A new slab: one magazine goes to the cache, the rest to the depot. Everything that may throw
  // bad_alloc happens before the slab is handed out, so a failure loses nothing.
  std::unique_ptr<TaskRecord, SlabDeleter> owned(static_cast<TaskRecord*>(
      ::operator new (sizeof(TaskRecord) * slab_records, std::align_val_t{alignof(TaskRecord)})));
  if (const std::size_t more = slab_records / magazine_size; depot_.capacity() - depot_.size() < more)
    depot_.reserve(std::max(2 * depot_.capacity(), depot_.size() + more));
  slabs_.push_back(std::move(owned));
  TaskRecord* slab = slabs_.back().get();
  for (std::size_t start = 0; start < slab_records; start += magazine_size) {
    for (std::size_t i = start; i < start + magazine_size; ++i) {
      ::new (static_cast<void*>(&slab[i])) TaskRecord;  // recycled from now on (TaskRecord::reuse)
      slab[i].next.store(i + 1 < start + magazine_size ? &slab[i + 1] : nullptr, std::memory_order_relaxed);
    }
    if (start == 0) {
      cache.head = &slab[0];
      cache.count = magazine_size;
    } else {
      depot_.push_back(Magazine{&slab[start]});
    }
  }
}

void RecordAllocator::spill(Cache& cache) noexcept {
  // Detach exactly one magazine from the front of the cache's list.
  TaskRecord* first = cache.head;
  TaskRecord* last = first;
  for (std::size_t i = 1; i < magazine_size; ++i) {
    last = static_cast<TaskRecord*>(last->next.load(std::memory_order_relaxed));
  }
  cache.head = static_cast<TaskRecord*>(last->next.load(std::memory_order_relaxed));
  last->next.store(nullptr, std::memory_order_relaxed);
  cache.count -= magazine_size;
  std::lock_guard lock(mutex_);
  depot_.push_back(Magazine{first});
}

std::int64_t RecordAllocator::live_records() const {
  std::lock_guard lock(mutex_);
  std::int64_t live = 0;
  for (const Cache* cache : caches_) live += cache->live.load(std::memory_order_acquire);
  return live;
}

std::size_t RecordAllocator::slab_count() const {
  std::lock_guard lock(mutex_);
  return slabs_.size();
}

}  // namespace nerve::detail
