#include "util/slot_arena.hpp"

#include <algorithm>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define NERVE_SLOT_ARENA_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define NERVE_SLOT_ARENA_ASAN 1
#endif
#if NERVE_SLOT_ARENA_ASAN
#include <sanitizer/asan_interface.h>
#endif

namespace nerve {
namespace {

void poison(void* slot, std::size_t bytes) noexcept {
#if NERVE_SLOT_ARENA_ASAN
  ASAN_POISON_MEMORY_REGION(slot, bytes);
#else
  (void)slot;
  (void)bytes;
#endif
}

void unpoison(void* slot, std::size_t bytes) noexcept {
#if NERVE_SLOT_ARENA_ASAN
  ASAN_UNPOISON_MEMORY_REGION(slot, bytes);
#else
  (void)slot;
  (void)bytes;
#endif
}

}  // namespace

namespace {

// A free slot holds the link to the next one: at least a pointer, aligned as one, in whole
// alignment units so that every slot of a slab keeps the alignment.
std::size_t slot_alignment(std::size_t alignment) noexcept { return std::max(alignment, alignof(void*)); }
std::size_t slot_size(std::size_t bytes, std::size_t alignment) noexcept {
  const std::size_t unit = slot_alignment(alignment);
  return (std::max(bytes, sizeof(void*)) + unit - 1) / unit * unit;
}

}  // namespace

SlotArena::SlotArena(std::size_t slot_bytes, std::size_t alignment)
    : slot_bytes_(slot_size(slot_bytes, alignment)),
      alignment_(static_cast<std::align_val_t>(slot_alignment(alignment))) {}

SlotArena::~SlotArena() {
  // Poisoned slots must be addressable again before the slabs go back to the allocator.
  std::size_t slots = first_slab_slots;
  for (const auto& slab : slabs_) {
    unpoison(slab.get(), slots * slot_bytes_);
    slots = std::min(slots * 2, max_slab_slots);
  }
}

void* SlotArena::allocate() {
  std::lock_guard lock(mutex_);
  if (free_ != nullptr) {
    FreeSlot* slot = free_;
    unpoison(slot, slot_bytes_);
    free_ = slot->next;
    ++in_use_;
    return slot;
  }
  if (next_ == end_) {
    const std::size_t bytes = next_slab_slots_ * slot_bytes_;
    slabs_.reserve(slabs_.size() + 1);  // the push below cannot throw once the slab is made
    std::unique_ptr<std::byte[], SlabDeleter> slab(new (alignment_) std::byte[bytes],
                                                   SlabDeleter{alignment_});
    next_ = slab.get();
    end_ = next_ + bytes;
    poison(next_, bytes);
    slabs_.push_back(std::move(slab));
    next_slab_slots_ = std::min(next_slab_slots_ * 2, max_slab_slots);
  }
  void* slot = next_;
  next_ += slot_bytes_;
  unpoison(slot, slot_bytes_);
  ++in_use_;
  return slot;
}

void SlotArena::deallocate(void* slot) noexcept {
  if (slot == nullptr) return;
  std::lock_guard lock(mutex_);
  auto* free_slot = static_cast<FreeSlot*>(slot);
  free_slot->next = free_;
  free_ = free_slot;
  poison(free_slot, slot_bytes_);
  --in_use_;
}

std::size_t SlotArena::slots_in_use() const {
  std::lock_guard lock(mutex_);
  return in_use_;
}

}  // namespace nerve
