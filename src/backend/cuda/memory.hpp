// memory.hpp — a CUDA device's memory node: replicas in device (or managed) memory, asynchronous copies.
//
// Replica storage comes from a NodePool over the device (device_pools.hpp): DeviceArena over big
// cudaMalloc chunks by default, or the stream-ordered pool; with gpu.unified_memory, an arena over
// managed blocks (allocators.hpp: never more than the device has free). host_addressable() is false
// either way: the runtime moves data explicitly, and managed pages are only given hints and prefetches.
//
// Copies (start_copy) are cudaMemcpyAsync calls on the device's copy stream of their direction
// (stream_set.hpp), each armed and watched by the engine (engine.hpp), whose completion thread calls
// CopyCompletion::copy_done.
//
//   host <-> device    a buffer's host copy of 1 MiB or more (gpu.pin_host_buffers): page-locked on its
//                      first transfer (memory/host_pinning.hpp, cudaHostRegister) and DMA'd in place,
//                      then and ever after. Other host memory:
//   host -> device     the bytes are copied into pinned staging memory (the memory layer's StagingPool
//                      over cudaHostAlloc, up to staging_copy_bytes per copy), then DMA'd from there;
//                      larger copies, or when the pool is exhausted, go straight from pageable memory
//   device -> host     into pinned staging, then copied out on the completion thread (same limits)
//   device -> device   gpu.peer_access and the driver says the pair can access each other:
//                      cudaMemcpyPeerAsync, direct (peer access enabled from the destination to the
//                      source on first use; where the driver refuses, staged); otherwise staged through
//                      pinned host memory in pieces of up to staging_copy_bytes, two staging buffers
//                      taking turns: each piece a copy out of the source on the source's stream, an
//                      event, the destination's stream waiting for it, a copy in, and an event after
//                      which the source's stream reuses the buffer — no host thread waits. When the
//                      staging pool is exhausted, the copy goes through ordinary host memory
//                      synchronously instead of failing
//   other nodes        bounced through host memory synchronously (host_bounce.hpp)
//
// copy_sync() uses the engine's own sync stream and waits for it (eviction write-backs call it with a
// buffer's lock held, which must not depend on the completion thread).
//
// Thread safety: every member may be called from any thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>

#include "backend/cuda/device_pools.hpp"
#include "backend/cuda/engine.hpp"
#include "memory/host_pinning.hpp"
#include "memory/memory_node.hpp"
#include "memory/pool/pool.hpp"
#include "memory/pool/staging_pool.hpp"

namespace nerve::detail::cuda {

inline constexpr std::size_t staging_copy_bytes = std::size_t{64} << 20;
inline constexpr std::size_t staging_limit_bytes = std::size_t{256} << 20;

struct CudaMemoryOptions {
  bool peer_access = true;      // gpu.peer_access
  bool unified_memory = false;  // gpu.unified_memory
  PoolKind pool = PoolKind::arena;
  std::size_t limit_bytes = 0;   // the node's capacity
  bool pin_host_buffers = true;  // gpu.pin_host_buffers
  // Pinned staging: the most one copy (or one piece of a staged device-to-device copy) takes from the
  // pool, and the pool's cap (tests make them small).
  std::size_t staging_piece_bytes = staging_copy_bytes;
  std::size_t staging_limit_bytes = cuda::staging_limit_bytes;
};

class CudaMemoryNode final : public MemoryNode, private DmaRegistrar {
 public:
  CudaMemoryNode(unsigned index, std::string name, std::shared_ptr<Engine> engine, CudaMemoryOptions options);
  ~CudaMemoryNode() override;

  void drain() noexcept override;
  std::uint64_t wait_idle() noexcept override;
  void copy_sync(MemoryNode& from, const std::byte* source, MemoryNode& to, std::byte* destination,
                 std::size_t bytes) override;

  Engine& engine() noexcept { return *engine_; }
  const std::shared_ptr<Engine>& shared_engine() const noexcept { return engine_; }
  bool unified_memory() const noexcept { return options_.unified_memory; }
  memory::NodePool& pool() noexcept { return *pool_; }
  std::size_t compact() override { return pool_->compact() + staging_.compact(); }
  std::size_t staging_bytes_reserved() const override { return staging_.stats().bytes_reserved; }
  memory::StagingPool& staging() noexcept { return staging_; }
  // direct_peer(): copies from `other` go device to device (gpu.peer_access and the driver agree);
  // peer access is enabled in one direction, from this device (the destination) to `other`, by the
  // first copy that needs it.
  bool direct_peer(const CudaMemoryNode& other) const noexcept;

 protected:
  std::byte* allocate_storage(std::size_t bytes) override;
  void free_storage(std::byte* data, std::size_t bytes) noexcept override;
  void start_copy(MemoryNode& from, const std::byte* source, MemoryNode& to, std::byte* destination,
                  std::size_t bytes, CopyCompletion& completion) override;

 private:
  void start(Operation* op) noexcept;  // once the gate let the copy through
  void enqueue(Operation& op);
  static bool finish_copy(Engine& engine, Operation& op);
  bool take_staging(Operation& op);
  bool try_staging(memory::StagingBuffer& into, std::size_t bytes);  // false: the pool is exhausted
  void enqueue_staged_peer(Operation& op, Stream stream);
  void settle(Operation& op) noexcept;  // wait for the work a failed copy enqueued on its streams
  // pinned_host(): whether the host side of a copy with `host` is page-locked (registering it first).
  bool pinned_host(MemoryNode& host, const std::byte* data, std::size_t bytes);

  // DmaRegistrar: this node's driver page-locks large host buffers for every CUDA device.
  const void* dma_domain() const noexcept override { return &engine_->driver(); }
  bool register_host(void* data, std::size_t bytes) noexcept override;
  void unregister_host(void* data) noexcept override;

  std::shared_ptr<Engine> engine_;
  const CudaMemoryOptions options_;
  std::unique_ptr<memory::NodePool> pool_;
  memory::StagingPool staging_;
  std::atomic<HostPinning*> pinning_{nullptr};  // the host's registry, once this node used it
};

}  // namespace nerve::detail::cuda
