// arguments.hpp — strict number parsing for the examples' command lines: digits only, so that "-5"
// or "1e6" is a usage error rather than a wrapped or truncated size.
#pragma once

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
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

// usage_exit(): the end of a command line that cannot run. With a `problem`, it and the usage `text`
// go to stderr and the exit status is 2; with none (--help), the text goes to stdout, status 0.
[[noreturn]] inline void usage_exit(const char* program, const char* text, const std::string& problem) {
  if (problem.empty()) {
    std::fputs(text, stdout);
    std::exit(0);
  }
  std::fprintf(stderr, "%s: %s\n%s", program, problem.c_str(), text);
  std::exit(2);
}

// count_option(): option `name`'s `value`, an integer from 1 to `limit`; otherwise `usage` is called
// (it does not return) with the problem.
template <class Usage>
std::size_t count_option(const std::string& name, const std::string& value, std::size_t limit,
                         Usage&& usage) {
  const auto number = parse_count(value);
  if (!number || *number == 0 || *number > limit)
    usage(name + " needs an integer from 1 to " + std::to_string(limit) + ", not '" + value + "'");
  return static_cast<std::size_t>(*number);
}

}  // namespace nerve_examples
