#include "task/record_allocator.hpp"

#include <algorithm>
#include <span>

namespace nerve::detail {

RecordAllocator::~RecordAllocator() = default;

void RecordAllocator::register_cache(Cache& cache) {
  std::lock_guard lock(mutex_);
  caches_.push_back(&cache);
}

void RecordAllocator::refill(Cache& cache) {
  {
    std::lock_guard lock(mutex_);
    if (!depot_.empty()) {
      std::copy(depot_.back().begin(), depot_.back().end(), cache.free.begin());
      depot_.pop_back();
    } else {
      add_slab(cache);
    }
  }
  cache.count = magazine_size;
  // The first allocations' records; allocate() asks for the later ones as it goes.
  for (std::size_t i = 1; i <= prefetch_distance; ++i) prefetch_task_header(cache.free[magazine_size - i]);
}

void RecordAllocator::add_slab(Cache& cache) {
  // One magazine goes to the cache, the rest to the depot. Everything that may throw bad_alloc
  // happens before the slab is handed out, so a failure loses nothing. The depot is reserved for
  // every record in a magazine there, so spill() never allocates.
  std::unique_ptr<TaskRecord, SlabDeleter> owned(static_cast<TaskRecord*>(
      ::operator new (sizeof(TaskRecord) * slab_records, std::align_val_t{alignof(TaskRecord)})));
  constexpr std::size_t magazines_per_slab = slab_records / magazine_size;
  if (const std::size_t needed = (slabs_.size() + 1) * magazines_per_slab; depot_.capacity() < needed)
    depot_.reserve(std::max(2 * depot_.capacity(), needed));
  slabs_.push_back(std::move(owned));
  TaskRecord* slab = slabs_.back().get();
  for (std::size_t i = 0; i < slab_records; ++i) {
    ::new (static_cast<void*>(&slab[i])) TaskRecord;  // recycled from now on (TaskRecord::reuse)
  }
  // Handed out in address order, which the hardware prefetcher follows: a stack's top is taken
  // first, and the depot's last magazine.
  const auto fill = [&](std::span<TaskRecord*, magazine_size> magazine, std::size_t start) {
    for (std::size_t i = 0; i < magazine_size; ++i) magazine[i] = &slab[start + magazine_size - 1 - i];
  };
  fill(std::span<TaskRecord*, magazine_size>(cache.free.data(), magazine_size), 0);
  for (std::size_t start = slab_records - magazine_size; start > 0; start -= magazine_size) {
    fill(depot_.emplace_back(), start);
  }
}

void RecordAllocator::spill(Cache& cache) noexcept {
  // The older magazine goes; the records freed last, likely still in this core's cache, stay.
  std::lock_guard lock(mutex_);
  Magazine& magazine = depot_.emplace_back();
  std::copy_n(cache.free.begin(), magazine_size, magazine.begin());
  std::copy(cache.free.begin() + magazine_size, cache.free.end(), cache.free.begin());
  cache.count -= magazine_size;
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
