// arguments.hpp — strict number parsing for the examples' command lines: digits only, so that "-5"
// or "1e6" is a usage error rather than a wrapped or truncated size.
#pragma once

#include <charconv>
#include <optional>
#include <string_view>

namespace nerve_examples {

// parse_count(): the unsigned integer `text` spells (decimal digits only, no sign, no overflow).
inline std::optional<unsigned long long> parse_count(std::string_view text) {
  unsigned long long value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc{} || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// is_help(): -h or --help.
inline bool is_help(std::string_view arg) { return arg == "-h" || arg == "--help"; }

}  // namespace nerve_examples
