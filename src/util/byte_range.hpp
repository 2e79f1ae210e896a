// byte_range.hpp — "[offset, end)" for messages about a byte range.
#pragma once

#include <cstddef>
#include <string>

#include <fmt/format.h>

namespace nerve::detail {

// The end is computed in 128 bits: offset + size may not fit size_t, and a message must not show a
// wrapped end. (__extension__: ISO C++ has no 128-bit integer, and -Wpedantic says so at every use.)
__extension__ using WideSize = unsigned __int128;

inline std::string byte_range(std::size_t offset, std::size_t size) {
  return fmt::format("[{}, {})", offset, static_cast<WideSize>(offset) + size);
}

}  // namespace nerve::detail
