// sources.hpp — reading configuration assignments from a YAML file and from the environment.
//
// A source turns its input into Assignments (key, raw value, origin) in a stable order and reports
// problems of its own format (unreadable file, YAML syntax, a section that is not a map, duplicate
// keys, a NERVE_<SECTION>_* variable that names no key). Whether a key exists and whether its value
// is valid is decided afterwards, in one place, by the loader (config.cpp), so that every source is
// checked by the same rules.
//
// Thread safety: pure functions of their arguments (and, for read_config_file, of the file).
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "nerve/config.hpp"

#include "config/value_type.hpp"

namespace nerve::config {

struct Assignment {
  std::string key;
  RawValue value;
  ConfigOrigin origin;
};

// AssignmentSink receives a source's assignments one at a time; an exception it throws ends the reading.
using AssignmentSink = std::function<void(const Assignment&)>;

// read_config_file() reads the YAML file `path` and hands its assignments to `take` in file order. It
// accepts sections (`scheduler:` followed by an indented map of keys) and dotted keys at the top level
// (`scheduler.policy: eager`); an empty file is an empty configuration. `named_by` says who chose the
// file ("Settings::config_file", "NERVE_CONFIG") for the message when it cannot be read. Origins carry
// the file as given and the key's 1-based line. Time is linear in the file's size, aliases included:
// nothing walks the document deeper than a section's keys and a value's items, so an alias
// (`*name`) is never expanded recursively.
void read_config_file(const std::filesystem::path& path, std::string_view named_by,
                      const AssignmentSink& take);

// read_environment() picks the configuration variables out of `environment`: NERVE_<SECTION>_<KEY>
// for a known or planned key. A variable NERVE_<SECTION>_<other> with a known section is an error
// (with a did-you-mean naming the variable); every other variable is ignored, including NERVE_CONFIG,
// NERVE_LOG_LEVEL and other NERVE_* variables that are not configuration keys.
std::vector<Assignment> read_environment(const std::map<std::string, std::string>& environment);

}  // namespace nerve::config
