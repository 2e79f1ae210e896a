// fnv1a.hpp — the 64-bit FNV-1a hash, for file names derived from long keys (program cache, models).
#pragma once

#include <cstdint>
#include <string_view>

namespace nerve::detail {

inline constexpr std::uint64_t fnv1a_offset_basis = 0xcbf29ce484222325ULL;

// fnv1a(): a fast, stable (across runs and builds) hash; `seed` other than the offset basis gives an
// independent second hash of the same text.
inline std::uint64_t fnv1a(std::string_view text, std::uint64_t seed = fnv1a_offset_basis) noexcept {
  std::uint64_t hash = seed;
  for (const char c : text) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

}  // namespace nerve::detail
