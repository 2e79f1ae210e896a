#include "memory/buffer_state.hpp"

#include <fmt/format.h>

#include "nerve/error.hpp"

namespace nerve::detail {

BufferState::BufferState(ContextImpl* owner, HostMemoryNode& host_node, int worker_numa,
                         std::size_t size_bytes, std::size_t element_bytes, const BufferOptions& options,
                         std::uint64_t buffer_id)
    : context(owner),
      bytes(size_bytes),
      home_numa(options.numa_node),
      sticky(options.sticky),
      host_cached(options.host_cached),
      element_size(element_bytes),
      id(buffer_id),
      tracker(size_bytes),
      name(options.name),
      host_storage(host_node, size_bytes, options.numa_node, worker_numa),
      replicas(size_bytes, host_storage.data()) {
  host = host_storage.data();  // declared on the hot line, before the storage it points into
}

BufferState::~BufferState() = default;

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

std::string describe_buffer(std::uint64_t id, std::string_view name, std::size_t bytes) {
  if (name.empty()) return fmt::format("buffer {} ({} bytes)", id, bytes);
  return fmt::format("buffer {} '{}' ({} bytes)", id, name, bytes);
}

std::string BufferState::describe() const { return describe_buffer(id, name, bytes); }

}  // namespace nerve::detail
