// record_allocator.hpp — task records without malloc on the fast path.
//
// Records live in slabs owned by the allocator (freed with it). Each thread allocates from and
// frees into its own Cache (a stack of pointers, no atomics); a cache that fills up (two magazines)
// hands its older magazine (`magazine_size` pointers) to the shared depot, and an empty cache takes
// one back — Bonwick's magazine scheme. Records freed on another thread than the one that allocated
// them simply change caches.
//
// The caches hold pointers, not lists threaded through the records: a thread that allocates records
// another core freed (one thread submits, the workers run and free) would otherwise read each record
// to find the next, one cross-core miss after the other. With the pointers at hand, allocate() asks
// for the record prefetch_distance allocations ahead, so its lines are on their way well before
// they are written (W1, where this chain of misses set the pace: see docs/BENCHMARKS.md).
//
// Thread safety: a Cache is used by its owner thread only; the depot is mutex-protected and is
// touched once per magazine_size operations. live_records() sums the caches' counters (exact when
// no thread is allocating or freeing).
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "task/task_record.hpp"

namespace nerve::detail {

class RecordAllocator {
 public:
  static constexpr std::size_t magazine_size = 64;
  static constexpr std::size_t slab_records = 512;
  // Allocations between asking for a record's lines and writing them: about one cross-core line
  // transfer at the pace of a tight submission loop.
  static constexpr std::size_t prefetch_distance = 16;

  struct Cache {
    std::array<TaskRecord*, 2 * magazine_size> free{};  // [0, count): a stack, last freed on top
    std::size_t count = 0;
    std::atomic<std::int64_t> live{0};  // allocations minus frees through this cache (owner writes)
  };

  RecordAllocator() = default;
  ~RecordAllocator();
  RecordAllocator(const RecordAllocator&) = delete;
  RecordAllocator& operator=(const RecordAllocator&) = delete;

  // register_cache() makes `cache` count in live_records(); the cache must outlive the allocator's
  // last live_records() call.
  void register_cache(Cache& cache);

  TaskRecord* allocate(Cache& cache) {
    if (cache.count == 0) refill(cache);
    TaskRecord* record = cache.free[--cache.count];
    if (cache.count >= prefetch_distance) prefetch_task_header(cache.free[cache.count - prefetch_distance]);
    cache.live.store(cache.live.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    record->reuse();
    return record;
  }

  // prefetch_next() asks for the record the cache's next allocate() returns. A submission that
  // fills in most of a record (accesses, dependencies) calls it: a record freed where its task ran,
  // often another core, otherwise comes one missed line at a time (W4: 268 -> 217 ns per task, W3:
  // 88 -> 71, medians of alternated runs). Not for the fork-join fast path, whose records mostly
  // stay on one core and which writes two lines.
  static void prefetch_next(const Cache& cache) noexcept {
    if (cache.count != 0) prefetch_record(cache.free[cache.count - 1]);
  }

  void free(Cache& cache, TaskRecord* record) noexcept {
    record->release_resources();
    push(cache, record);
  }
  // free_pristine(): free() for a record whose cold lines hold their recycled values but for its
  // name — a lean task of the fork-join fast path that succeeded with no recording and no devices
  // (ContextImpl::finish). release_resources() would read lines 2, 3 and 5 to find nothing to do:
  // ~60 instructions and three cache lines per task of W1 and W2.
  void free_pristine(Cache& cache, TaskRecord* record) noexcept {
    record_fields::restore(record->name, nullptr);
    push(cache, record);
  }

  std::int64_t live_records() const;
  std::size_t slab_count() const;

 private:
  void push(Cache& cache, TaskRecord* record) noexcept {
    cache.free[cache.count++] = record;
    cache.live.store(cache.live.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
    if (cache.count == cache.free.size()) spill(cache);
  }
  using Magazine = std::array<TaskRecord*, magazine_size>;
  void refill(Cache& cache);
  void add_slab(Cache& cache);  // mutex_ held
  void spill(Cache& cache) noexcept;

  mutable std::mutex mutex_;
  struct SlabDeleter {
    void operator()(TaskRecord* slab) const noexcept {
      ::operator delete (static_cast<void*>(slab), std::align_val_t{alignof(TaskRecord)});
    }
  };
  std::vector<Magazine> depot_;
  // Records live in them from the slab's creation; a free record holds nothing, so none is destroyed.
  std::vector<std::unique_ptr<TaskRecord, SlabDeleter>> slabs_;
  std::vector<Cache*> caches_;
};

}  // namespace nerve::detail
