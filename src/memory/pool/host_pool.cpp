#include "memory/pool/host_pool.hpp"

#include <algorithm>
#include <bit>
#include <new>
#include <utility>

#include <fmt/format.h>

#include "nerve/error.hpp"

#include "util/log.hpp"

namespace nerve::memory {
namespace {

std::size_t empty_bucket(std::size_t slab_size) noexcept {
  return static_cast<std::size_t>(std::countr_zero(slab_size / min_slab_bytes));
}

// refill_count() is how many chunks a miss fetches: the one asked for plus a batch for the cache,
// about 32 KiB worth (at most 63), never more than half the budget.
std::uint32_t refill_count(std::size_t chunk_bytes, std::size_t budget) noexcept {
  if (chunk_bytes > budget) return 1;
  const std::size_t batch = std::min<std::size_t>(
      {63, std::max<std::size_t>(1, std::size_t{32} * 1024 / chunk_bytes), budget / (2 * chunk_bytes)});
  return static_cast<std::uint32_t>(1 + batch);
}

// Emptied slabs are collected through their `next` link, free once a slab is out of every SlabSet.
void push_emptied(SlabHeader*& emptied, SlabHeader* slab) noexcept {
  slab->next = emptied;
  emptied = slab;
}

}  // namespace

HostPool::HostPool(std::unique_ptr<NodeAllocator> node, const PoolOptions& options)
    : node_(std::move(node)),
      options_(options),
      global_pool_(options.global_pool),
      budget_(*node_, options.limit_bytes),
      large_(budget_, page_size(), options.large_cache_bytes, options.large_cache_blocks) {
  if (!node_->host_addressable()) {
    throw Error(ErrorCode::internal, fmt::format("HostPool needs host-addressable memory; {} is not (use "
                                                 "make_node_pool())",
                                                 node_->describe()));
  }
  for (Central& central : central_) central.slabs.count_spares_in(&spare_slab_bytes_);
  // Room for every slab the empty-slab cache may hold, so that retiring a slab never allocates.
  for (std::size_t bucket = 0; bucket < std::size(empty_slabs_); ++bucket) {
    empty_slabs_[bucket].reserve(options_.retained_empty_slab_bytes / (min_slab_bytes << bucket) + 1);
  }
  id_ = register_pool(*this);  // last: from here on exiting threads may call release_thread_cache()
}

HostPool::~HostPool() {
  unregister_pool(id_);
  if (ThreadCacheSlot& slot = thread_cache_slots[id_ % thread_cache_slot_count]; slot.pool_id == id_)
    slot = {};
  if (const std::size_t in_use = bytes_in_use(); in_use != 0) {
    log::warn("{}: memory pool destroyed with {} bytes still allocated; they are freed now",
              node_->describe(), in_use);
  }
  std::lock_guard lock(slabs_mutex_);
  for (SlabHeader* slab = all_slabs_; slab != nullptr;) {
    SlabHeader* next = slab->all_next;
    budget_.release(slab, slab->bytes);
    slab = next;
  }
  all_slabs_ = nullptr;
}

// ---- allocation ------------------------------------------------------------------------------

void* HostPool::allocate_small_slow(ThreadCache* cache, unsigned size_class) {
  if (cache == nullptr) {
    cache = attach_current_thread(*this);
    if (cache == nullptr) {  // an exiting thread: one chunk from the central list
      FreeChunk* list = nullptr;
      bool fresh = false;
      take_chunks(nullptr, size_class, 1, &list, &fresh);
      direct_.allocations[size_class].fetch_add(1, std::memory_order_relaxed);
      if (fresh) direct_.from_node.fetch_add(1, std::memory_order_relaxed);
      return list;
    }
    ThreadCache::ClassList& list = cache->lists[size_class];
    if (FreeChunk* chunk = list.head) {  // attached before, but no longer in the fast table
      list.head = chunk->next;
      cache->cached_bytes -= class_size(size_class);
      list.allocations.add();
      return chunk;
    }
  }
  if (const std::uint64_t epoch = trim_epoch_.load(std::memory_order_relaxed);
      cache->seen_trim_epoch != epoch) {
    cache->seen_trim_epoch = epoch;  // compact() asked every thread to hand its cache back
    flush(cache);
  }

  const std::size_t chunk_bytes = class_size(size_class);
  FreeChunk* list = nullptr;
  bool fresh = false;
  take_chunks(cache, size_class, refill_count(chunk_bytes, cache->budget), &list, &fresh);
  FreeChunk* result = list;
  list = list->next;
  ThreadCache::ClassList& cached = cache->lists[size_class];
  while (list != nullptr && cache->cached_bytes + chunk_bytes <= cache->budget) {
    FreeChunk* next = list->next;
    list->next = cached.head;
    cached.head = list;
    cache->cached_bytes += chunk_bytes;
    list = next;
  }
  if (list != nullptr) give_back(cache, size_class, list);  // remote frees beyond the budget
  cached.allocations.add();
  (fresh ? cache->from_node : cache->from_central).add();
  return result;
}

std::uint32_t HostPool::take_chunks(ThreadCache* cache, unsigned size_class, std::uint32_t want,
                                    FreeChunk** list, bool* made_slab) {
  if (cache != nullptr && !global_pool_) {
    // A heap: its chunks that other threads freed, then its own slabs, then a new slab of its own.
    {
      std::lock_guard heap(cache->heap_lock);
      if (FreeChunk* remote = cache->take_remote(size_class)) {
        std::uint32_t got = 1;
        FreeChunk* last = remote;
        for (; last->next != nullptr; last = last->next) ++got;
        last->next = *list;
        *list = remote;
        return got;
      }
      if (const std::uint32_t got = cache->own[size_class].take(want, list); got != 0) return got;
    }
    SlabHeader* slab = new_slab(size_class, cache);  // may compact() first: not under heap_lock
    std::lock_guard heap(cache->heap_lock);
    cache->own[size_class].add(slab);
    *made_slab = true;
    return cache->own[size_class].take(want, list);
  }
  Central& central = central_[size_class];
  {
    std::lock_guard lock(central.lock);
    if (const std::uint32_t got = central.slabs.take(want, list); got != 0) return got;
  }
  SlabHeader* slab = new_slab(size_class, nullptr);  // no lock held while the node is called
  std::lock_guard lock(central.lock);
  central.slabs.add(slab);
  *made_slab = true;
  return central.slabs.take(want, list);
}

void* HostPool::allocate_large(std::size_t bytes) {
  bool from_cache = false;
  const auto attempt = [&](std::exception_ptr& refusal) {
    return large_.try_allocate(bytes, &from_cache, refusal);
  };
  // Compacting makes room, unless no room could ever be enough: a request past any node's size (or
  // past the pool's limit alone) would only have flushed every cache for nothing.
  const std::size_t rounded = LargeAllocations::rounded_size(bytes);
  const bool could_fit = rounded >= bytes && rounded <= NodeBudget::max_block_bytes &&
                         (budget_.limit() == 0 || rounded <= budget_.limit());
  void* block = nullptr;
  if (could_fit) {
    block = retry_after_compacting(attempt, [this] { compact(); });
  } else {
    std::exception_ptr refusal;
    block = attempt(refusal);
  }
  if (block == nullptr) throw_out_of_memory(bytes, LargeAllocations::rounded_size(bytes));
  return block;
}

// ---- deallocation ----------------------------------------------------------------------------

void HostPool::free_small_slow(ThreadCache* cache, void* pointer, unsigned size_class) noexcept {
  auto* chunk = static_cast<FreeChunk*>(pointer);
  if (cache == nullptr) {
    cache = attach_current_thread(*this);
    if (cache == nullptr) {  // an exiting thread
      direct_.frees[size_class].fetch_add(1, std::memory_order_relaxed);
      give_back_one(nullptr, size_class, chunk);
      return;
    }
  }
  ThreadCache::ClassList& list = cache->lists[size_class];
  list.frees.add();
  const std::size_t chunk_bytes = class_size(size_class);
  if (chunk_bytes <= cache->budget && (global_pool_ || slab_of(chunk, size_class)->owner == cache)) {
    chunk->next = list.head;
    list.head = chunk;
    cache->cached_bytes += chunk_bytes;
    if (cache->cached_bytes > cache->budget) trim(cache, size_class);
    return;
  }
  give_back_one(cache, size_class, chunk);
}

void HostPool::give_back(ThreadCache* cache, unsigned size_class, FreeChunk* list) noexcept {
  if (!global_pool_) {
    while (list != nullptr) {
      FreeChunk* next = list->next;
      give_back_one(cache, size_class, list);
      list = next;
    }
    return;
  }
  // Every slab is the central list's: one lock for the whole list.
  SlabHeader* emptied = nullptr;
  {
    Central& central = central_[size_class];
    std::lock_guard lock(central.lock);
    while (list != nullptr) {
      FreeChunk* next = list->next;
      if (SlabHeader* slab = central.slabs.put(list, slab_of(list, size_class))) push_emptied(emptied, slab);
      list = next;
    }
  }
  while (emptied != nullptr) {
    SlabHeader* next = emptied->next;
    retire(emptied);
    emptied = next;
  }
}

void HostPool::give_back_one(ThreadCache* cache, unsigned size_class, FreeChunk* chunk) noexcept {
  SlabHeader* slab = slab_of(chunk, size_class);
  SlabHeader* emptied = nullptr;
  if (slab->owner == nullptr) {
    Central& central = central_[size_class];
    std::lock_guard lock(central.lock);
    emptied = central.slabs.put(chunk, slab);
  } else if (slab->owner == cache) {
    std::lock_guard heap(cache->heap_lock);
    emptied = cache->own[size_class].put(chunk, slab);
  } else {
    slab->owner->push_remote(size_class, chunk);  // another thread's heap
  }
  if (emptied != nullptr) retire(emptied);
}

void HostPool::trim(ThreadCache* cache, unsigned size_class) noexcept {
  auto give_back_half = [&](unsigned k) {
    ThreadCache::ClassList& list = cache->lists[k];
    if (list.head == nullptr) return;
    std::size_t count = 0;
    for (const FreeChunk* chunk = list.head; chunk != nullptr; chunk = chunk->next) ++count;
    const std::size_t keep = count / 2;  // the most recently freed (warmest) half stays
    FreeChunk** cut = &list.head;
    for (std::size_t i = 0; i < keep; ++i) cut = &(*cut)->next;
    FreeChunk* rest = *cut;
    *cut = nullptr;
    cache->cached_bytes -= (count - keep) * class_size(k);
    give_back(cache, k, rest);
  };
  give_back_half(size_class);
  for (unsigned k = 0; k < size_class_count && cache->cached_bytes > cache->budget; ++k) give_back_half(k);
}

void HostPool::flush(ThreadCache* cache) noexcept {
  for (unsigned k = 0; k < size_class_count; ++k) {
    ThreadCache::ClassList& list = cache->lists[k];
    FreeChunk* chunks = list.head;
    list.head = nullptr;
    if (chunks != nullptr) give_back(cache, k, chunks);
    if (!global_pool_) {
      FreeChunk* remote = nullptr;
      {
        std::lock_guard heap(cache->heap_lock);
        remote = cache->take_remote(k);
      }
      if (remote != nullptr) give_back(cache, k, remote);
    }
  }
  cache->cached_bytes = 0;
}

// ---- slabs -----------------------------------------------------------------------------------

SlabHeader* HostPool::new_slab(unsigned size_class, ThreadCache* owner) {
  std::size_t bytes = slab_bytes(size_class);
  SlabHeader* slab = nullptr;
  {
    std::lock_guard lock(slabs_mutex_);
    if (auto& spare = empty_slabs_[empty_bucket(bytes)]; !spare.empty()) {
      slab = spare.back();
      spare.pop_back();
      empty_slab_bytes_ -= bytes;
    }
  }
  if (slab == nullptr) {
    void* block = reserve_slab(size_class, bytes);
    slab = ::new (block) SlabHeader;
    std::lock_guard lock(slabs_mutex_);
    slab->all_next = all_slabs_;
    if (all_slabs_ != nullptr) all_slabs_->all_prev = slab;
    all_slabs_ = slab;
  }
  slab->init(size_class, bytes, owner);
  slab_counts_[size_class].fetch_add(1, std::memory_order_relaxed);
  return slab;
}

void HostPool::retire(SlabHeader* slab) noexcept {
  slab_counts_[slab->size_class].fetch_sub(1, std::memory_order_relaxed);
  {
    std::lock_guard lock(slabs_mutex_);
    auto& spare = empty_slabs_[empty_bucket(slab->bytes)];
    if (empty_slab_bytes_ + slab->bytes <= options_.retained_empty_slab_bytes &&
        spare.size() < spare.capacity()) {
      spare.push_back(slab);  // within the reserved capacity: cannot throw
      empty_slab_bytes_ += slab->bytes;
      return;
    }
  }
  free_slab(slab);
}

std::size_t HostPool::free_slab(SlabHeader* slab) noexcept {
  const std::size_t bytes = slab->bytes;
  {
    std::lock_guard lock(slabs_mutex_);
    (slab->all_prev != nullptr ? slab->all_prev->all_next : all_slabs_) = slab->all_next;
    if (slab->all_next != nullptr) slab->all_next->all_prev = slab->all_prev;
  }
  budget_.release(slab, bytes);
  return bytes;
}

std::size_t HostPool::reclaim_heap(ThreadCache* cache) noexcept {
  SlabHeader* emptied = nullptr;
  {
    std::lock_guard heap(cache->heap_lock);
    for (unsigned k = 0; k < size_class_count; ++k) {
      // The chunks other threads freed go back to their slabs (this heap's: push_remote() goes to a
      // slab's owner) whether or not the owner ever allocates again.
      for (FreeChunk* chunk = cache->take_remote(k); chunk != nullptr;) {
        FreeChunk* next = chunk->next;
        if (SlabHeader* slab = cache->own[k].put(chunk, slab_of(chunk, k))) push_emptied(emptied, slab);
        chunk = next;
      }
      cache->own[k].detach_empty([&](SlabHeader* slab) { push_emptied(emptied, slab); });
    }
  }
  std::size_t released = 0;
  while (emptied != nullptr) {
    SlabHeader* next = emptied->next;
    slab_counts_[emptied->size_class].fetch_sub(1, std::memory_order_relaxed);
    released += free_slab(emptied);
    emptied = next;
  }
  return released;
}

bool HostPool::holds_free_memory() const {
  if (spare_slab_bytes_.load(std::memory_order_relaxed) != 0) return true;
  {
    std::lock_guard lock(slabs_mutex_);
    if (empty_slab_bytes_ != 0) return true;
  }
  return large_.stats().bytes_cached != 0;
}

// Under a limit the class's usual slab may not fit where a smaller one does (a 1 MiB limit and 2 MiB
// slabs): the slab halves down to the smallest holding one chunk, keeping the usual alignment so that
// slab_of() still finds it. A slab smaller than the limit allows costs room (each has a header, and a
// chunk of 64 KiB in a 128 KiB slab leaves most of it unused), so cached and empty memory goes back
// to the node before one is taken — with a 1 MiB limit, a freed 600 kB buffer left in the cache
// made the next 64 KiB buffers take 256 KiB slabs: 12 fitted where 15 do.
void* HostPool::reserve_slab(unsigned size_class, std::size_t& bytes) {
  const std::size_t usual = slab_bytes(size_class);
  const std::size_t smallest =
      budget_.limit() == 0
          ? usual
          : std::max(min_slab_bytes, std::bit_ceil(SlabHeader::header_bytes + class_size(size_class)));
  std::size_t within_limit = usual;  // what an empty pool would take
  while (budget_.limit() != 0 && within_limit > smallest && within_limit > budget_.limit()) within_limit /= 2;
  bool first = true;
  void* block = retry_after_compacting(
      [&](std::exception_ptr& refusal) -> void* {
        // Compacting flushes every thread's cache: before a smaller slab only when the pool holds
        // something to give back (near a limit, every new slab would compact otherwise).
        const std::size_t least =
            std::exchange(first, false) && holds_free_memory() ? within_limit : smallest;
        for (bytes = usual; bytes >= least; bytes /= 2) {
          if (void* slab = budget_.try_acquire(bytes, usual, bytes, refusal)) return slab;
        }
        return nullptr;
      },
      [this] { compact(); });
  if (block != nullptr) return block;
  bytes = usual;
  throw_out_of_memory(class_size(size_class), smallest);
}

}  // namespace nerve::memory
