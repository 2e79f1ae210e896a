#include "memory/pool/pool.hpp"

#include "memory/pool/host_pool.hpp"
#include "memory/pool/out_of_band_pool.hpp"

namespace nerve::memory {

PoolOptions PoolOptions::from_config(const Config& config, std::size_t limit_bytes) {
  PoolOptions options;
  options.limit_bytes = limit_bytes;
  options.thread_cache_bytes = config.memory.per_thread_pool_size;
  options.global_pool = config.memory.global_pool;
  return options;
}

std::unique_ptr<NodePool> make_node_pool(std::unique_ptr<NodeAllocator> node, const PoolOptions& options) {
  if (node->host_addressable()) return std::make_unique<HostPool>(std::move(node), options);
  return std::make_unique<OutOfBandPool>(std::move(node), options);
}

}  // namespace nerve::memory
