// cli_usage.hpp — how nerve's CLI11 tools (nerve-info, openclaw-benchmark) read --help and --version,
// and end on a command line that did not parse.
//
// The rule, shared with nerve-run's own parser: --help and --version answer (exit 0) only when
// nothing else on the line is wrong. An unknown option, a stray argument, an option's value that is
// missing or malformed, and every check the tool makes of the line after parsing it (an option that
// needs another, a file an option names that cannot be read or written, the configuration it names)
// is a usage error (exit 2) with or without them, wherever they stand. CLI11's own --help and
// --version answer as soon as they are parsed, before the tool's checks; so they are ordinary flags
// here, and each tool answers them where it would start its work, after those checks.
#pragma once

#include <cstdio>
#include <string>
#include <utility>

#include <CLI/CLI.hpp>

#include "common/option_value.hpp"
#include "common/standard_output.hpp"

namespace nerve::tools {

inline constexpr int exit_usage = 2;  // a bad command line (or configuration)

// add_help_flag() replaces CLI11's -h/--help, which answers before the tool's checks, with an
// ordinary flag that sets `help`; the tool answers it with answer() after them.
inline void add_help_flag(CLI::App& app, bool& help) {
  app.set_help_flag();
  app.add_flag("-h,--help", help, "Print this help message and exit");
}

// add_version_flag() adds --version the same way (CLI11's set_version_flag() answers at once too).
inline void add_version_flag(CLI::App& app, bool& version) {
  app.add_flag("--version", version, "Display program version information and exit");
}

// answer() prints `text` (the help, app.help(), or the version) on stdout and returns the exit
// status: 0, or 1 when it could not be written (a closed pipe), with a note on stderr.
inline int answer(const char* tool, const std::string& text) {
  std::fputs(text.c_str(), stdout);
  return stdout_lost(tool, "the text on it is incomplete") ? 1 : 0;
}

// usage_error() prints the usage error `error`, thrown by app.parse(), on stderr with CLI11's hint
// (which it gives only with its own help flag), and returns exit_usage. No ParseError answers --help
// or --version any more: they are ordinary flags.
inline int usage_error(CLI::App& app, const CLI::ParseError& error) {
  app.exit(error);
  std::fputs("Run with --help for more information.\n", stderr);
  return exit_usage;
}

// not_an_option() refuses, as an option's value, one of `app`'s own options (option_value.hpp).
// `what` names what the option needs ("a path"). Add it to an option first, before the checks of
// its value, so that it is the error reported ("--threads: needs a number; got the option --quick",
// not "'--quick' is not a whole number").
inline CLI::Validator not_an_option(const CLI::App& app, std::string what = "a value") {
  return CLI::Validator(
      [&app, what = std::move(what)](std::string& value) -> std::string {
        return option_as_value(value, what, [&app](const std::string& name) {
          return app.get_option_no_throw(name) != nullptr;
        });
      },
      "");
}

}  // namespace nerve::tools
