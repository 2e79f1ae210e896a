#include "memory/buffer_state.hpp"

#include <cstdlib>
#include <new>

#include <fmt/format.h>

#include "nerve/error.hpp"

namespace nerve::detail {

std::byte* allocate_host_bytes(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  const std::size_t alignment = bytes >= (std::size_t{1} << 20) ? 4096 : 64;
  const std::size_t rounded = (bytes + alignment - 1) / alignment * alignment;
  void* data = std::aligned_alloc(alignment, rounded);
  if (data == nullptr) {
    throw Error(ErrorCode::out_of_memory,
                fmt::format("host memory: cannot allocate {} bytes for a buffer", bytes));
  }
  return static_cast<std::byte*>(data);
}

void free_host_bytes(std::byte* data) noexcept { std::free(data); }

BufferState::BufferState(ContextImpl* owner, std::size_t size_bytes, std::size_t element_bytes,
                         const BufferOptions& options, std::uint64_t buffer_id)
    : context(owner),
      bytes(size_bytes),
      element_size(element_bytes),
      id(buffer_id),
      name(options.name),
      host(allocate_host_bytes(size_bytes)),
      home_numa(options.numa_node),
      sticky(options.sticky),
      host_cached(options.host_cached),
      tracker(size_bytes),
      replicas(size_bytes, host) {}

BufferState::~BufferState() { free_host_bytes(host); }

void BufferState::check_usable(const char* operation) const {
  switch (life.load(std::memory_order_acquire)) {
    case BufferLife::alive: return;
    case BufferLife::freed:
      throw Error(ErrorCode::buffer_misuse,
                  fmt::format("{}: {} was already freed (use after free)", operation, describe()));
    case BufferLife::context_gone:
      throw Error(ErrorCode::buffer_misuse,
                  fmt::format("{}: {} belongs to a context that has been destroyed", operation, describe()));
  }
}

std::string BufferState::describe() const {
  if (name.empty()) return fmt::format("buffer {} ({} bytes)", id, bytes);
  return fmt::format("buffer {} '{}' ({} bytes)", id, name, bytes);
}

}  // namespace nerve::detail
