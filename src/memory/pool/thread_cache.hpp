// thread_cache.hpp — one thread's free chunks in one pool (the front of the pool), and, with
// memory.global_pool: false, that thread's own slabs.
//
// Per size class, a LIFO list of free chunks (Bonwick's magazines reduced to a bounded list, as in
// tcmalloc's thread caches): allocation pops, deallocation pushes, with no lock and no atomic
// read-modify-write. The bytes held are bounded by `budget` (memory.per_thread_pool_size): a
// deallocation that goes over it hands half of the class's list back; a miss refills a batch.
//
// With memory.global_pool: false the cache is also a heap (mimalloc-style, Leijen et al. 2019): its
// slabs belong to this thread (`own`), and a chunk freed by another thread comes back through
// `remote`, a per-class lock-free stack the owner drains when it runs short — so memory freed on one
// thread is not reused by another (the trade-off the configuration documents).
//
// Lifetime: a ThreadCache belongs to its pool and lives as long as the pool. A thread is attached to
// at most one cache per pool (thread_registry.hpp); when it exits, the cache is emptied back into the
// pool and kept for the next thread, which adopts it — with its slabs, when it is a heap.
//
// Thread safety: `lists`, `cached_bytes` and `seen_trim_epoch` belong to the attached thread (or to
// whoever holds the pool's cache mutex while no thread is attached). `own` is guarded by `heap_lock`,
// which the owner takes on its slow path only and HostPool::compact() takes from any thread: an idle
// thread's heap would otherwise keep, forever, slabs that other threads' frees emptied. `remote` is
// pushed by any thread (release CAS) and drained under `heap_lock` (acquire exchange; a consumer takes
// the whole stack, so there is no ABA). The counters are written by the owner only, with a relaxed load and
// store, and read by stats() from any thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "memory/pool/size_classes.hpp"
#include "memory/pool/slab.hpp"
#include "util/spin_lock.hpp"

namespace nerve::memory {

// OwnerCounter is a statistic written by one thread only: no read-modify-write on the hot path.
class OwnerCounter {
 public:
  void add(std::uint64_t n = 1) noexcept {
    value_.store(value_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  std::uint64_t get() const noexcept { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<std::uint64_t> value_{0};
};

struct alignas(64) ThreadCache {
  // No length is kept: the hot path only pushes and pops, and trim() counts the list when it cuts
  // it (a read-modify-write less per operation: W8's pairs took 10-15 % less time without it).
  struct ClassList {
    FreeChunk* head = nullptr;
    OwnerCounter allocations;  // every allocation of this class by this thread
    OwnerCounter frees;        // every deallocation of this class by this thread
  };

  std::size_t cached_bytes = 0;
  std::size_t budget = 0;
  ClassList lists[size_class_count];

  std::uint64_t seen_trim_epoch = 0;
  OwnerCounter from_central;  // allocations served from the central list or the thread's own slabs
  OwnerCounter from_node;     // allocations that needed a new slab

  SpinLock heap_lock;                                     // global_pool: false; guards `own`
  SlabSet own[size_class_count];                          // global_pool: false
  std::atomic<FreeChunk*> remote[size_class_count] = {};  // global_pool: false

  bool attached = false;                 // guarded by the pool's cache mutex
  ThreadCache* next_released = nullptr;  // ditto

  // push_remote() gives this heap back one of its chunks freed by another thread.
  void push_remote(unsigned size_class, FreeChunk* chunk) noexcept {
    std::atomic<FreeChunk*>& stack = remote[size_class];
    FreeChunk* head = stack.load(std::memory_order_relaxed);
    do {
      chunk->next = head;
    } while (!stack.compare_exchange_weak(head, chunk, std::memory_order_release, std::memory_order_relaxed));
  }
  // take_remote() takes every chunk other threads gave back (holding heap_lock).
  FreeChunk* take_remote(unsigned size_class) noexcept {
    if (remote[size_class].load(std::memory_order_relaxed) == nullptr) return nullptr;
    return remote[size_class].exchange(nullptr, std::memory_order_acquire);
  }
};

}  // namespace nerve::memory
