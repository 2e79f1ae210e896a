#include "memory/pool/pinned_allocator.hpp"

#include <cerrno>
#include <cstring>

#include <sys/mman.h>
#include <sys/resource.h>

#include <fmt/format.h>

#include "nerve/error.hpp"

#include "util/log.hpp"

namespace nerve::memory {

PinnedHostAllocator::PinnedHostAllocator(int numa_node) : numa_node_(numa_node) {}

PinnedHostAllocator::~PinnedHostAllocator() {
  std::lock_guard lock(mutex_);
  for (const auto& [block, info] : blocks_) {
    if (info.second) munlock(block, info.first);
    munmap(block, info.first);
  }
}

std::string PinnedHostAllocator::describe() const {
  return fmt::format("page-locked host memory of NUMA node {}", numa_node_);
}

void* PinnedHostAllocator::allocate_block(std::size_t bytes, std::size_t /*alignment*/) {
  void* block = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (block == MAP_FAILED) {
    throw Error(ErrorCode::out_of_memory,
                fmt::format("{}: cannot map {} bytes: {}", describe(), bytes, std::strerror(errno)));
  }
  bool locked = false;
  int error = EPERM;
  if (!refuse_locking_.load(std::memory_order_relaxed)) {
    locked = mlock(block, bytes) == 0;  // also faults the pages in
    error = errno;
  }
  if (!locked && !warned_.test_and_set()) {
    rlimit limit{};
    getrlimit(RLIMIT_MEMLOCK, &limit);
    log::warn(
        "{}: mlock of {} bytes failed ({}; RLIMIT_MEMLOCK is {} bytes): staging buffers are not "
        "page-locked, so device transfers will be slower. Raise `ulimit -l` to lock them.",
        describe(), bytes, std::strerror(error),
        limit.rlim_cur == RLIM_INFINITY ? std::string("unlimited") : std::to_string(limit.rlim_cur));
  }
  try {
    std::lock_guard lock(mutex_);
    blocks_.emplace(block, std::make_pair(bytes, locked));
    bytes_ += bytes;
    if (locked) locked_bytes_ += bytes;
  } catch (...) {
    if (locked) munlock(block, bytes);
    munmap(block, bytes);
    throw;
  }
  return block;
}

void PinnedHostAllocator::free_block(void* block, std::size_t bytes) noexcept {
  bool locked = false;
  {
    std::lock_guard lock(mutex_);
    const auto it = blocks_.find(block);
    if (it == blocks_.end() || it->second.first != bytes) {
      log::error("{}: free_block({}, {}) does not match a live block; ignored", describe(), block, bytes);
      return;
    }
    locked = it->second.second;
    bytes_ -= bytes;
    if (locked) locked_bytes_ -= bytes;
    blocks_.erase(it);
  }
  if (locked) munlock(block, bytes);
  munmap(block, bytes);
}

NodeAllocatorStats PinnedHostAllocator::stats() const {
  std::lock_guard lock(mutex_);
  NodeAllocatorStats result;
  result.blocks = blocks_.size();
  result.bytes = bytes_;
  result.locked_bytes = locked_bytes_;
  return result;
}

}  // namespace nerve::memory
