#include "config/diagnostics.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "nerve/error.hpp"

namespace nerve::config {

void throw_config_error(const ConfigOrigin& origin, std::string_view key, std::string_view message) {
  const bool from_file = origin.source == ConfigSource::file;
  throw ConfigError(fmt::format("{}: {}", origin.describe(), message), std::string(key),
                    from_file ? origin.file : std::string(), from_file ? origin.line : 0);
}

void rethrow_with_origin(const Config& config, const ConfigError& error) {
  if (!error.file().empty() || error.line() != 0) throw error;
  const auto entry = std::find_if(config.entries.begin(), config.entries.end(),
                                  [&](const Config::Entry& e) { return e.key == error.key(); });
  if (entry == config.entries.end()) throw error;
  // "<key>: <message>", as a key's own parser words it; add the key when the message lacks it.
  const std::string_view message = error.what();
  const std::string prefix = error.key() + ": ";
  throw_config_error(entry->origin, error.key(),
                     message.starts_with(prefix) ? std::string(message) : prefix + std::string(message));
}

ConfigOrigin file_origin(std::string file, int line) {
  ConfigOrigin origin;
  origin.source = ConfigSource::file;
  origin.file = std::move(file);
  origin.line = line;
  return origin;
}

ConfigOrigin environment_origin(std::string variable) {
  ConfigOrigin origin;
  origin.source = ConfigSource::environment;
  origin.variable = std::move(variable);
  return origin;
}

ConfigOrigin api_origin() {
  ConfigOrigin origin;
  origin.source = ConfigSource::api;
  return origin;
}

std::string quote(std::string_view value) {
  constexpr std::size_t longest_shown = 80;
  if (value.size() > longest_shown)
    return fmt::format("'{}...' ({} bytes)", printable(value.substr(0, longest_shown)), value.size());
  return fmt::format("'{}'", printable(value));  // not "'" + ... + "'": GCC 12 warns falsely (-Wrestrict)
}

std::string printable(std::string_view text) {
  std::string result;
  for (const char each : text) {
    const auto byte = static_cast<unsigned char>(each);
    if (byte < 0x20 || byte == 0x7f) {
      result += fmt::format("\\x{:02x}", byte);
    } else {
      result += each;
    }
  }
  return result;
}

}  // namespace nerve::config
