// The configuration section: every key's effective value and where it came from, as a table.
#include <algorithm>
#include <string>

#include <fmt/format.h>

#include "report.hpp"

namespace nerve::info {

std::string print_config(const Config& config) {
  std::size_t key_width = 3, value_width = 5;  // "key", "value"
  // A value (or a file name in an origin) is the user's text: a newline in it broke the table, an
  // ESC sequence coloured the terminal. printable() writes such characters visibly (\n, \x1b).
  const auto shown = [](const std::string& value) {
    return value.empty() ? std::string("\"\"") : printable(value);
  };
  for (const Config::Entry& entry : config.entries) {
    key_width = std::max(key_width, entry.key.size());
    value_width = std::max(value_width, shown(entry.value).size());
  }
  std::string out = "Configuration (effective values; origin: default, FILE:LINE, env VARIABLE or api)\n";
  out += fmt::format("  {:<{}}  {:<{}}  {}\n", "key", key_width, "value", value_width, "origin");
  for (const Config::Entry& entry : config.entries) {
    out += fmt::format("  {:<{}}  {:<{}}  {}\n", entry.key, key_width, shown(entry.value), value_width,
                       printable(entry.origin.describe()));
  }
  return out;
}

}  // namespace nerve::info
