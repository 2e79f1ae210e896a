// config.cpp — Config::load(): defaults, then the YAML file, the environment and the API settings.
#include "nerve/config.hpp"

#include <algorithm>

#include <unistd.h>

#include <fmt/format.h>

#include "nerve/error.hpp"

#include "config/diagnostics.hpp"
#include "config/key_registry.hpp"
#include "config/sources.hpp"
#include "util/log.hpp"

extern char** environ;  // POSIX; declared by <unistd.h> only with _GNU_SOURCE

namespace nerve {
namespace {

using config::Assignment;

// process_environment() copies the NERVE_* part of the environment. Like getenv(), it must not race
// with setenv() in another thread.
std::map<std::string, std::string> process_environment() {
  std::map<std::string, std::string> result;
  for (char** entry = environ; entry && *entry; ++entry) {
    const std::string_view text(*entry);
    const auto equals = text.find('=');
    if (!text.starts_with("NERVE_") || equals == std::string_view::npos) continue;
    result.emplace(std::string(text.substr(0, equals)), std::string(text.substr(equals + 1)));
  }
  return result;
}

// assign() checks one assignment and lets it override what lower-precedence sources set. Values are
// checked even when a higher-precedence source will override them: a broken file is reported, not
// masked by an environment variable.
void assign(Config& result, const Assignment& assignment) {
  const config::KeySpec& spec = config::resolve_key(assignment.key, assignment.origin);
  const config::ParsedValue value =
      config::parse_value(spec.name, spec.type, assignment.value, assignment.origin);
  try {
    spec.apply(result, value);
  } catch (const ConfigError& error) {
    // A key's own parser (memory.numa_policy, scheduler.gpu_stream_priorities, ...) knows the key but
    // not where the value came from: add the file and line (or variable) as for every other error.
    if (!error.file().empty() || error.line() != 0) throw;
    config::throw_config_error(assignment.origin, spec.name, error.what());
  }
  const auto entry = std::find_if(result.entries.begin(), result.entries.end(),
                                  [&](const Config::Entry& e) { return e.key == spec.name; });
  entry->value = value.text;
  entry->origin = assignment.origin;
}

void assign_all(Config& result, const std::vector<Assignment>& assignments) {
  for (const Assignment& assignment : assignments) assign(result, assignment);
}

// check_consistency() rejects combinations of individually valid values.
void check_consistency(const Config& result) {
  if (result.topology.synthetic.empty() || result.topology.xml.empty()) return;
  // Report against whichever of the two keys the user set last, i.e. from the stronger source.
  const ConfigOrigin& synthetic = result.origin("topology.synthetic");
  const ConfigOrigin& xml = result.origin("topology.xml");
  const bool xml_stronger = xml.source >= synthetic.source;
  config::throw_config_error(
      xml_stronger ? xml : synthetic, xml_stronger ? "topology.xml" : "topology.synthetic",
      fmt::format("topology.synthetic (from {}) and topology.xml (from {}) are both set; a topology comes "
                  "from one of them, so set only one",
                  synthetic.describe(), xml.describe()));
}

}  // namespace

std::string ConfigOrigin::describe() const {
  switch (source) {
    case ConfigSource::default_value: return "default";
    case ConfigSource::file: return line > 0 ? fmt::format("{}:{}", file, line) : file;
    case ConfigSource::environment: return "env " + variable;
    case ConfigSource::api: return "api";
  }
  return "unknown";
}

Settings& Settings::set(std::string key, std::string value) {
  // Blanks around the key are dropped, as the C API's "key = value" strings always had them dropped:
  // " scheduler.policy " is scheduler.policy from C and from C++ alike (docs/CONFIG.md).
  constexpr std::string_view blanks = " \t\r\n";
  key.erase(0, std::min(key.find_first_not_of(blanks), key.size()));
  key.erase(key.find_last_not_of(blanks) + 1);
  values_.emplace_back(std::move(key), std::move(value));
  return *this;
}

Settings& Settings::config_file(std::filesystem::path path, std::string named_by) {
  file_ = std::move(path);
  file_named_by_ = std::move(named_by);
  return *this;
}

Settings& Settings::use_environment(bool enabled) {
  use_environment_ = enabled;
  return *this;
}

const ConfigOrigin& Config::origin(std::string_view key) const {
  const auto entry =
      std::find_if(entries.begin(), entries.end(), [&](const Entry& e) { return e.key == key; });
  if (entry == entries.end()) throw ConfigError(config::unavailable_key_message(key), std::string(key));
  return entry->origin;
}

Config Config::load(const Settings& settings) { return load(settings, process_environment()); }

Config Config::load(const Settings& settings, const std::map<std::string, std::string>& environment) {
  static const std::map<std::string, std::string> no_environment;
  const auto& env = settings.environment_enabled() ? environment : no_environment;

  Config result;
  // Defaults go through the same parser and apply functions as user values, so the registry's
  // default text is the single source of truth for both Config and Config::entries.
  for (const config::KeySpec& spec : config::key_table()) {
    result.entries.push_back({std::string(spec.name), std::string(), ConfigOrigin{}});
    assign(result, {std::string(spec.name), config::RawValue::scalar(std::string(spec.default_text)),
                    ConfigOrigin{}});
  }

  if (settings.file()) {
    log::debug("configuration file {} (from {})", settings.file()->string(), settings.file_named_by());
    config::read_config_file(*settings.file(), settings.file_named_by(),
                             [&](const Assignment& assignment) { assign(result, assignment); });
  } else if (const auto named = env.find("NERVE_CONFIG"); named != env.end() && !named->second.empty()) {
    log::debug("configuration file {} (from NERVE_CONFIG)", named->second);
    config::read_config_file(named->second, "NERVE_CONFIG",
                             [&](const Assignment& assignment) { assign(result, assignment); });
  }
  assign_all(result, config::read_environment(env));
  // Within the API a later set() of a key replaces the earlier one before anything is checked (the
  // C API's settings override its convenience fields this way): only the last value of each key counts.
  const auto& api_values = settings.values();
  for (std::size_t i = 0; i < api_values.size(); ++i) {
    // Named references, not a structured binding: clang 14 rejects a lambda that captures a binding.
    const auto& key = api_values[i].first;
    const auto& value = api_values[i].second;
    const auto later = std::find_if(api_values.begin() + static_cast<std::ptrdiff_t>(i) + 1, api_values.end(),
                                    [&](const auto& entry) { return entry.first == key; });
    if (later != api_values.end()) continue;
    assign(result, {key, config::RawValue::scalar(value), config::api_origin()});
  }
  check_consistency(result);
  // Keys another one turns on whatever was set: the effective value is true, and nerve-info says
  // so, with the origin of the key that forces it. perf.trace records every task; heft predicts run
  // times from the history models.
  const auto force_on = [&result](bool& flag, const char* key, const char* by) {
    if (flag) return;
    flag = true;
    const ConfigOrigin origin = result.origin(by);
    for (Config::Entry& entry : result.entries) {
      if (entry.key == key) entry = {entry.key, "true", origin};
    }
  };
  if (!result.perf.trace.empty()) force_on(result.perf.record_tasks, "perf.record_tasks", "perf.trace");
  if (result.scheduler.policy == SchedulerPolicy::heft)
    force_on(result.perf.models, "perf.models", "scheduler.policy");
  return result;
}

std::vector<std::string> known_config_keys() {
  std::vector<std::string> keys;
  for (const config::KeySpec& spec : config::key_table()) keys.emplace_back(spec.name);
  return keys;
}

}  // namespace nerve
