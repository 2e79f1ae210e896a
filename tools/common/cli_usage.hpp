// cli_usage.hpp — how nerve's CLI11 tools (nerve-info, openclaw-benchmark) end on a command line
// that did not parse, or that asked for --help or --version.
//
// The rule, shared with nerve-run's own parser: --help and --version answer (exit 0) only when
// nothing else on the line is wrong; an unknown option, a stray argument, or an option's value that
// is missing or malformed is a usage error (exit 2) with or without them, wherever they stand.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

namespace nerve::tools {

inline constexpr int exit_usage = 2;  // a bad command line (or configuration)

// parse_error_status() prints what `error`, thrown by app.parse(argc, argv), calls for and returns
// the exit status: 0 after printing the help or version text when the rest of the line parses, else
// exit_usage after printing the usage error. CLI11 answers --help and --version before it looks for
// unexpected arguments, so the line is parsed again without them to find a mistake they would hide.
inline int parse_error_status(CLI::App& app, const CLI::ParseError& error, int argc, char** argv) {
  if (error.get_exit_code() == 0) {
    const auto answers = [&options = std::as_const(app)](const std::string& argument) {
      if (!argument.starts_with('-')) return false;
      const std::string name = argument.substr(0, argument.find('='));
      for (const CLI::Option* option :
           {options.get_help_ptr(), options.get_help_all_ptr(), options.get_version_ptr()})
        if (option != nullptr && option->check_name(name)) return true;
      return false;
    };
    std::vector<std::string> rest;  // CLI11 takes a vector of arguments last first
    for (int i = argc - 1; i > 0; --i)
      if (!answers(argv[i])) rest.emplace_back(argv[i]);
    app.clear();
    try {
      app.parse(rest);
    } catch (const CLI::ParseError& mistake) {
      if (mistake.get_exit_code() != 0) {
        app.exit(mistake);
        return exit_usage;
      }
    }
  }
  return app.exit(error) == 0 ? 0 : exit_usage;  // help and version to stdout, a usage error to stderr
}

}  // namespace nerve::tools
