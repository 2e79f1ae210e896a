// host_pool.hpp — the pool of a host-addressable memory node: thread caches over central free lists
// (or per-thread heaps) over slabs over the NodeAllocator.
//
//   allocate(n ≤ 64 KiB):  thread cache hit → pop (no lock, no atomic RMW, no system call)
//                          miss → refill a batch from the central list of the class (spin lock) or,
//                          with global_pool: false, from the thread's remote frees and own slabs
//                          (no lock); a class with no free chunk gets a new slab (empty-slab cache,
//                          else the node, within the limit)
//   deallocate:            push onto the thread cache; past the budget, half the class's list goes
//                          back; with global_pool: false a chunk of another thread's slab goes to
//                          that thread's remote-free stack instead
//   n > 64 KiB:            LargeAllocations (node blocks with a cache of recently freed ones)
//
// Empty slabs leave their class (each class keeps one spare) for a pool-wide cache of empty slabs,
// by slab size, reusable by any class of that slab size; beyond retained_empty_slab_bytes they go back
// to the node. compact() returns them all.
//
// What compact() can return: every empty slab (central lists, the empty-slab cache, the calling
// thread's heap, heaps of exited threads), every cached large block, and the calling thread's cached
// chunks. It cannot take chunks out of other live threads' caches (they are theirs without locks);
// it asks those threads to flush their caches at their next slow-path operation (a trim epoch), so a
// later compact() can return the slabs that makes empty. It reports the bytes given back to the node
// while it ran (by any thread).
//
// When a new block would exceed the limit, the pool compacts and retries once, then throws
// Error(out_of_memory) naming the node, the size asked, the limit and the bytes in use.
//
// Thread safety: as nerve::MemoryPool. Memory ordering: chunks move between threads through the
// central lists (a lock), the remote-free stacks (release push, acquire take) or the program's own
// synchronisation, so a chunk's previous contents and its reuse are always ordered.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "memory/pool/large_allocations.hpp"
#include "memory/pool/node_budget.hpp"
#include "memory/pool/pool.hpp"
#include "memory/pool/size_classes.hpp"
#include "memory/pool/slab.hpp"
#include "memory/pool/thread_cache.hpp"
#include "memory/pool/thread_registry.hpp"
#include "util/cpu.hpp"
#include "util/spin_lock.hpp"

namespace nerve::memory {

class HostPool final : public NodePool {
 public:
  // `node` must be host-addressable and honour slab alignments (HostNodeAllocator does).
  HostPool(std::unique_ptr<NodeAllocator> node, const PoolOptions& options);
  ~HostPool() override;
  HostPool(const HostPool&) = delete;
  HostPool& operator=(const HostPool&) = delete;

  void* allocate(std::size_t bytes) override {
    if (bytes > max_small_size) [[unlikely]]
      return allocate_large(bytes);
    const unsigned size_class = size_class_of(bytes);
    const ThreadCacheSlot& slot = thread_cache_slots[id_ % thread_cache_slot_count];
    if (slot.pool_id != id_) [[unlikely]]
      return allocate_small_slow(nullptr, size_class);
    ThreadCache* cache = slot.cache;
    ThreadCache::ClassList& list = cache->lists[size_class];
    FreeChunk* chunk = list.head;
    if (chunk == nullptr) [[unlikely]]
      return allocate_small_slow(cache, size_class);
    list.head = chunk->next;
    cache->cached_bytes -= class_size(size_class);
    list.allocations.add();
    return chunk;
  }

  void deallocate(void* pointer, std::size_t bytes) noexcept override {
    if (pointer == nullptr) return;
    if (bytes > max_small_size) [[unlikely]]
      return large_.free(pointer, bytes);
    const unsigned size_class = size_class_of(bytes);
    const ThreadCacheSlot& slot = thread_cache_slots[id_ % thread_cache_slot_count];
    if (slot.pool_id != id_) [[unlikely]]
      return free_small_slow(nullptr, pointer, size_class);
    ThreadCache* cache = slot.cache;
    if (!global_pool_ && slab_of(pointer, size_class)->owner != cache) [[unlikely]]
      return free_small_slow(cache, pointer, size_class);
    // A chunk larger than the whole budget goes straight back through trim().
    const std::size_t chunk_bytes = class_size(size_class);
    ThreadCache::ClassList& list = cache->lists[size_class];
    auto* chunk = static_cast<FreeChunk*>(pointer);
    chunk->next = list.head;
    list.head = chunk;
    list.frees.add();
    cache->cached_bytes += chunk_bytes;
    if (cache->cached_bytes > cache->budget) [[unlikely]]
      trim(cache, size_class);
  }

