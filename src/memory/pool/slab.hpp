// slab.hpp — a slab: one block from the node, carved into chunks of one size class.
//
// The header sits in the slab's first 128 bytes; slabs are aligned to their (power-of-two) size, so
// the slab of a chunk is its address with the low bits cleared (slab_of()). A slab's free chunks are
// an intrusive list threaded through them; chunks never handed out are carved lazily from a bump
// index, so a new slab touches only its header page — its other pages are first written by the
// threads that use them (first-touch NUMA placement) — and a slab is empty again when every carved
// chunk is back on its free list. Per-slab free lists (rather than one list per class) are what let a
// pool give whole slabs back to the node (compact()), as in Bonwick's slab allocator (USENIX '94)
// and mimalloc's pages.
//
// SlabSet is one size class's slabs that still have a free chunk, for one owner: the pool's central
// free list (under its lock, memory.global_pool: true) or one thread's own heap (memory.global_pool:
// false). It keeps at most one empty slab as a spare, so a class hovering around a slab boundary does
// not obtain and release a slab on every other call; further empty slabs are handed back to the
// caller to retire.
//
// Thread safety: a SlabHeader's size_class, capacity, bytes and owner are written when the slab is
// (re)initialised and read-only while any of its chunks is live, so any thread holding a live chunk
// may read them. Everything else, and every SlabSet, belongs to the owner (see above).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "memory/pool/size_classes.hpp"

namespace nerve::memory {

struct ThreadCache;

struct FreeChunk {
  FreeChunk* next;
};

struct alignas(64) SlabHeader {
  static constexpr std::size_t header_bytes = 128;

  unsigned size_class = 0;
  std::uint32_t capacity = 0;    // chunks
  std::size_t bytes = 0;         // the slab's size
  ThreadCache* owner = nullptr;  // the heap that owns it (global_pool: false), or null: the central list

  FreeChunk* free = nullptr;  // returned chunks
  std::uint32_t free_count = 0;
  std::uint32_t carved = 0;    // chunks handed out at least once
  SlabHeader* prev = nullptr;  // in the owner's SlabSet
  SlabHeader* next = nullptr;
  bool listed = false;

  SlabHeader* all_prev = nullptr;  // the pool's list of every slab (its slab mutex)
  SlabHeader* all_next = nullptr;

  // init() makes the slab an empty slab of `size_class_index` for `slab_owner`.
  void init(unsigned size_class_index, std::size_t slab_size, ThreadCache* slab_owner) noexcept {
    size_class = size_class_index;
    bytes = slab_size;
    capacity = static_cast<std::uint32_t>((slab_size - header_bytes) / class_size(size_class_index));
    owner = slab_owner;
    free = nullptr;
    free_count = 0;
    carved = 0;
    prev = next = nullptr;
    listed = false;
  }
  bool empty() const noexcept { return free_count == carved; }
  bool has_free() const noexcept { return free != nullptr || carved < capacity; }

  FreeChunk* pop() noexcept {
    if (FreeChunk* chunk = free) {
      free = chunk->next;
      --free_count;
      return chunk;
    }
    auto* area = reinterpret_cast<std::byte*>(this) + header_bytes;
    return reinterpret_cast<FreeChunk*>(area + static_cast<std::size_t>(carved++) * class_size(size_class));
  }
  void push(FreeChunk* chunk) noexcept {
    chunk->next = free;
    free = chunk;
    ++free_count;
  }
};
static_assert(sizeof(SlabHeader) <= SlabHeader::header_bytes);

inline SlabHeader* slab_of(const void* chunk, unsigned size_class) noexcept {
  return reinterpret_cast<SlabHeader*>(reinterpret_cast<std::uintptr_t>(chunk) &
                                       ~(slab_bytes(size_class) - 1));
}

class SlabSet {
 public:
  // count_spares_in() names the pool-wide count of the bytes of empty slabs kept in SlabSets (the
  // spares): memory compact() would give back, which the pool looks at before it takes a smaller
  // slab under its limit. Set once, before the set is used.
  void count_spares_in(std::atomic<std::size_t>* spare_bytes) noexcept { spare_bytes_ = spare_bytes; }

  // add() takes a new (empty) slab.
  void add(SlabHeader* slab) noexcept {
    link_back(slab);
    gain_spare(slab);
  }

  // take() pops up to `want` chunks (partly used slabs first) onto the list `*head`; returns how
  // many (0 when no slab has a free chunk).
  std::uint32_t take(std::uint32_t want, FreeChunk** head) noexcept {
    std::uint32_t got = 0;
    while (got < want && first_ != nullptr) {
      SlabHeader* slab = first_;
      if (slab->empty()) lose_spare(slab);
      while (got < want && slab->has_free()) {
        FreeChunk* chunk = slab->pop();
        chunk->next = *head;
        *head = chunk;
        ++got;
      }
      if (!slab->has_free()) unlink(slab);
    }
    return got;
  }

  // put() returns `chunk` to its slab `slab`. Returns the slab when that made it empty and the set
  // already has a spare: the caller retires it; else null.
  SlabHeader* put(FreeChunk* chunk, SlabHeader* slab) noexcept {
    slab->push(chunk);
    if (!slab->listed) link_front(slab);
    if (!slab->empty()) return nullptr;
    if (empty_slabs_ > 0) {
      unlink(slab);
      return slab;
    }
    gain_spare(slab);
    unlink(slab);  // the spare goes last: partly used slabs are filled first
    link_back(slab);
    return nullptr;
  }

  // detach_empty() removes every empty slab and calls retire(slab) for each.
  template <class Retire>
  void detach_empty(Retire&& retire) {
    for (SlabHeader* slab = first_; slab != nullptr;) {
      SlabHeader* next = slab->next;
      if (slab->empty()) {
        unlink(slab);
        lose_spare(slab);
        retire(slab);
      }
      slab = next;
    }
  }

 private:
  void gain_spare(const SlabHeader* slab) noexcept {
    ++empty_slabs_;
    if (spare_bytes_ != nullptr) spare_bytes_->fetch_add(slab->bytes, std::memory_order_relaxed);
  }
  void lose_spare(const SlabHeader* slab) noexcept {
    --empty_slabs_;
    if (spare_bytes_ != nullptr) spare_bytes_->fetch_sub(slab->bytes, std::memory_order_relaxed);
  }

  void link_front(SlabHeader* slab) noexcept {
    slab->prev = nullptr;
    slab->next = first_;
    (first_ != nullptr ? first_->prev : last_) = slab;
    first_ = slab;
    slab->listed = true;
  }
  void link_back(SlabHeader* slab) noexcept {
    slab->next = nullptr;
    slab->prev = last_;
    (last_ != nullptr ? last_->next : first_) = slab;
    last_ = slab;
    slab->listed = true;
  }
  void unlink(SlabHeader* slab) noexcept {
    (slab->prev != nullptr ? slab->prev->next : first_) = slab->next;
    (slab->next != nullptr ? slab->next->prev : last_) = slab->prev;
    slab->prev = slab->next = nullptr;
    slab->listed = false;
  }

  SlabHeader* first_ = nullptr;
  SlabHeader* last_ = nullptr;
  std::uint32_t empty_slabs_ = 0;
  std::atomic<std::size_t>* spare_bytes_ = nullptr;
};

}  // namespace nerve::memory
