#include "memory/pool/pool.hpp"

#include <fmt/format.h>

#include "memory/pool/host_pool.hpp"
#include "memory/pool/out_of_band_pool.hpp"
#include "memory/pool/size_classes.hpp"

namespace nerve::memory {

PoolOptions PoolOptions::from_config(const Config& config, std::size_t limit_bytes) {
  PoolOptions options;
  options.limit_bytes = limit_bytes;
  // A capped pool keeps no per-thread caches: chunks cached by a thread that is not allocating (an
  // idle worker) would pin their slabs, and the limit could refuse a buffer with nothing in use.
  options.thread_cache_bytes = limit_bytes != 0 ? 0 : config.memory.per_thread_pool_size;
  options.global_pool = config.memory.global_pool;
  return options;
}

std::size_t NodePool::aligned_request_unchecked(std::size_t bytes, std::size_t alignment) noexcept {
  if (alignment <= chunk_alignment || bytes > max_small_size) return bytes;  // large blocks are page aligned
  if (alignment > 64) return max_small_size + 1;                             // a (page-aligned) large block
  unsigned size_class = size_class_of(bytes);
  while (class_size(size_class) % 64 != 0) ++size_class;  // the last class, 64 KiB, is a multiple
  return class_size(size_class);
}

std::size_t NodePool::aligned_request(std::size_t bytes, std::size_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment > page_size()) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("memory pool: alignment {} is not a power of two up to the page size ({})",
                            alignment, page_size()));
  }
  return aligned_request_unchecked(bytes, alignment);
}

std::unique_ptr<NodePool> make_node_pool(std::unique_ptr<NodeAllocator> node, const PoolOptions& options) {
  if (node->host_addressable()) return std::make_unique<HostPool>(std::move(node), options);
  return std::make_unique<OutOfBandPool>(std::move(node), options);
}

}  // namespace nerve::memory
