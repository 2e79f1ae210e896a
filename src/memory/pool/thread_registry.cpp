#include "memory/pool/thread_registry.hpp"

#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "memory/pool/host_pool.hpp"

namespace nerve::memory {

constinit thread_local ThreadCacheSlot thread_cache_slots[thread_cache_slot_count]
    __attribute__((tls_model("initial-exec")));

namespace {

struct Directory {
  std::mutex mutex;
  std::unordered_map<std::uint64_t, HostPool*> live;
  std::uint64_t last_id = 0;
};

Directory& directory() {
  static Directory* instance = new Directory;  // leaked on purpose: threads may exit after static destruction
  return *instance;
}

thread_local bool thread_exiting __attribute__((tls_model("initial-exec"))) = false;

struct Attachment {
  std::uint64_t pool_id;
  ThreadCache* cache;
};

// ThreadAttachments is the calling thread's list of caches; its destructor runs at thread exit.
struct ThreadAttachments {
  std::vector<Attachment> list;

  ~ThreadAttachments() {
    thread_exiting = true;
    for (ThreadCacheSlot& slot : thread_cache_slots) slot = {};
    Directory& dir = directory();
    std::lock_guard lock(dir.mutex);
    for (const Attachment& attachment : list) {
      if (const auto pool = dir.live.find(attachment.pool_id); pool != dir.live.end()) {
        pool->second->release_thread_cache(attachment.cache);
      }
    }
  }

  // prune() forgets pools that no longer exist, so a long-lived thread that uses many short-lived
  // pools keeps a short list.
  void prune() {
    Directory& dir = directory();
    std::lock_guard lock(dir.mutex);
    std::erase_if(list, [&](const Attachment& a) { return !dir.live.contains(a.pool_id); });
  }
};

thread_local ThreadAttachments attachments;

void remember_in_slot(std::uint64_t pool_id, ThreadCache* cache) noexcept {
  thread_cache_slots[pool_id % thread_cache_slot_count] = {pool_id, cache};
}

}  // namespace

std::uint64_t register_pool(HostPool& pool) {
  Directory& dir = directory();
  std::lock_guard lock(dir.mutex);
  const std::uint64_t id = ++dir.last_id;
  dir.live.emplace(id, &pool);
  return id;
}

void unregister_pool(std::uint64_t pool_id) noexcept {
  Directory& dir = directory();
  std::lock_guard lock(dir.mutex);
  dir.live.erase(pool_id);
}

ThreadCache* attached_cache(const HostPool& pool) noexcept {
  if (thread_exiting) return nullptr;
  if (ThreadCache* cache = find_thread_cache(pool.id())) return cache;
  for (const Attachment& attachment : attachments.list) {
    if (attachment.pool_id == pool.id()) return attachment.cache;
  }
  return nullptr;
}

ThreadCache* attach_current_thread(HostPool& pool) noexcept {
  if (thread_exiting) return nullptr;
  const std::uint64_t id = pool.id();
  // An entry for `id` is valid: the pool is alive (we are in one of its calls) and ids are unique.
  for (const Attachment& attachment : attachments.list) {
    if (attachment.pool_id == id) {
      remember_in_slot(id, attachment.cache);
      return attachment.cache;
    }
  }
  try {
    if (attachments.list.size() >= 8) attachments.prune();
    attachments.list.reserve(attachments.list.size() + 1);
    ThreadCache* cache = pool.acquire_thread_cache();
    attachments.list.push_back({id, cache});
    remember_in_slot(id, cache);
    return cache;
  } catch (...) {
    return nullptr;  // no memory for a cache: the pool serves this call through its central lists
  }
}

}  // namespace nerve::memory
