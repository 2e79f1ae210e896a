// thread_registry.hpp — which ThreadCache the calling thread uses in which pool, safely across pool
// destruction and thread exit.
//
// Every HostPool gets a 64-bit id that is never reused (as ContextImpl's context ids). Each thread
// keeps a small direct-mapped table id → cache in initial-exec TLS (`thread_cache_slots`: one compare
// on the hot path, no __tls_get_addr call from the shared library), backed by a per-thread list of
// every pool it is attached to. (constinit: the table needs no dynamic initialisation, so accesses
// from other files do not go through a TLS wrapper call.) A slot left over from a destroyed pool holds an id
// no live pool has, so it never matches and its cache pointer is never dereferenced.
//
// Thread exit: the list's destructor hands each cache back to its pool if the pool is still alive,
// which it learns from the process-wide directory of live pools, under the directory's mutex; a pool
// leaves the directory (under the same mutex) before it is destroyed, so the two never overlap. After
// that destructor the thread has no cache: attach_current_thread() returns null and the pool serves
// the thread through its central free lists (for instance from another thread-local destructor).
//
// Lock order: the directory mutex, then a pool's locks. A pool never takes the directory mutex while
// it holds one of its own.
#pragma once

#include <cstdint>

namespace nerve::memory {

class HostPool;
struct ThreadCache;

struct ThreadCacheSlot {
  std::uint64_t pool_id = 0;  // 0: empty (pool ids start at 1)
  ThreadCache* cache = nullptr;
};
inline constexpr unsigned thread_cache_slot_count = 4;
extern constinit thread_local ThreadCacheSlot thread_cache_slots[thread_cache_slot_count]
    __attribute__((tls_model("initial-exec")));

// find_thread_cache() is the calling thread's cache in pool `pool_id` if it is in the fast table.
inline ThreadCache* find_thread_cache(std::uint64_t pool_id) noexcept {
  const ThreadCacheSlot& slot = thread_cache_slots[pool_id % thread_cache_slot_count];
  return slot.pool_id == pool_id ? slot.cache : nullptr;
}

// register_pool() enters `pool` in the directory and gives its new id.
std::uint64_t register_pool(HostPool& pool);
// unregister_pool() removes the pool; afterwards no exiting thread calls into it.
void unregister_pool(std::uint64_t pool_id) noexcept;

// attach_current_thread() gives the calling thread's cache in `pool`, making or adopting one on first
// use; null when the thread is exiting or no cache can be made (out of memory).
ThreadCache* attach_current_thread(HostPool& pool) noexcept;
// attached_cache() gives the calling thread's cache in `pool`, or null if it has none; never makes one.
ThreadCache* attached_cache(const HostPool& pool) noexcept;

}  // namespace nerve::memory
