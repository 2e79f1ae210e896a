// env_source.cpp — read_environment(): NERVE_<SECTION>_<KEY> overrides.
#include <algorithm>
#include <array>
#include <map>

#include <fmt/format.h>

#include "config/diagnostics.hpp"
#include "config/key_registry.hpp"
#include "config/sources.hpp"
#include "config/suggest.hpp"

namespace nerve::config {
namespace {

// Variables nerve reads for other purposes. None of them starts with a section name today; listing
// them keeps them safe if a section with a clashing name is ever added.
// NERVE_TRACE is handled separately: an alias of NERVE_PERF_TRACE.
constexpr std::array<std::string_view, 4> non_config_variables{"NERVE_CONFIG", "NERVE_LOG_LEVEL",
                                                               "NERVE_PLUGIN_PATH", "NERVE_TEST_TIMEOUT"};

}  // namespace

std::vector<Assignment> read_environment(const std::map<std::string, std::string>& environment) {
  // Keys contain underscores (task_queue.per_device_queue_depth), so a variable name cannot be split
  // back into section and key; instead every key's variable name is built and looked up.
  std::map<std::string, std::string, std::less<>> key_of_variable;
  std::vector<std::string> variables;
  for (const std::string& key : all_key_names()) {
    variables.push_back(environment_variable_name(key));
    key_of_variable.emplace(variables.back(), key);
  }
  std::vector<std::pair<std::string, std::string>> section_prefixes;  // "NERVE_TASK_QUEUE_" -> "task_queue"
  for (const std::string& section : section_names()) {
    section_prefixes.emplace_back(environment_variable_name(section) + "_", section);
  }

  std::vector<Assignment> assignments;
  for (const auto& [variable, value] : environment) {
    if (!variable.starts_with("NERVE_")) continue;
    if (std::find(non_config_variables.begin(), non_config_variables.end(), variable) !=
        non_config_variables.end()) {
      continue;
    }
    const ConfigOrigin origin = environment_origin(variable);
    if (variable == "NERVE_TRACE") {
      // The short alias of NERVE_PERF_TRACE, which wins when both are set: assigned first, so that
      // its value is still checked like every overridden one, then replaced.
      assignments.insert(assignments.begin(), {"perf.trace", RawValue::scalar(value), origin});
      continue;
    }
    if (const auto known = key_of_variable.find(variable); known != key_of_variable.end()) {
      assignments.push_back({known->second, RawValue::scalar(value), origin});
      continue;
    }
    // NERVE_SCHEDULER=eager names a section and no key: as much a mistake as NERVE_SCHEDULER_POLCY.
    for (const auto& [prefix, section_name] : section_prefixes) {
      if (variable.size() + 1 != prefix.size() || !prefix.starts_with(variable)) continue;
      std::vector<std::string> section_variables;
      for (const std::string& each : variables) {
        if (each.starts_with(prefix)) section_variables.push_back(each);
      }
      throw_config_error(origin, section_name,
                         fmt::format("this variable names the section '{}' but no key (the section's "
                                     "variables are {})",
                                     section_name, fmt::join(section_variables, ", ")));
    }
    // The longest matching prefix wins, should one section's name ever start with another's.
    const std::pair<std::string, std::string>* section = nullptr;
    for (const auto& prefix : section_prefixes) {
      if (variable.starts_with(prefix.first) && (!section || prefix.first.size() > section->first.size())) {
        section = &prefix;
      }
    }
    if (!section) continue;  // NERVE_SOMETHING_ELSE is not ours to judge
    const std::string key =
        section->second + "." + to_lower_ascii(std::string_view(variable).substr(section->first.size()));
    // The key exists, spelled in another case: "unknown" would contradict itself.
    if (const auto known = std::find_if(key_of_variable.begin(), key_of_variable.end(),
                                        [&](const auto& each) { return each.second == key; });
        known != key_of_variable.end()) {
      throw_config_error(origin, key,
                         fmt::format("environment variables are upper case: the variable of {} is {}",
                                     quote(key), known->first));
    }
    const auto hint = closest_match(variable, variables);
    throw_config_error(origin, key,
                       fmt::format("this variable names no configuration key ({} is unknown{})", quote(key),
                                   hint ? fmt::format("; did you mean {}?", *hint) : std::string()));
  }
  return assignments;
}

}  // namespace nerve::config
