#include "memory/pool/host_node_allocator.hpp"

#include <cerrno>
#include <cstring>
#include <string>

#include <sys/mman.h>
#include <unistd.h>

#include <fmt/format.h>

#include "nerve/error.hpp"

#include "config/diagnostics.hpp"
#include "memory/pool/huge_pages.hpp"
#include "util/log.hpp"

namespace nerve::memory {
namespace {

// library_for(): the chosen jemalloc/tcmalloc; one that does not load is a ConfigError naming where
// memory.allocator was set (file and line, variable or API).
const MallocLibrary* library_for(const Config& config) {
  const MemoryAllocator kind = config.memory.allocator;
  if (kind == MemoryAllocator::system) return nullptr;
  try {
    return &malloc_library(kind);
  } catch (const ConfigError& error) {
    config::rethrow_with_origin(config, error);
  }
}

// binder_for(): the NUMA binding of memory.numa_policy; a preferred node the machine lacks is a
// ConfigError naming where the policy was set.
NumaBinder binder_for(const Config& config, const Topology& topology, int numa_node, bool migrate) {
  try {
    return NumaBinder(topology, config.memory.numa_policy, numa_node, migrate);
  } catch (const ConfigError& error) {
    config::rethrow_with_origin(config, error);
  }
}

// map_aligned() maps `bytes` aligned to `alignment` by mapping alignment - page more and unmapping
// the misaligned head and the tail.
void* map_aligned(std::size_t bytes, std::size_t alignment) {
  const std::size_t page = page_size();
  const std::size_t extra = alignment > page ? alignment - page : 0;
  void* mapped = mmap(nullptr, bytes + extra, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED) return nullptr;
  const auto start = reinterpret_cast<std::uintptr_t>(mapped);
  const std::uintptr_t aligned = extra == 0 ? start : (start + alignment - 1) & ~(alignment - 1);
  if (aligned > start) munmap(mapped, aligned - start);
  const std::uintptr_t end = start + bytes + extra;
  if (end > aligned + bytes) munmap(reinterpret_cast<void*>(aligned + bytes), end - (aligned + bytes));
  return reinterpret_cast<void*>(aligned);
}

}  // namespace

std::size_t page_size() noexcept {
  static const std::size_t size = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  return size;
}

HostNodeAllocator::HostNodeAllocator(const Config& config, const Topology& topology, int numa_node)
    : kind_(config.memory.allocator),
      library_(library_for(config)),
      numa_node_(numa_node),
      binder_(binder_for(config, topology, numa_node, kind_ != MemoryAllocator::system)) {
  // jemalloc and tcmalloc reuse a freed block's pages for their own small objects and trim them with
  // MADV_DONTNEED: advice given to their memory would outlive the block. Their own settings decide.
  if (config.memory.huge_pages && library_ == nullptr) huge_page_min_block_ = huge_page_min_block();
  const std::string huge =
      !config.memory.huge_pages ? "huge pages off"
      : library_ != nullptr     ? "huge pages as the library decides"
      : huge_page_min_block_ == 0
          ? "no transparent huge pages on this kernel"
          : fmt::format("huge pages for blocks of {} MiB and more", huge_page_min_block_ >> 20);
  description_ = fmt::format("host memory of NUMA node {} ({} allocator{}, numa_policy {}, {})", numa_node,
                             allocator_name(kind_), library_ != nullptr ? " " + library_->file : "",
                             binder_.describe(), huge);
}

HostNodeAllocator::~HostNodeAllocator() {
  std::lock_guard lock(mutex_);
  if (!blocks_.empty()) {
    log::warn("{}: {} block(s) ({} bytes) still allocated when the allocator was destroyed; freeing them",
              description_, blocks_.size(), bytes_);
    for (const auto& [start, block] : blocks_) free_to_source(reinterpret_cast<void*>(start), block.bytes);
  }
}

std::string HostNodeAllocator::describe() const { return description_; }

void* HostNodeAllocator::allocate_from_source(std::size_t bytes, std::size_t alignment) {
  if (library_ == nullptr) return map_aligned(bytes, alignment);
  return library_->aligned_alloc(alignment, bytes);
}

void HostNodeAllocator::free_to_source(void* block, std::size_t bytes) noexcept {
  if (library_ == nullptr) {
    munmap(block, bytes);
  } else {
    library_->free(block);
  }
}

void* HostNodeAllocator::allocate_block(std::size_t bytes, std::size_t alignment) {
  const std::size_t page = page_size();
  alignment = alignment < page ? page : alignment;
  if (bytes == 0 || bytes % page != 0 || (alignment & (alignment - 1)) != 0) {
    throw Error(
        ErrorCode::invalid_argument,
        fmt::format("{}: block of {} bytes aligned to {}: the size must be a non-zero multiple of the "
                    "page size and the alignment a power of two",
                    description_, bytes, alignment));
  }
  const bool huge = huge_page_min_block_ != 0 && bytes >= huge_page_min_block_;
  void* block = allocate_from_source(bytes, alignment);
  if (block == nullptr) {
    throw Error(ErrorCode::out_of_memory,
                fmt::format("{}: the {} allocator cannot provide {} bytes: {}", description_,
                            allocator_name(kind_), bytes, std::strerror(errno)));
  }
  // Before first touch, so that the first faults already map huge pages.
  const bool advised = huge && advise_huge_pages(block, bytes);
  const BlockPlacement placement = binder_.apply(block, bytes);
  try {
    std::lock_guard lock(mutex_);
    blocks_.emplace(reinterpret_cast<std::uintptr_t>(block), Block{bytes, placement, advised});
    bytes_ += bytes;
    if (advised) huge_page_bytes_ += bytes;
  } catch (...) {
    free_to_source(block, bytes);
    throw;
  }
  return block;
}

void HostNodeAllocator::free_block(void* block, std::size_t bytes) noexcept {
  {
    std::lock_guard lock(mutex_);
    const auto it = blocks_.find(reinterpret_cast<std::uintptr_t>(block));
    if (it == blocks_.end() || it->second.bytes != bytes) {
      log::error("{}: free_block({}, {}) does not match a live block; ignored", description_, block, bytes);
      return;
    }
    bytes_ -= bytes;
    if (it->second.huge_pages) huge_page_bytes_ -= bytes;
    blocks_.erase(it);
  }
  free_to_source(block, bytes);
}

BlockPlacement HostNodeAllocator::placement_of(const void* address) const {
  const auto where = reinterpret_cast<std::uintptr_t>(address);
  std::lock_guard lock(mutex_);
  auto it = blocks_.upper_bound(where);
  if (it == blocks_.begin()) return {};
  --it;
  if (where >= it->first + it->second.bytes) return {};
  return it->second.placement;
}

NodeAllocatorStats HostNodeAllocator::stats() const {
  std::lock_guard lock(mutex_);
  NodeAllocatorStats result;
  result.blocks = blocks_.size();
  result.bytes = bytes_;
  result.binding_failures = binder_.failures();
  result.huge_page_bytes = huge_page_bytes_;
  return result;
}

}  // namespace nerve::memory
