#include "capi/settings_from_config.hpp"

#include <string>
#include <string_view>

#include <fmt/format.h>

#include "nerve/error.hpp"

namespace nerve::capi {
namespace {

// trim() drops the blanks around a key or value, the same blanks Settings::set drops around a key.
std::string_view trim(std::string_view text) {
  constexpr std::string_view blanks = " \t\r\n";
  const auto first = text.find_first_not_of(blanks);
  if (first == std::string_view::npos) return {};
  const auto last = text.find_last_not_of(blanks);
  return text.substr(first, last - first + 1);
}

const char* boolean(int value) { return value != 0 ? "true" : "false"; }

// memory.numa_policy's text for the seed's integer encoding: 0 local, 1 interleave, 2+k preferred:k.
// Other negative values are passed through as numbers, for the config layer to reject with its message.
std::string numa_policy(int value) {
  switch (value) {
    case 0: return "local";
    case 1: return "interleave";
    default: return value >= 2 ? fmt::format("preferred:{}", value - 2) : std::to_string(value);
  }
}

void add_field(Settings& settings, int value, const char* key, std::string text) {
  if (value != NERVE_CONFIG_UNSET) settings.set(key, std::move(text));
}

}  // namespace

Settings settings_from_config(const nerve_context_config_t& config) {
  Settings settings;
  settings.use_environment(config.use_environment != 0);
  if (config.config_file != nullptr)
    settings.config_file(config.config_file, "nerve_context_config_t::config_file");

  add_field(settings, config.scheduler_spin_us, "scheduler.spin_us",
            std::to_string(config.scheduler_spin_us));
  add_field(settings, config.thread_pool_size, "parallel.thread_pool_size",
            std::to_string(config.thread_pool_size));
  add_field(settings, config.enable_perf_counter, "perf.enable_counters",
            boolean(config.enable_perf_counter));
  add_field(settings, config.perf_counter_interval_ms, "perf.counter_interval_ms",
            std::to_string(config.perf_counter_interval_ms));
  add_field(settings, config.numa_memory_policy, "memory.numa_policy",
            numa_policy(config.numa_memory_policy));
  add_field(settings, config.enable_device_cache_hints, "gpu.cache_hints",
            boolean(config.enable_device_cache_hints));
  add_field(settings, config.max_pending_transfers, "gpu.max_pending_transfers",
            std::to_string(config.max_pending_transfers));

  if (config.setting_count != 0 && config.settings == nullptr) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("nerve_context_config_t::settings is NULL but setting_count is {}",
                            config.setting_count));
  }
  for (std::size_t i = 0; i < config.setting_count; ++i) {
    if (config.settings[i] == nullptr) {
      throw Error(ErrorCode::invalid_argument,
                  fmt::format("nerve_context_config_t::settings[{}] is NULL", i));
    }
    const std::string_view setting = config.settings[i];
    const auto equals = setting.find('=');
    const std::string_view key = trim(setting.substr(0, equals));
    if (equals == std::string_view::npos || key.empty()) {
      throw ConfigError(
          fmt::format("setting '{}' (nerve_context_config_t::settings[{}]) is not of the form key=value",
                      setting, i),
          std::string(key));
    }
    settings.set(std::string(key), std::string(trim(setting.substr(equals + 1))));
  }
  return settings;
}

}  // namespace nerve::capi
