// key_registry.hpp — the table of configuration keys: the one place a key is defined.
//
// key_table() holds every key this build implements, in documentation order: its name, value type
// (which also gives the allowed values or range), default, a one-line description and the function
// that stores a parsed value into Config. planned_key_table() holds the keys the specification
// promises but whose feature this build lacks; they are recognised so that a user gets "not available
// in this build yet" instead of "unknown key". Enabling a planned key means moving its row into
// key_table() with a type and an apply function, adding its field to Config and documenting it in
// docs/CONFIG.md (a test checks the documentation mentions every key).
//
// Keys are "section.name". A key's environment variable is NERVE_<SECTION>_<NAME> in upper case.
//
// Thread safety: the tables are immutable, built on first use (thread-safe static initialisation).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "nerve/config.hpp"

#include "config/value_type.hpp"

namespace nerve::config {

struct KeySpec {
  std::string_view name;          // "scheduler.policy"
  ValueType type;                 // how values are parsed; also the allowed values/range
  std::string_view default_text;  // parsed like any other value when a load starts
  std::string_view summary;       // one line for nerve-info and messages
  void (*apply)(Config& config, const ParsedValue& value);
};

struct PlannedKey {
  std::string_view name;
  std::string_view arrives_with;  // completes "it arrives with ...": the feature that brings the key
};

const std::vector<KeySpec>& key_table();
const std::vector<PlannedKey>& planned_key_table();

// find_key() gives the implemented key `name`, or null.
const KeySpec* find_key(std::string_view name);
const PlannedKey* find_planned_key(std::string_view name);

// unavailable_key_message() explains why `name` is not an implemented key: it is planned ("... is not
// available in this build yet: it arrives with ...") or unknown (with a did-you-mean suggestion).
std::string unavailable_key_message(std::string_view name);

// resolve_key() gives the implemented key `name`; for a planned or unknown key it throws ConfigError
// (origin-prefixed) saying the key is not available yet, or is unknown with a did-you-mean.
const KeySpec& resolve_key(std::string_view name, const ConfigOrigin& origin);

// is_section() says whether `name` is the section of a known or planned key.
bool is_section(std::string_view name);

// throw_unknown_section() reports a YAML section that is not one of is_section()'s.
[[noreturn]] void throw_unknown_section(std::string_view name, const ConfigOrigin& origin);

// section_names() lists the sections of known and planned keys, each once, in table order.
std::vector<std::string> section_names();

// all_key_names() lists known then planned keys: the candidates for did-you-mean suggestions.
std::vector<std::string> all_key_names();

// environment_variable_name("task_queue.type") is "NERVE_TASK_QUEUE_TYPE".
std::string environment_variable_name(std::string_view key);

}  // namespace nerve::config
