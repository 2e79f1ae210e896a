// memory.hpp — an OpenCL device's memory node: replicas as cl_mem objects, asynchronous copies.
//
// Replica storage comes from a DeviceArena (memory/pool/device_arena.hpp) over big clCreateBuffer
// blocks (device_blocks.hpp), each named by a fake address range (address_map.hpp), so the coherence
// engine's "replica + offset" arithmetic works unchanged and a new replica costs no driver call unless
// the arena needs a block; host_addressable() is false. Ranges are aligned to the device's
// CL_DEVICE_MEM_BASE_ADDR_ALIGN (at least 256 bytes), so a kernel gets a replica, or an aligned slice
// of it, as a sub-buffer of its block. Copies (start_copy) are non-blocking enqueues on the device's queues,
// round robin, each watched by the engine (engine.hpp), which calls CopyCompletion::copy_done from its
// completion thread with no lock of this node held. At most gpu.max_pending_transfers copies are in flight.
//
//   host -> device, device -> host   clEnqueueWriteBuffer / clEnqueueReadBuffer straight from and to
//                                    the buffer's host memory; or, through pinned staging (below)
//   device -> device, same context   clEnqueueCopyBuffer (gpu.peer_access = true)
//   device -> device, otherwise      a read into host staging memory on the source's queue, then a
//                                    write on this device's queue that waits for the read's event
//                                    (same context), or is enqueued when the read completes (two
//                                    platforms)
//   other kinds of node              a host-addressable node's pointer is used as host memory;
//                                    anything else is bounced through host memory synchronously
//
// Pinned staging comes from the memory layer: a StagingPool (memory/pool/staging_pool.hpp) over
// pinned OpenCL memory (pinned_memory.hpp: CL_MEM_ALLOC_HOST_PTR buffers, mapped once), pieces of up to
// `staging_piece_bytes`, at most `staging_limit_bytes` reserved per device. With StagingMode::automatic
// a device that does not share memory with the host (a discrete GPU) copies host data through it piece
// by piece, so the DMA engine reads pinned pages; a device with unified memory (PoCL, integrated GPUs)
// copies directly. When the pool is exhausted, a copy goes direct rather than waiting.
//
// copy_sync() is a blocking read/write on a queue of its own, never through the asynchronous path
// (eviction write-backs call it with a buffer's lock held).
//
// Thread safety: every member may be called from any thread.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "backend/opencl/address_map.hpp"
#include "backend/opencl/engine.hpp"
#include "memory/memory_node.hpp"
#include "memory/pool/device_arena.hpp"
#include "memory/pool/staging_pool.hpp"

namespace nerve::detail::opencl {

enum class StagingMode { automatic, always, never };

// staging_mode_from_environment(): NERVE_OPENCL_STAGING = auto | always | never (default auto), a
// diagnostic switch (tests force the staged path on PoCL with it).
StagingMode staging_mode_from_environment();

inline constexpr std::size_t staging_piece_bytes = std::size_t{4} << 20;
inline constexpr std::size_t staging_limit_bytes = std::size_t{32} << 20;

class OpenclMemoryNode final : public MemoryNode {
 public:
  OpenclMemoryNode(unsigned index, std::string name, std::shared_ptr<Engine> engine, bool peer_access,
                   StagingMode staging);
  ~OpenclMemoryNode() override;

  void drain() noexcept override;
  std::uint64_t wait_idle() noexcept override;
  void copy_sync(MemoryNode& from, const std::byte* source, MemoryNode& to, std::byte* destination,
                 std::size_t bytes) override;

  Engine& engine() noexcept { return *engine_; }
  const std::shared_ptr<Engine>& shared_engine() const noexcept { return engine_; }
  // locate(): the cl_mem and offset of a device address of this node (nullopt: not one of ours).
  std::optional<AddressMap::Location> locate(const std::byte* address) const {
    return addresses_.find(address);
  }
  // blocks(): the driver buffers the replicas are carved from.
  std::size_t blocks() const { return addresses_.size(); }
  const memory::DeviceArena& replicas() const noexcept { return *replicas_; }
  std::size_t compact() override { return replicas_->compact() + staging_.compact(); }
  std::size_t staging_bytes_reserved() const override { return staging_.stats().bytes_reserved; }
  // direct_peer(): copies from `other` go device to device, without host staging.
  bool direct_peer(const OpenclMemoryNode& other) const noexcept;
  bool staging_host_copies() const noexcept { return stage_host_copies_; }

 protected:
  std::byte* allocate_storage(std::size_t bytes) override;
  void free_storage(std::byte* data, std::size_t bytes) noexcept override;
  void start_copy(MemoryNode& from, const std::byte* source, MemoryNode& to, std::byte* destination,
                  std::size_t bytes, CopyCompletion& completion) override;

 private:
  AddressMap::Location locate_or_throw(const std::byte* address, const char* role) const;
  void start(Operation* op) noexcept;  // enqueue, once the gate let the copy through
  cl_int enqueue_piece(Operation* op);
  static bool finish_copy(Engine& engine, Operation& op);
  void release_staging(Operation& op) noexcept;
  bool take_staging(Operation& op, std::size_t bytes);

  std::shared_ptr<Engine> engine_;
  const bool peer_access_;
  const bool stage_host_copies_;
  AddressMap addresses_;
  const std::unique_ptr<memory::DeviceArena> replicas_;  // carves blocks named in addresses_
  memory::StagingPool staging_;
};

}  // namespace nerve::detail::opencl
