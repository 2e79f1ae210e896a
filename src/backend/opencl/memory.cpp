#include "backend/opencl/memory.hpp"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include <fmt/format.h>

#include "backend/host_bounce.hpp"
#include "backend/opencl/device_blocks.hpp"
#include "backend/opencl/pinned_memory.hpp"
#include "util/log.hpp"
#include "util/monotonic_clock.hpp"

namespace nerve::detail::opencl {
namespace {

enum Direction : int {
  host_to_device,
  device_to_host,
  device_to_device,
  staged_host_to_device,  // piece by piece through pinned staging memory
  staged_device_to_host,
  staged_read,   // device to device through host memory: the read from the source
  staged_write,  // ... then the write into this device
};

constexpr std::size_t page = 4096;

std::byte* page_aligned(std::size_t bytes) {
  void* data = std::aligned_alloc(page, (bytes + page - 1) / page * page);
  if (data == nullptr)
    throw Error(ErrorCode::out_of_memory, fmt::format("cannot allocate {} bytes of staging memory", bytes));
  return static_cast<std::byte*>(data);
}

// Ranges start where a kernel may begin a sub-buffer; blocks never exceed the largest buffer the
// device allows; the usual block is 64 MiB, or a quarter of a smaller device's largest buffer.
memory::DeviceArenaOptions arena_options(const PlatformDevice& device) {
  memory::DeviceArenaOptions options;
  options.alignment = std::bit_ceil(std::max<std::size_t>(256, device.base_alignment));
  options.max_chunk_bytes = std::max<std::size_t>(device.max_allocation, options.alignment);
  options.chunk_bytes =
      std::clamp<std::size_t>(options.max_chunk_bytes / 4, options.alignment, options.chunk_bytes);
  return options;
}

}  // namespace

StagingMode staging_mode_from_environment() {
  const char* value = std::getenv("NERVE_OPENCL_STAGING");
  if (value == nullptr || *value == '\0' || std::string_view(value) == "auto") return StagingMode::automatic;
  if (std::string_view(value) == "always") return StagingMode::always;
  if (std::string_view(value) == "never") return StagingMode::never;
  throw Error(ErrorCode::invalid_config,
              fmt::format("NERVE_OPENCL_STAGING is '{}', not one of auto, always, never", value));
}

// --- OpenclMemoryNode

OpenclMemoryNode::OpenclMemoryNode(unsigned index, std::string name, std::shared_ptr<Engine> engine,
                                   bool peer_access, StagingMode staging)
    : MemoryNode(index, std::move(name), engine->device().global_memory, false),
      engine_(std::move(engine)),
      peer_access_(peer_access),
      stage_host_copies_(staging == StagingMode::always ||
                         (staging == StagingMode::automatic && !engine_->device().unified_memory)),
      replicas_(std::make_unique<memory::DeviceArena>(
          std::make_unique<DeviceBlockAllocator>(*engine_, addresses_, static_cast<int>(index)),
          arena_options(engine_->device()))),
      staging_(std::make_unique<PinnedOpenclAllocator>(*engine_), staging_limit_bytes) {
  engine_->set_transfer_starter([this](Operation* op) { start(op); });
}

OpenclMemoryNode::~OpenclMemoryNode() { drain(); }

void OpenclMemoryNode::drain() noexcept { engine_->drain(); }
std::uint64_t OpenclMemoryNode::wait_idle() noexcept { return engine_->wait_idle(); }

bool OpenclMemoryNode::direct_peer(const OpenclMemoryNode& other) const noexcept {
  return peer_access_ && other.engine_->context() == engine_->context();
}

std::byte* OpenclMemoryNode::allocate_storage(std::size_t bytes) {
  const PlatformDevice& device = engine_->device();
  if (bytes > device.max_allocation) {
    throw Error(ErrorCode::out_of_memory,
                fmt::format("a replica of {} bytes is larger than OpenCL device '{}' allows for one buffer "
                            "(CL_DEVICE_MAX_MEM_ALLOC_SIZE = {} bytes)",
                            bytes, device.name, device.max_allocation));
  }
  // nullptr: the coherence engine evicts and retries, or reports out_of_memory.
  return static_cast<std::byte*>(replicas_->try_allocate(bytes));
}

void OpenclMemoryNode::free_storage(std::byte* data, std::size_t bytes) noexcept {
  replicas_->deallocate(data, bytes);
}

AddressMap::Location OpenclMemoryNode::locate_or_throw(const std::byte* address, const char* role) const {
  if (auto location = addresses_.find(address)) return *location;
  throw Error(ErrorCode::internal, fmt::format("{} address {} is not memory of {}", role,
                                               static_cast<const void*>(address), name()));
}

void OpenclMemoryNode::start_copy(MemoryNode& from, const std::byte* source, MemoryNode& to,
                                  std::byte* destination, std::size_t bytes, CopyCompletion& completion) {
  // Nodes that are neither host memory nor OpenCL memory of this process: bounce synchronously.
  auto* peer = dynamic_cast<OpenclMemoryNode*>(&from == this ? &to : &from);
  MemoryNode& other = &from == this ? to : from;
  if (peer == nullptr && !other.host_addressable()) {
    copy_through_host(from, source, to, destination, bytes);
    completion.copy_done(true, {});
    return;
  }
  Operation* op = engine_->acquire();
  op->owner = this;
  op->completion = &completion;
  op->finish = &OpenclMemoryNode::finish_copy;
  op->bytes = bytes;
  try {
    if (&to == this && peer == nullptr) {
      op->direction = stage_host_copies_ ? staged_host_to_device : host_to_device;
      op->host_source = source;
      const auto target = locate_or_throw(destination, "destination");
      op->destination_mem = target.mem;
      op->destination_offset = target.offset;
    } else if (&from == this && peer == nullptr) {
      op->direction = stage_host_copies_ ? staged_device_to_host : device_to_host;
      op->host_destination = destination;
      const auto origin = locate_or_throw(source, "source");
      op->source_mem = origin.mem;
      op->source_offset = origin.offset;
    } else {
      // Device to device into this node (MemoryNode::copy has the destination drive such copies).
      const auto origin = peer->locate_or_throw(source, "source");
      const auto target = locate_or_throw(destination, "destination");
      op->source_mem = origin.mem;
      op->source_offset = origin.offset;
      op->destination_mem = target.mem;
      op->destination_offset = target.offset;
      op->peer = peer->engine_.get();
      op->direction = direct_peer(*peer) ? device_to_device : staged_read;
    }
  } catch (const std::exception& error) {
    engine_->fail(op, error.what());
    return;
  }
  engine_->counters().copies.fetch_add(1, std::memory_order_relaxed);
  if (engine_->begin_transfer(op)) start(op);
}

bool OpenclMemoryNode::take_staging(Operation& op, std::size_t bytes) {
  if (bytes <= staging_piece_bytes) {
    try {
      op.staging_buffer = staging_.acquire(bytes);
      op.staging = op.staging_buffer.data();
      return true;
    } catch (const Error&) {
      // The pool is at its limit (or the driver has no pinned memory left): see below.
    }
  }
  if (op.direction == staged_read) {  // device to device must stage: a temporary then
    op.staging = page_aligned(bytes);
    return true;
  }
  return false;
}

void OpenclMemoryNode::release_staging(Operation& op) noexcept {
  if (op.staging == nullptr) return;
  if (op.staging_buffer) {
    op.staging_buffer.release();
  } else {
    std::free(op.staging);
  }
  op.staging = nullptr;
}

void OpenclMemoryNode::start(Operation* op) noexcept {
  try {
    if (op->direction == staged_host_to_device || op->direction == staged_device_to_host) {
      if (take_staging(*op, std::min(op->bytes, staging_piece_bytes))) {
        engine_->counters().staged_copies.fetch_add(1, std::memory_order_relaxed);
      } else {  // the staging pool is exhausted: going direct beats waiting
        op->direction = op->direction == staged_host_to_device ? host_to_device : device_to_host;
      }
    } else if (op->direction == staged_read) {
      take_staging(*op, op->bytes);
      engine_->counters().staged_copies.fetch_add(1, std::memory_order_relaxed);
    } else if (op->direction == device_to_device) {
      engine_->counters().peer_copies.fetch_add(1, std::memory_order_relaxed);
    }
  } catch (const std::exception& error) {
    engine_->fail(op, error.what());
    return;
  }
  const cl_int status = enqueue_piece(op);
  if (status != CL_SUCCESS) {
    engine_->fail(op, fmt::format("enqueueing a copy of {} bytes on OpenCL device '{}': {}", op->bytes,
                                  engine_->device().name, error_name(status)));
    return;
  }
  engine_->watch(op);
}

// enqueue_piece(): the next (or only) step of `op`, its event in op->event. A failure returned here
// left nothing enqueued (the caller fails the copy at once); one found after part of the step was
// enqueued is put in op->error with CL_SUCCESS returned, so the copy fails when op->event completes.
cl_int OpenclMemoryNode::enqueue_piece(Operation* op) {
  cl_command_queue queue = engine_->next_queue();
  op->enqueued_ns = monotonic_ns();
  const std::size_t piece = std::min(op->bytes - op->done_bytes, staging_piece_bytes);
  cl_int status = CL_SUCCESS;
  switch (op->direction) {
    case host_to_device:
      status = clEnqueueWriteBuffer(queue, op->destination_mem, CL_FALSE, op->destination_offset, op->bytes,
                                    op->host_source, 0, nullptr, &op->event);
      break;
    case device_to_host:
      status = clEnqueueReadBuffer(queue, op->source_mem, CL_FALSE, op->source_offset, op->bytes,
                                   op->host_destination, 0, nullptr, &op->event);
      break;
    case device_to_device:
      status = clEnqueueCopyBuffer(queue, op->source_mem, op->destination_mem, op->source_offset,
                                   op->destination_offset, op->bytes, 0, nullptr, &op->event);
      break;
    case staged_host_to_device:
      // The pinned buffer is filled here (the caller's thread for the first piece, the completion
      // thread for the next): the driver then DMAs from pinned pages.
      std::memcpy(op->staging, op->host_source + op->done_bytes, piece);
      status =
          clEnqueueWriteBuffer(queue, op->destination_mem, CL_FALSE, op->destination_offset + op->done_bytes,
                               piece, op->staging, 0, nullptr, &op->event);
      break;
    case staged_device_to_host:
      status = clEnqueueReadBuffer(queue, op->source_mem, CL_FALSE, op->source_offset + op->done_bytes, piece,
                                   op->staging, 0, nullptr, &op->event);
      break;
    case staged_read: {
      cl_command_queue source_queue = op->peer->next_queue();
      cl_event read = nullptr;
      status = clEnqueueReadBuffer(source_queue, op->source_mem, CL_FALSE, op->source_offset, op->bytes,
                                   op->staging, 0, nullptr, &read);
      if (status != CL_SUCCESS) break;
      clFlush(source_queue);
      if (op->peer->context() != engine_->context()) {
        op->event = read;  // two platforms: the write is enqueued when this completes
        break;
      }
      // One context: the write waits for the read's event on the device, no host round trip.
      status = clEnqueueWriteBuffer(queue, op->destination_mem, CL_FALSE, op->destination_offset, op->bytes,
                                    op->staging, 1, &read, &op->event);
      if (status != CL_SUCCESS) {
        // The read is enqueued and goes on writing into op->staging: failing the copy now would free
        // that memory (or give it to another copy) under it. The copy fails behind the read instead:
        // the read becomes the watched event, and finish_copy reports the error once it completed.
        op->error = fmt::format("enqueueing a copy of {} bytes on OpenCL device '{}': {}", op->bytes,
                                engine_->device().name, error_name(status));
        op->event = read;
        status = CL_SUCCESS;
        break;
      }
      engine_->event_created();
      op->direction = staged_write;
      engine_->release_event(read);
      break;
    }
    case staged_write:
      status = clEnqueueWriteBuffer(queue, op->destination_mem, CL_FALSE, op->destination_offset, op->bytes,
                                    op->staging, 0, nullptr, &op->event);
      break;
    default: status = CL_INVALID_OPERATION;
  }
  if (status == CL_SUCCESS) clFlush(queue);
  // A read still pending (between two platforms, or behind a failed write) has its event on the
  // source's queue, not this one.
  op->queue = status != CL_SUCCESS || op->direction == staged_read ? nullptr : queue;
  return status;
}

bool OpenclMemoryNode::finish_copy(Engine& engine, Operation& op) {
  auto& node = *static_cast<OpenclMemoryNode*>(op.owner);
  if (op.error.empty() && op.status < 0) {
    op.error = fmt::format("a copy of {} bytes on OpenCL device '{}' failed: {}", op.bytes,
                           engine.device().name, error_name(op.status));
  }
  if (op.error.empty()) {
    // A staged copy's next step, on the same record.
    bool more = false;
    const std::size_t piece = std::min(op.bytes - op.done_bytes, staging_piece_bytes);
    if (op.direction == staged_host_to_device || op.direction == staged_device_to_host) {
      if (op.direction == staged_device_to_host)
        std::memcpy(op.host_destination + op.done_bytes, op.staging, piece);
      op.done_bytes += piece;
      more = op.done_bytes < op.bytes;
    } else if (op.direction == staged_read) {
      op.direction = staged_write;
      more = true;
    }
    if (more) {
      const cl_int status = node.enqueue_piece(&op);
      if (status == CL_SUCCESS) {
        engine.watch(&op);
        return false;
      }
      op.error = fmt::format("enqueueing a copy on OpenCL device '{}': {}", engine.device().name,
                             error_name(status));
    }
  }
  node.release_staging(op);
  CopyCompletion* completion = op.completion;
  const bool ok = op.error.empty();
  const std::string error = std::move(op.error);
  if (op.counts_as_transfer) engine.end_transfer();  // the next waiting copy starts now
  completion->copy_done(ok, error);                  // no lock of ours is held here
  return true;
}

void OpenclMemoryNode::copy_sync(MemoryNode& from, const std::byte* source, MemoryNode& to,
                                 std::byte* destination, std::size_t bytes) {
  cl_command_queue queue = engine_->sync_queue();
  if (&from == this && to.host_addressable()) {
    const auto origin = locate_or_throw(source, "source");
    check(clEnqueueReadBuffer(queue, origin.mem, CL_TRUE, origin.offset, bytes, destination, 0, nullptr,
                              nullptr),
          fmt::format("reading {} bytes back from OpenCL device '{}'", bytes, engine_->device().name));
  } else if (&to == this && from.host_addressable()) {
    const auto target = locate_or_throw(destination, "destination");
    check(clEnqueueWriteBuffer(queue, target.mem, CL_TRUE, target.offset, bytes, source, 0, nullptr, nullptr),
          fmt::format("writing {} bytes to OpenCL device '{}'", bytes, engine_->device().name));
  } else {
    copy_through_host(from, source, to, destination, bytes);
  }
}

}  // namespace nerve::detail::opencl
