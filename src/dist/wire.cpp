// wire.cpp — compression and batch encoding (see wire.hpp).
#include "dist/wire.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "nerve/error.hpp"

#if NERVE_WITH_ZSTD
#include <zstd.h>
#endif

namespace nerve::distributed::detail {

bool zstd_available() noexcept { return NERVE_WITH_ZSTD != 0; }

#if NERVE_WITH_ZSTD
std::vector<std::byte> compress(std::span<const std::byte> data) {
  std::vector<std::byte> frame(ZSTD_compressBound(data.size()));
  // Level 1: the fastest level; payloads are compressed on the communication thread, on the path
  // between the producer's task and the consumer's.
  const std::size_t size = ZSTD_compress(frame.data(), frame.size(), data.data(), data.size(), 1);
  if (ZSTD_isError(size) != 0 || size >= data.size()) return {};
  frame.resize(size);
  return frame;
}

std::size_t decompressed_size(std::span<const std::byte> frame) {
  const unsigned long long size = ZSTD_getFrameContentSize(frame.data(), frame.size());
  if (size == ZSTD_CONTENTSIZE_ERROR || size == ZSTD_CONTENTSIZE_UNKNOWN) {
    throw Error(ErrorCode::internal, "distributed: a compressed payload has no valid Zstandard header");
  }
  return static_cast<std::size_t>(size);
}

void decompress(std::span<const std::byte> frame, std::span<std::byte> out) {
  const std::size_t size = ZSTD_decompress(out.data(), out.size(), frame.data(), frame.size());
  if (ZSTD_isError(size) != 0 || size != out.size()) {
    throw Error(
        ErrorCode::internal,
        fmt::format("distributed: a compressed payload does not decompress to its {} bytes{}", out.size(),
                    ZSTD_isError(size) != 0 ? fmt::format(" ({})", ZSTD_getErrorName(size)) : ""));
  }
}
#else
std::vector<std::byte> compress(std::span<const std::byte>) { return {}; }
std::size_t decompressed_size(std::span<const std::byte>) {
  throw Error(ErrorCode::not_supported, "distributed: this build has no zstd (libzstd-dev)");
}
void decompress(std::span<const std::byte>, std::span<std::byte>) {
  throw Error(ErrorCode::not_supported, "distributed: this build has no zstd (libzstd-dev)");
}
#endif

std::optional<std::string> collective_size_error(std::string_view what,
                                                 std::span<const std::uint64_t> lengths,
                                                 std::uint64_t limit) {
  std::uint64_t total = 0;
  std::size_t largest = 0;
  for (std::size_t r = 0; r < lengths.size(); ++r) {
    total += std::min(lengths[r], UINT64_MAX - total);  // saturates: a sum that wrapped would fit
    if (lengths[r] > lengths[largest]) largest = r;
  }
  if (total <= limit) return std::nullopt;
  return fmt::format(
      "{} is {} bytes from {} ranks (rank {} the most: {} bytes), over the {} bytes one MPI collective "
      "moves (MPI's int count)",
      what, total, lengths.size(), largest, lengths[largest], limit);
}

void append_item(std::vector<std::byte>& batch, std::uint64_t sequence, std::span<const std::byte> bytes,
                 bool compressed) {
  const ItemHeader header{sequence, bytes.size(), compressed ? 1u : 0u, 0};
  const std::size_t position = batch.size();
  batch.resize(position + sizeof header + bytes.size());
  std::memcpy(batch.data() + position, &header, sizeof header);
  if (!bytes.empty()) std::memcpy(batch.data() + position + sizeof header, bytes.data(), bytes.size());
}

}  // namespace nerve::distributed::detail
