#include "memory/buffer_state.hpp"

#include <memory>

#include <fmt/format.h>

#include "nerve/error.hpp"

#include "util/byte_range.hpp"

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
      name(options.name.empty() ? nullptr : std::make_shared<const std::string>(options.name)),
      host_storage(host_node, size_bytes, options.numa_node, worker_numa),
      replicas(size_bytes, host_storage.data()) {
  host = host_storage.data();  // declared on the hot line, before the storage it points into
}

BufferState::~BufferState() = default;

void BufferState::check_usable(const char* operation, std::size_t offset, std::size_t size) const {
  switch (life.load(std::memory_order_acquire)) {
    case BufferLife::alive: return;
    case BufferLife::freed:
      throw Error(ErrorCode::buffer_misuse,
                  fmt::format("{} {}: the buffer was already freed (use after free)", operation,
                              describe(offset, size)));
    case BufferLife::context_gone:
      throw Error(ErrorCode::buffer_misuse,
                  fmt::format("{} {}: the buffer belongs to a context that has been destroyed", operation,
                              describe(offset, size)));
  }
}

std::string describe_buffer(std::uint64_t id, std::string_view name, std::size_t bytes) {
  if (name.empty()) return fmt::format("buffer {} ({} bytes)", id, bytes);
  return fmt::format("buffer {} '{}' ({} bytes)", id, name, bytes);
}

std::string describe_buffer(const BufferLabel& label) {
  return describe_buffer(label.id, label.name != nullptr ? std::string_view(*label.name) : std::string_view(),
                         label.bytes);
}

std::string BufferState::describe() const { return describe_buffer({id, bytes, name}); }

std::string BufferState::describe(std::size_t offset, std::size_t size) const {
  return fmt::format("bytes {} of {}", byte_range(offset, size), describe());
}

}  // namespace nerve::detail
