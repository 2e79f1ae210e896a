// size_classes.hpp — the small-object size classes of the memory pools and the slab each is carved from.
//
// Classes are multiples of 16 bytes up to 128 (16, 32, ..., 128), then four per doubling up to 64 KiB
// (160, 192, 224, 256, 320, ...), the spacing jemalloc uses: a request r > 64 bytes wastes less than
// 20% of its chunk (the next class is at most 1.25 × the previous), and below that at most 15 bytes.
// Every chunk is 16-byte aligned (as malloc's are: alignof(std::max_align_t)), which is why the small
// classes cannot be finer than 16 bytes. Requests above max_small_size bypass the classes (large
// allocations, one block each).
//
// A class's slab is a power of two between 64 KiB and 2 MiB holding at least 32 chunks, so that the
// slab header (slab.hpp) costs at most ~3% and a slab is found from any of its chunks by masking the
// address with the slab size.
//
// Thread safety: constexpr tables and pure functions.
#pragma once

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>

namespace nerve::memory {

inline constexpr std::size_t chunk_alignment = 16;
inline constexpr std::size_t max_small_size = std::size_t{64} * 1024;
inline constexpr unsigned size_class_count = 44;
inline constexpr std::size_t min_slab_bytes = std::size_t{64} * 1024;
inline constexpr std::size_t max_slab_bytes = std::size_t{2} * 1024 * 1024;

// computed_size_class_of() maps a request of 1..max_small_size bytes to its class index by arithmetic.
constexpr unsigned computed_size_class_of(std::size_t bytes) noexcept {
  if (bytes <= 128) return bytes == 0 ? 0u : static_cast<unsigned>((bytes - 1) >> 4);
  const std::size_t below = bytes - 1;  // in [2^k, 2^(k+1)) with k >= 7
  const unsigned k = static_cast<unsigned>(std::bit_width(below)) - 1;
  return 8 + (k - 7) * 4 + static_cast<unsigned>((below - (std::size_t{1} << k)) >> (k - 2));
}

// Up to 4 KiB the class comes from a table indexed by ceil(bytes / 16): every class boundary there
// is a multiple of 16, so all requests of one 16-byte step share a class. One load on the hot path.
inline constexpr std::size_t table_size_limit = 4096;
namespace detail {
constexpr std::array<std::uint8_t, table_size_limit / 16 + 1> make_class_table() {
  std::array<std::uint8_t, table_size_limit / 16 + 1> table{};
  for (std::size_t step = 0; step < table.size(); ++step) {
    table[step] = static_cast<std::uint8_t>(computed_size_class_of(step * 16));
  }
  return table;
}
}  // namespace detail
inline constexpr std::array<std::uint8_t, table_size_limit / 16 + 1> small_class_table =
    detail::make_class_table();

// size_class_of() maps a request of 0..max_small_size bytes to its class index; 0 bytes is treated
// as 1 (a unique, freeable pointer, as malloc(0) gives).
constexpr unsigned size_class_of(std::size_t bytes) noexcept {
  if (bytes <= table_size_limit) return small_class_table[(bytes + 15) >> 4];
  return computed_size_class_of(bytes);
}

namespace detail {
constexpr std::array<std::uint32_t, size_class_count> make_class_sizes() {
  std::array<std::uint32_t, size_class_count> sizes{};
  for (unsigned k = 0; k < size_class_count; ++k) {
    if (k < 8) {
      sizes[k] = 16 * (k + 1);
    } else {
      const unsigned doubling = (k - 8) / 4;
      const unsigned step = (k - 8) % 4 + 1;
      sizes[k] = (128u << doubling) + step * (32u << doubling);
    }
  }
  return sizes;
}
}  // namespace detail

inline constexpr std::array<std::uint32_t, size_class_count> class_sizes = detail::make_class_sizes();

constexpr std::size_t class_size(unsigned size_class) noexcept { return class_sizes[size_class]; }

namespace detail {
constexpr std::array<std::uint32_t, size_class_count> make_slab_sizes() {
  std::array<std::uint32_t, size_class_count> sizes{};
  for (unsigned k = 0; k < size_class_count; ++k) {
    const std::size_t wanted = std::bit_ceil(std::size_t{32} * class_sizes[k]);
    sizes[k] = static_cast<std::uint32_t>(wanted < min_slab_bytes   ? min_slab_bytes
                                          : wanted > max_slab_bytes ? max_slab_bytes
                                                                    : wanted);
  }
  return sizes;
}
}  // namespace detail

// slab_bytes() is the slab size of a class: the power of two holding >= 32 chunks, in 64 KiB..2 MiB.
inline constexpr std::array<std::uint32_t, size_class_count> slab_sizes = detail::make_slab_sizes();
constexpr std::size_t slab_bytes(unsigned size_class) noexcept { return slab_sizes[size_class]; }

static_assert(class_sizes[size_class_count - 1] == max_small_size);
static_assert(size_class_of(max_small_size) == size_class_count - 1);
static_assert(size_class_of(129) == 8 && class_sizes[8] == 160);
static_assert(slab_bytes(size_class_count - 1) == max_slab_bytes);

}  // namespace nerve::memory
