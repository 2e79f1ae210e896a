// wire.hpp — what payloads look like on the wire: MPI tags, compression and batches.
//
// An MPI tag carries the payload's kind in its low 3 bits and its sequence number (modulo the tag
// space: MPI_TAG_UB is 2^31-1 with Open MPI, so 2^28 payloads may be in flight between two ranks)
// above them. Kinds:
//   raw         the payload's bytes, nothing else (received straight into the replica when possible)
//   compressed  a Zstandard frame of the payload (its size in the frame header)
//   batch       several payloads to one rank: each an Item header, then its bytes (raw or compressed)
//   failure     a rank's failure message (text)
// Also the size rule of the collectives on text. Pure functions, no MPI: tested on their own
// (tests/dist/wire_test.cpp).
#pragma once

#include <climits>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
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

// Collectives on text (dump_trace(): every rank's trace gathered on rank 0, rank 0's verdict broadcast)
// count bytes, and place them, with MPI's int: at most collective_bytes_max in all. Each rank learns
// every length as a 64-bit number first, so that all of them refuse a collective too large alike,
// before any commits to it (an int sum that wrapped threw on rank 0 alone and left the others in
// MPI_Gatherv for ever).
inline constexpr std::uint64_t collective_bytes_max = INT32_MAX;
// collective_size_error() is nothing when texts of `lengths` bytes (one per rank) fit in one
// collective of at most `limit` bytes in all, else the message of the Error(not_supported) every rank
// throws alike; `what` names the text ("dump_trace(): the merged trace").
std::optional<std::string> collective_size_error(std::string_view what,
                                                 std::span<const std::uint64_t> lengths, std::uint64_t limit);

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