  std::size_t compact() override;
  MemoryPoolStats stats() const override;
  NodeAllocator& node() const noexcept override { return *node_; }

  std::uint64_t id() const noexcept { return id_; }
  // For thread_registry.cpp: a cache for a newly attached thread / back from an exiting one.
  ThreadCache* acquire_thread_cache();
  void release_thread_cache(ThreadCache* cache) noexcept;

 private:
  struct alignas(cache_line_size) Central {
    SpinLock lock;
    SlabSet slabs;
  };
  struct alignas(cache_line_size) DirectCounters {  // threads without a cache (exiting)
    std::atomic<std::uint64_t> allocations[size_class_count] = {};
    std::atomic<std::uint64_t> frees[size_class_count] = {};
    std::atomic<std::uint64_t> from_node{0};
  };

  void* allocate_small_slow(ThreadCache* cache, unsigned size_class);
  void* allocate_large(std::size_t bytes);
  void free_small_slow(ThreadCache* cache, void* pointer, unsigned size_class) noexcept;

  // take_chunks() gets up to `want` (>= 1) chunks for `cache` (null: from the central list) onto
  // `*list`; sets `*made_slab` when a slab had to be made. Returns how many (>= 1) or throws.
  std::uint32_t take_chunks(ThreadCache* cache, unsigned size_class, std::uint32_t want, FreeChunk** list,
                            bool* made_slab);
  // give_back() returns a list of chunks of one class to their owners' slab sets.
  void give_back(ThreadCache* cache, unsigned size_class, FreeChunk* list) noexcept;
  void give_back_one(ThreadCache* cache, unsigned size_class, FreeChunk* chunk) noexcept;
  // trim() brings an over-budget cache back under its budget.
  void trim(ThreadCache* cache, unsigned size_class) noexcept;
  // flush() empties a cache's lists (and, for a heap, its remote stacks) into the slabs.
  void flush(ThreadCache* cache) noexcept;
  // reclaim_heap() (global_pool: false) puts the chunks other threads freed to a heap back into its
  // slabs and gives its empty slabs back to the node; from any thread (compact()). Returns the bytes.
  std::size_t reclaim_heap(ThreadCache* cache) noexcept;

  SlabHeader* new_slab(unsigned size_class, ThreadCache* owner);
  // retire() takes an empty slab out of its class: kept for reuse, or back to the node.
  void retire(SlabHeader* slab) noexcept;
  std::size_t free_slab(SlabHeader* slab) noexcept;
  // reserve_slab(): a block for a new slab of `size_class` (its size in `bytes`), within the limit.
  void* reserve_slab(unsigned size_class, std::size_t& bytes);
  // holds_free_memory(): empty slabs (spares in a class's set, or in the empty-slab cache) or large
  // blocks are cached: compact() would give them back.
  bool holds_free_memory() const;
  [[noreturn]] void throw_out_of_memory(std::size_t requested, std::size_t block_bytes) const;
  std::size_t bytes_in_use() const;

  const std::unique_ptr<NodeAllocator> node_;
  const PoolOptions options_;
  const bool global_pool_;
  std::uint64_t id_ = 0;
  NodeBudget budget_;
  LargeAllocations large_;
  Central central_[size_class_count];
  DirectCounters direct_;
  std::atomic<std::uint64_t> trim_epoch_{0};
  std::atomic<std::size_t> spare_slab_bytes_{0};  // empty slabs kept in SlabSets (SlabSet::count_spares_in)
  std::atomic<std::size_t> slab_counts_[size_class_count] = {};

  mutable std::mutex slabs_mutex_;  // every slab, and the empty-slab cache
  SlabHeader* all_slabs_ = nullptr;
  std::vector<SlabHeader*> empty_slabs_[6];  // by log2(slab size / 64 KiB)
  std::size_t empty_slab_bytes_ = 0;

  mutable std::mutex caches_mutex_;
  std::vector<std::unique_ptr<ThreadCache>> caches_;
  ThreadCache* released_caches_ = nullptr;
};

}  // namespace nerve::memory
