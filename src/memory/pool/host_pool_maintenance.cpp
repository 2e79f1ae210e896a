// HostPool's slow, rare operations: thread caches coming and going, compaction, statistics and the
// out-of-memory report.
#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "nerve/error.hpp"

#include "memory/pool/host_pool.hpp"

namespace nerve::memory {

ThreadCache* HostPool::acquire_thread_cache() {
  std::lock_guard lock(caches_mutex_);
  ThreadCache* cache = released_caches_;
  if (cache != nullptr) {
    released_caches_ = cache->next_released;  // adopted, with its slabs when it is a heap
  } else {
    caches_.push_back(std::make_unique<ThreadCache>());
    cache = caches_.back().get();
    for (SlabSet& own : cache->own) own.count_spares_in(&spare_slab_bytes_);
  }
  cache->attached = true;
  cache->next_released = nullptr;
  cache->budget = options_.thread_cache_bytes;
  cache->seen_trim_epoch = trim_epoch_.load(std::memory_order_relaxed);
  return cache;
}

void HostPool::release_thread_cache(ThreadCache* cache) noexcept {
  flush(cache);  // called by the exiting owner, so its lists and heap are still its own
  if (!global_pool_) {
    std::lock_guard heap(cache->heap_lock);
    for (unsigned k = 0; k < size_class_count; ++k) {
      cache->own[k].detach_empty([&](SlabHeader* slab) { retire(slab); });
    }
  }
  std::lock_guard lock(caches_mutex_);
  cache->attached = false;
  cache->next_released = released_caches_;
  released_caches_ = cache;
}

std::size_t HostPool::compact() {
  // Whatever goes back to the node during the call counts, including slabs the flush below empties
  // beyond what the empty-slab cache keeps.
  const std::uint64_t released_before = budget_.released_total();
  if (ThreadCache* cache = attached_cache(*this)) flush(cache);
  trim_epoch_.fetch_add(1, std::memory_order_relaxed);  // other threads flush at their next slow path

  for (unsigned k = 0; k < size_class_count; ++k) {
    SlabHeader* emptied = nullptr;
    {
      std::lock_guard lock(central_[k].lock);
      central_[k].slabs.detach_empty([&](SlabHeader* slab) {
        slab->next = emptied;  // free to use: the slab is out of every SlabSet
        emptied = slab;
      });
    }
    while (emptied != nullptr) {
      SlabHeader* next = emptied->next;
      slab_counts_[k].fetch_sub(1, std::memory_order_relaxed);
      free_slab(emptied);
      emptied = next;
    }
  }
  if (!global_pool_) {
    // Every heap gives back its empty slabs, and first takes in the chunks other threads freed to it:
    // an idle thread, which never runs short, would keep the slabs they emptied for ever (and a
    // limited pool then refused a buffer with nothing in use). Heaps of exited threads are flushed
    // too: they have no owner to do it.
    std::lock_guard lock(caches_mutex_);
    for (ThreadCache* cache = released_caches_; cache != nullptr; cache = cache->next_released) flush(cache);
    for (const auto& cache : caches_) reclaim_heap(cache.get());
  }
  std::vector<SlabHeader*> spare;
  {
    std::lock_guard lock(slabs_mutex_);
    for (auto& bucket : empty_slabs_) {
      spare.insert(spare.end(), bucket.begin(), bucket.end());
      bucket.clear();
    }
    empty_slab_bytes_ = 0;
  }
  for (SlabHeader* slab : spare) free_slab(slab);
  large_.release_cached();
  // jemalloc and tcmalloc keep freed blocks in their own free lists: without this the bytes compact()
  // reports stayed resident (an audit saw 160 MB remain under tcmalloc).
  if (budget_.released_total() != released_before) node_->release_free_memory();
  return static_cast<std::size_t>(budget_.released_total() - released_before);
}

std::size_t HostPool::bytes_in_use() const {
  const MemoryPoolStats current = stats();
  return current.bytes_in_use;
}

void HostPool::throw_out_of_memory(std::size_t requested, std::size_t block_bytes) const {
  // A request near SIZE_MAX has no real block size (its rounding saturates): say what is true of it.
  const std::string block = block_bytes >= requested && block_bytes <= NodeBudget::max_block_bytes
                                ? fmt::format("a new block of {} bytes", block_bytes)
                                : std::string("more than any node can hold");
  throw Error(
      ErrorCode::out_of_memory,
      fmt::format("{}: out of memory: cannot allocate {} bytes ({}): the pool {}, {} bytes count against "
                  "it; {} bytes are in use and {} reserved from the node (with blocks' colour padding, "
                  "which does not count)",
                  node_->describe(), requested, block, describe_limit(budget_.limit()), budget_.charged(),
                  bytes_in_use(), budget_.reserved()));
}

MemoryPoolStats HostPool::stats() const {
  MemoryPoolStats result;
  result.node = node_->describe();
  result.limit_bytes = budget_.limit();
  result.bytes_reserved = budget_.reserved();
  result.bytes_charged = budget_.charged();
  std::uint64_t allocations[size_class_count] = {};
  std::uint64_t frees[size_class_count] = {};
  std::uint64_t small_from_central = 0;
  std::uint64_t small_from_node = direct_.from_node.load(std::memory_order_relaxed);
  for (unsigned k = 0; k < size_class_count; ++k) {
    allocations[k] = direct_.allocations[k].load(std::memory_order_relaxed);
    frees[k] = direct_.frees[k].load(std::memory_order_relaxed);
  }
  {
    std::lock_guard lock(caches_mutex_);
    for (const auto& cache : caches_) {
      for (unsigned k = 0; k < size_class_count; ++k) {
        allocations[k] += cache->lists[k].allocations.get();
        frees[k] += cache->lists[k].frees.get();
      }
      small_from_central += cache->from_central.get();
      small_from_node += cache->from_node.get();
    }
  }
  std::uint64_t direct_allocations = 0;
  for (unsigned k = 0; k < size_class_count; ++k)
    direct_allocations += direct_.allocations[k].load(std::memory_order_relaxed);
  small_from_central +=
      direct_allocations - std::min(direct_allocations, direct_.from_node.load(std::memory_order_relaxed));

  std::uint64_t small_allocations = 0;
  for (unsigned k = 0; k < size_class_count; ++k) {
    // Counters of different threads are read at slightly different times: never report below zero.
    const std::uint64_t in_use = allocations[k] > frees[k] ? allocations[k] - frees[k] : 0;
    result.size_classes.push_back(
        {class_size(k), allocations[k], in_use, slab_counts_[k].load(std::memory_order_relaxed)});
    result.bytes_in_use += in_use * class_size(k);
    small_allocations += allocations[k];
  }
  const LargeAllocations::Stats large = large_.stats();
  result.large_allocations = large.allocations;
  result.large_from_cache = large.from_cache;
  result.large_bytes_cached = large.bytes_cached;
  result.bytes_in_use += large.bytes_in_use;

  result.allocations = small_allocations + large.allocations;
  result.from_central = small_from_central + large.from_cache;
  result.from_node = small_from_node + (large.allocations - large.from_cache);
  const std::uint64_t served_elsewhere = small_from_central + small_from_node;
  result.from_thread_cache = small_allocations > served_elsewhere ? small_allocations - served_elsewhere : 0;
  {
    std::lock_guard lock(slabs_mutex_);
    result.empty_slab_bytes = empty_slab_bytes_;
  }
  const NodeAllocatorStats node_stats = node_->stats();
  result.numa_binding_failures = node_stats.binding_failures;
  result.huge_page_bytes = node_stats.huge_page_bytes;
  return result;
}

}  // namespace nerve::memory
