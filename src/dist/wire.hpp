// wire.hpp — what payloads look like on the wire: MPI tags, compression and batches.
//
// An MPI tag carries the payload's kind in its low 3 bits and its sequence number (modulo the tag
// space: MPI_TAG_UB is 2^31-1 with Open MPI, so 2^28 payloads may be in flight between two ranks)
// above them. Kinds:
//   raw         the payload's bytes, nothing else (received straight into the replica when possible)
//   compressed  a Zstandard frame of the payload (its size in the frame header)
//   batch       several payloads to one rank: each an Item header, then its bytes (raw or compressed)
//   failure     a rank's failure message (text)
// Pure functions, no MPI: tested on their own (tests/dist/wire_test.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace nerve::distributed::detail {

enum class Kind : int { raw = 0, compressed = 1, batch = 2, failure = 3 };

constexpr int kind_bits = 3;
inline int make_tag(Kind kind, std::uint64_t sequence, std::uint64_t sequence_mask) noexcept {
  return static_cast<int>(((sequence & sequence_mask) << kind_bits) | static_cast<std::uint64_t>(kind));
}
inline Kind tag_kind(int tag) noexcept { return static_cast<Kind>(tag & ((1 << kind_bits) - 1)); }
inline std::uint64_t tag_sequence(int tag) noexcept { return static_cast<std::uint64_t>(tag) >> kind_bits; }

// zstd_available() says whether this build can compress (libzstd found at configure time).
bool zstd_available() noexcept;
// compress() gives a Zstandard frame of `data` (level 1), or nothing when it would not be smaller.
std::vector<std::byte> compress(std::span<const std::byte> data);
// decompress() restores exactly `expected` bytes into `out`; throws Error(internal) on a corrupt frame
// or a size mismatch.
void decompress(std::span<const std::byte> frame, std::span<std::byte> out);
// decompressed_size() reads the original size from a frame's header; throws on a corrupt frame.
std::size_t decompressed_size(std::span<const std::byte> frame);

// One payload inside a batch message.
struct ItemHeader {
  std::uint64_t sequence;    // the full sequence number (not reduced to the tag space)
  std::uint64_t wire_bytes;  // bytes that follow
  std::uint32_t compressed;  // 1: the bytes are a Zstandard frame
  std::uint32_t reserved;
};
static_assert(sizeof(ItemHeader) == 24);

// append_item() adds one payload to a batch under construction.
void append_item(std::vector<std::byte>& batch, std::uint64_t sequence, std::span<const std::byte> bytes,
                 bool compressed);
// for_each_item() calls fn(sequence, bytes, compressed) for each payload of a received batch; throws
// Error(internal) on a malformed batch.
template <class F>
void for_each_item(std::span<const std::byte> batch, F&& fn);

}  // namespace nerve::distributed::detail

#include "dist/wire_items.hpp"
