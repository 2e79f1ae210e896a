#include "backend/cuda/memory.hpp"

#include <algorithm>
#include <cstring>
#include <optional>

#include <fmt/format.h>

#include "nerve/error.hpp"

#include "backend/cuda/allocators.hpp"
#include "backend/host_bounce.hpp"
#include "memory/host_memory_node.hpp"
#include "util/log.hpp"

namespace nerve::detail::cuda {
namespace {

enum Kind : int { host_to_device, device_to_host, device_to_device, peer_to_device, staged_peer_to_device };

std::unique_ptr<memory::NodePool> make_pool(Driver& driver, int ordinal, unsigned index,
                                            const std::string& name, const CudaMemoryOptions& options) {
  if (options.unified_memory) {
    return std::make_unique<memory::DeviceArena>(
        std::make_unique<CudaBlockAllocator>(driver, BlockKind::managed, ordinal, static_cast<int>(index),
                                             fmt::format("managed memory of {}", name)),
        memory::DeviceArenaOptions{.limit_bytes = options.limit_bytes});
  }
  auto blocks = std::make_unique<CudaBlockAllocator>(
      driver, BlockKind::device, ordinal, static_cast<int>(index), fmt::format("device memory of {}", name));
  if (options.pool == PoolKind::stream_ordered) {
    return std::make_unique<StreamOrderedPool>(driver, ordinal, std::move(blocks), options.limit_bytes);
  }
  return std::make_unique<memory::DeviceArena>(
      std::move(blocks), memory::DeviceArenaOptions{.limit_bytes = options.limit_bytes});
}

}  // namespace

CudaMemoryNode::CudaMemoryNode(unsigned index, std::string name, std::shared_ptr<Engine> engine,
                               CudaMemoryOptions options)
    : MemoryNode(index, name, options.limit_bytes, false),
      engine_(std::move(engine)),
      options_(options),
      pool_(make_pool(engine_->driver(), engine_->ordinal(), index, name, options)),
      staging_(std::make_unique<CudaBlockAllocator>(engine_->driver(), BlockKind::pinned, engine_->ordinal(),
                                                    0, fmt::format("pinned staging memory of {}", name)),
               options.staging_limit_bytes) {
  engine_->set_transfer_starter([this](Operation* op) { start(op); });
}

CudaMemoryNode::~CudaMemoryNode() {
  drain();
  // Unregister the host buffers this node page-locked while the driver is still here.
  if (HostPinning* pinning = pinning_.load(std::memory_order_acquire)) pinning->forget(*this);
}

bool CudaMemoryNode::pinned_host(MemoryNode& host, const std::byte* data, std::size_t bytes) {
  if (!options_.pin_host_buffers || bytes == 0) return false;
  auto* node = dynamic_cast<HostMemoryNode*>(&host);
  if (node == nullptr) return false;
  pinning_.store(&node->pinning(), std::memory_order_release);
  return node->pinning().pinned_for_dma(data, bytes, *this);
}

bool CudaMemoryNode::register_host(void* data, std::size_t bytes) noexcept {
  try {
    // This device's context, not whatever the calling thread had current (device 0's by default);
    // the thread's own is put back after.
    const DeviceScope scope(engine_->driver(), engine_->ordinal());
    engine_->driver().host_register(data, bytes);
    return true;
  } catch (const std::exception& error) {
    log::warn("{}: could not page-lock a host buffer of {} bytes ({}); its copies go through staging memory",
              name(), bytes, error.what());
    return false;
  }
}

void CudaMemoryNode::unregister_host(void* data) noexcept {
  std::optional<DeviceScope> scope;
  try {
    scope.emplace(engine_->driver(), engine_->ordinal());
  } catch (const std::exception& error) {
    log::warn("{}: unregistering a page-locked host buffer: {}", name(), error.what());
  }
  engine_->driver().host_unregister(data);
}

void CudaMemoryNode::drain() noexcept { engine_->drain(); }
std::uint64_t CudaMemoryNode::wait_idle() noexcept { return engine_->wait_idle(); }

bool CudaMemoryNode::direct_peer(const CudaMemoryNode& other) const noexcept {
  Driver& driver = engine_->driver();
  return options_.peer_access && &other != this &&
         driver.can_access_peer(engine_->ordinal(), other.engine_->ordinal()) &&
         driver.can_access_peer(other.engine_->ordinal(), engine_->ordinal());
}

std::byte* CudaMemoryNode::allocate_storage(std::size_t bytes) {
  return static_cast<std::byte*>(pool_->try_allocate(bytes));  // nullptr: the runtime evicts and retries
}

void CudaMemoryNode::free_storage(std::byte* data, std::size_t bytes) noexcept {
  pool_->deallocate(data, bytes);
}

void CudaMemoryNode::start_copy(MemoryNode& from, const std::byte* source, MemoryNode& to,
                                std::byte* destination, std::size_t bytes, CopyCompletion& completion) {
  MemoryNode& other = &from == this ? to : from;
  auto* peer = dynamic_cast<CudaMemoryNode*>(&other);
  int kind = 0;
  if (&other == this) {
    kind = device_to_device;
  } else if (other.host_addressable()) {
    kind = &to == this ? host_to_device : device_to_host;
  } else if (peer != nullptr && &to == this) {
    kind = direct_peer(*peer) ? peer_to_device : staged_peer_to_device;
  } else {
    // Another kind of device (or this node as the source of a peer copy the peer drives): through the
    // host, synchronously.
    try {
      copy_through_host(from, source, to, destination, bytes);
      completion.copy_done(true, {});
    } catch (const std::exception& error) {
      completion.copy_done(false, error.what());
    }
    return;
  }
  // The first copy of a large host buffer page-locks it (once; later ones find it locked).
  const bool pinned = (kind == host_to_device || kind == device_to_host) &&
                      pinned_host(other, kind == host_to_device ? source : destination, bytes);
  Operation* op = engine_->acquire();
  op->owner = this;
  op->completion = &completion;
  op->finish = &CudaMemoryNode::finish_copy;
  op->source = source;
  op->destination = destination;
  op->bytes = bytes;
  op->step = kind;
  op->peer_node = peer;
  op->pinned_host = pinned;
  op->outbound = kind == device_to_host;
  if (engine_->begin_transfer(op)) start(op);
}

bool CudaMemoryNode::try_staging(memory::StagingBuffer& into, std::size_t bytes) {
  try {
    into = staging_.acquire(bytes);
    return true;
  } catch (const Error& error) {
    if (error.code() != ErrorCode::out_of_memory) throw;
    return false;
  }
}

bool CudaMemoryNode::take_staging(Operation& op) {
  if (op.bytes == 0 || op.bytes > options_.staging_piece_bytes) return false;
  return try_staging(op.staging, op.bytes);  // the pool is exhausted: copy directly rather than wait
}

void CudaMemoryNode::enqueue_staged_peer(Operation& op, Stream stream) {
  auto& peer = *static_cast<CudaMemoryNode*>(op.peer_node);
  Driver& driver = engine_->driver();
  // Pieces of at most staging_piece_bytes, so that a copy of any size fits the pool (capped, and
  // rounding up to powers of two) and a few large copies in flight do not exhaust it.
  const std::size_t piece = std::max<std::size_t>(std::min(op.bytes, options_.staging_piece_bytes), 1);
  const std::size_t pieces = op.bytes == 0 ? 1 : (op.bytes + piece - 1) / piece;
  if (!try_staging(op.staging, piece)) {
    // Every staging buffer is taken by copies in flight: copy through ordinary host memory now, with
    // the calling thread waiting, rather than fail the task that needs the data.
    copy_through_host(peer, op.source, *this, op.destination, op.bytes);
    engine_->count_staged_copy();
    return;
  }
  // A second buffer lets a piece go out of the source while the one before goes in; without one,
  // each piece waits for the previous one's copy in.
  const unsigned buffers = pieces > 1 && try_staging(op.staging_next, piece) ? 2 : 1;
  Stream source_stream = peer.engine_->streams().copy_stream(false);
  op.handoff_pool = &peer.engine_->events();
  try {
    // All enqueued now, chained by events on the two streams: the host's only part is enqueueing.
    for (std::size_t i = 0; i < pieces; ++i) {
      const unsigned b = static_cast<unsigned>(i % buffers);
      std::byte* buffer = b == 0 ? op.staging.data() : op.staging_next.data();
      const std::size_t offset = i * piece;
      const std::size_t length = std::min(piece, op.bytes - offset);
      // The buffer's previous piece must be in the destination before this one overwrites it.
      if (i >= buffers) driver.stream_wait_event(source_stream, op.drained[b]);
      driver.copy_async(buffer, op.source + offset, length, source_stream);
      // CUDA records an event only on a stream of the event's own device.
      if (op.handoff[b] == nullptr) op.handoff[b] = op.handoff_pool->acquire();
      driver.record_event(op.handoff[b], source_stream);
      driver.stream_wait_event(stream, op.handoff[b]);
      driver.copy_async(op.destination + offset, buffer, length, stream);
      if (i + buffers < pieces) {
        if (op.drained[b] == nullptr) op.drained[b] = engine_->events().acquire();
        driver.record_event(op.drained[b], stream);
      }
    }
  } catch (...) {
    // Pieces already enqueued may still be writing the staging buffers, which go back to the pool
    // when the copy fails: let them finish first.
    settle(op);
    throw;
  }
  engine_->count_staged_copy();
}

void CudaMemoryNode::settle(Operation& op) noexcept {
  Driver& driver = engine_->driver();
  const Stream streams[2] = {
      engine_->streams().copy_stream(!op.outbound),
      op.step == staged_peer_to_device
          ? static_cast<CudaMemoryNode*>(op.peer_node)->engine_->streams().copy_stream(false)
          : nullptr};
  for (Stream each : streams) {
    if (each == nullptr) continue;
    try {
      driver.synchronize_stream(each);
    } catch (const std::exception& error) {
      log::warn("{}: waiting for a failed copy's work: {}", name(), error.what());
    }
  }
}

void CudaMemoryNode::enqueue(Operation& op) {
  Driver& driver = engine_->driver();
  Stream stream = engine_->streams().copy_stream(!op.outbound);
  switch (op.step) {
    case host_to_device:
    case device_to_host:
      // Page-locked host memory is DMA'd in place; other host memory goes through staging when it
      // fits (else straight from pageable memory, which the driver stages itself).
      if (!op.pinned_host && take_staging(op)) {
        if (op.step == host_to_device) {
          std::memcpy(op.staging.data(), op.source, op.bytes);
          driver.copy_async(op.destination, op.staging.data(), op.bytes, stream);
        } else {
          op.host_destination = op.destination;  // copied out of staging when the DMA is done
          driver.copy_async(op.staging.data(), op.source, op.bytes, stream);
        }
      } else {
        driver.copy_async(op.destination, op.source, op.bytes, stream);
        if (op.pinned_host) engine_->count_pinned_copy();
      }
      break;
    case device_to_device: driver.copy_async(op.destination, op.source, op.bytes, stream); break;
    case peer_to_device: {
      auto& peer = *static_cast<CudaMemoryNode*>(op.peer_node);
      // The driver refused to enable peer access (it logged why): staged, as if the pair could not.
      if (!driver.enable_peer_access(engine_->ordinal(), peer.engine_->ordinal())) {
        op.step = staged_peer_to_device;
        enqueue_staged_peer(op, stream);
        break;
      }
      driver.copy_peer_async(op.destination, engine_->ordinal(), op.source, peer.engine_->ordinal(), op.bytes,
                             stream);
      engine_->count_peer_copy();
      break;
    }
    case staged_peer_to_device: enqueue_staged_peer(op, stream); break;
  }
  engine_->arm(&op, stream);
}

void CudaMemoryNode::start(Operation* op) noexcept {
  // Copies start on runtime, application and completion threads: the CUDA runtime would make its
  // current device's context (device 0's, created for it) current on a thread that has none.
  std::optional<DeviceScope> scope;
  try {
    scope.emplace(engine_->driver(), engine_->ordinal());
    enqueue(*op);
    engine_->watch(op);
  } catch (const std::exception& error) {
    // Work enqueued before the failure may still use the copy's staging memory or its destination,
    // which the failure hands back: wait for it.
    settle(*op);
    engine_->fail(op, fmt::format("{}: copying {} bytes: {}", name(), op->bytes, error.what()));
  }
}

bool CudaMemoryNode::finish_copy(Engine& /*engine*/, Operation& op) {
  if (!op.failed && op.host_destination != nullptr)
    std::memcpy(op.host_destination, op.staging.data(), op.bytes);
  op.staging.release();
  op.completion->copy_done(!op.failed, op.error);
  return true;
}

void CudaMemoryNode::copy_sync(MemoryNode& from, const std::byte* source, MemoryNode& to,
                               std::byte* destination, std::size_t bytes) {
  MemoryNode& other = &from == this ? to : from;
  auto* peer = dynamic_cast<CudaMemoryNode*>(&other);
  if (&other != this && !other.host_addressable() && (peer == nullptr || !direct_peer(*peer))) {
    copy_through_host(from, source, to, destination, bytes);
    return;
  }
  Driver& driver = engine_->driver();
  Stream stream = engine_->streams().sync_stream();
  const DeviceScope scope(driver, engine_->ordinal());  // as start() does
  if (peer != nullptr && &other != this) {
    const int destination_device = &to == this ? engine_->ordinal() : peer->engine_->ordinal();
    const int source_device = &to == this ? peer->engine_->ordinal() : engine_->ordinal();
    driver.copy_peer_async(destination, destination_device, source, source_device, bytes, stream);
  } else {
    driver.copy_async(destination, source, bytes, stream);
  }
  driver.synchronize_stream(stream);
}

}  // namespace nerve::detail::cuda
