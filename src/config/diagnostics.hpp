// diagnostics.hpp — how the configuration module words and throws its errors.
//
// Every problem becomes one nerve::ConfigError whose message starts with where the value came from
// ("config.yaml:7", "env NERVE_SCHEDULER_POLICY", "api"), so that it can be shown to a user as it is:
//   config.yaml:7: scheduler.policy: 'eagr' is not one of eager, locality_aware_stealing, heft (did you ...)
#pragma once

#include <string>
#include <string_view>

#include "nerve/config.hpp"
#include "nerve/error.hpp"

namespace nerve::config {

// throw_config_error() throws ConfigError("<origin>: <message>") with key(), file() and line() taken
// from `key` and `origin`.
[[noreturn]] void throw_config_error(const ConfigOrigin& origin, std::string_view key,
                                     std::string_view message);

// rethrow_with_origin() is for the modules that use a loaded Config (topology: the hwloc synthetic
// description or XML file; the host allocator: a jemalloc/tcmalloc that does not load) and find a
// value unusable only then: their ConfigError names the key but not where its value came from. It
// rethrows `error` as throw_config_error() would have, with the origin `config` records for the key
// ("synbad.yaml:4: topology.synthetic: ...", file() and line() set); an error that already has a
// file or line, or names no key `config` knows, is rethrown as it is.
[[noreturn]] void rethrow_with_origin(const Config& config, const ConfigError& error);

// Origins of each kind. (Named constructors rather than designated initializers: GCC 12 warns about
// every member a designated initializer leaves out.)
ConfigOrigin file_origin(std::string file, int line);
ConfigOrigin environment_origin(std::string variable);
ConfigOrigin api_origin();

// quote() renders a user-supplied value for a message: in single quotes, non-printable bytes escaped
// as \xNN and long values shortened, so that garbage input still gives a readable one-line message.
std::string quote(std::string_view value);

// printable() is `text` with its control bytes escaped as \xNN, as quote() writes them: for text that
// is not a value, such as yaml-cpp's messages, which end in the offending byte as it is
// ("unknown escape character: " and a line feed).
std::string printable(std::string_view text);

}  // namespace nerve::config
