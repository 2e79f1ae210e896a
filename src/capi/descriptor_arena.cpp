#include "capi/descriptor_arena.hpp"

#include <algorithm>
#include <cstring>
#include <new>
#include <utility>

namespace nerve::capi {
namespace {

constexpr std::size_t alignment = alignof(std::max_align_t);
constexpr std::size_t default_first_block = 16;
constexpr std::size_t max_first_block = std::size_t{1} << 16;
constexpr std::size_t max_first_block_bytes = std::size_t{1} << 20;

std::size_t rounded_size(std::size_t descriptor_size) {
  return descriptor_size == 0 ? alignment : (descriptor_size + alignment - 1) / alignment * alignment;
}

}  // namespace

DescriptorArena::DescriptorArena(std::size_t capacity, std::size_t descriptor_size)
    : descriptor_size_(rounded_size(descriptor_size)),
      // The capacity is a hint: a huge one starts with a block bounded in count and in bytes (one
      // descriptor at least: large descriptors with a large hint once asked for terabytes) and
      // grows by doubling.
      next_block_descriptors_(std::max<std::size_t>(
          1, std::min(capacity != 0 ? std::min(capacity, max_first_block) : default_first_block,
                      max_first_block_bytes / descriptor_size_))) {}

void DescriptorArena::BlockDeleter::operator()(std::byte* block) const noexcept {
  ::operator delete (block, std::align_val_t{alignment});
}

void* DescriptorArena::allocate() {
  if (blocks_.empty() || used_in_block_ == last_block_size_) {
    const std::size_t count = next_block_descriptors_;
    if (count > static_cast<std::size_t>(-1) / descriptor_size_) throw std::bad_alloc();
    std::unique_ptr<std::byte[], BlockDeleter> block(
        static_cast<std::byte*>(::operator new (count* descriptor_size_, std::align_val_t{alignment})));
    blocks_.push_back(std::move(block));
    last_block_size_ = count;
    used_in_block_ = 0;
    next_block_descriptors_ = allocated_ + count;  // the next block doubles the arena
  }
  std::byte* descriptor = blocks_.back().get() + used_in_block_ * descriptor_size_;
  std::memset(descriptor, 0, descriptor_size_);
  ++used_in_block_;
  ++allocated_;
  return descriptor;
}

}  // namespace nerve::capi
