// option_value.hpp — the rule every nerve tool applies to an option's value: one of the tool's own
// options is a usage error, not a value. A parser gives an option the next argument whatever it is,
// so `--json --help` wrote a report to a file named "--help" and ran the whole suite, and nerve-run's
// `--hostfile --dry-run` wrote a hostfile named "--dry-run" and launched mpirun for real. A file so
// named is still reachable as `./--help`. cli_usage.hpp applies it to the CLI11 tools; nerve-run,
// which has its own parser, calls it directly.
#pragma once

#include <string>

namespace nerve::tools {

// option_as_value() is the error for `value`, given to an option that needs `what` ("a path"), when
// it is one of the tool's options (`is_option(name)` says which names are; `--name=...` counts as
// `--name`): "needs a path; got the option --help". It is "" for any other value, "-" and "-5"
// included unless the tool has such an option.
template <class IsOption>
std::string option_as_value(const std::string& value, const std::string& what, const IsOption& is_option) {
  if (!value.starts_with('-')) return {};
  const std::string name = value.substr(0, value.find('='));
  if (!is_option(name)) return {};
  return "needs " + what + "; got the option " + name;
}

}  // namespace nerve::tools
