// wire_items.hpp — for_each_item() of wire.hpp (a template, so in a header).
#pragma once

#include <cstring>

#include "nerve/error.hpp"

namespace nerve::distributed::detail {

template <class F>
void for_each_item(std::span<const std::byte> batch, F&& fn) {
  std::size_t position = 0;
  while (position < batch.size()) {
    ItemHeader header;
    if (batch.size() - position < sizeof header) {
      throw Error(ErrorCode::internal, "distributed: a batch message ends inside an item header");
    }
    std::memcpy(&header, batch.data() + position, sizeof header);
    position += sizeof header;
    if (header.wire_bytes > batch.size() - position) {
      throw Error(ErrorCode::internal, "distributed: a batch item runs past the end of its message");
    }
    fn(header.sequence, batch.subspan(position, header.wire_bytes), header.compressed != 0);
    position += header.wire_bytes;
  }
}

}  // namespace nerve::distributed::detail
