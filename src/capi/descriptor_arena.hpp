// descriptor_arena.hpp — memory for task descriptors (nerve_task_pool_alloc_desc).
//
// Descriptors are handed out from blocks that are never moved or freed before the arena is
// destroyed, so a descriptor's address stays valid for as long as a task may read it. The first block
// holds `capacity` descriptors; each further block doubles the arena, so growing past the capacity
// hint costs a logarithmic number of allocations.
//
// Thread safety: none; a pool's owner allocates descriptors from one thread at a time.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

namespace nerve::capi {

class DescriptorArena {
 public:
  // Descriptors are `descriptor_size` bytes rounded up to alignof(std::max_align_t).
  DescriptorArena(std::size_t capacity, std::size_t descriptor_size);

  // allocate() gives zeroed memory for one descriptor.
  void* allocate();
  std::size_t descriptor_size() const noexcept { return descriptor_size_; }
  std::size_t allocated() const noexcept { return allocated_; }

 private:
  struct BlockDeleter {
    void operator()(std::byte* block) const noexcept;
  };

  std::size_t descriptor_size_;
  std::size_t next_block_descriptors_;
  std::vector<std::unique_ptr<std::byte[], BlockDeleter>> blocks_;
  std::size_t used_in_block_ = 0;    // descriptors handed out from the last block
  std::size_t last_block_size_ = 0;  // descriptors the last block holds
  std::size_t allocated_ = 0;
};

}  // namespace nerve::capi
