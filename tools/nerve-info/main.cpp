// nerve-info: what nerve sees of this machine and how it would run on it — topology, workers,
// effective configuration (with where each value came from) and devices. docs/NERVE_INFO.md.
//
// Exit status: 0 on success; 2 when the command line or the configuration is wrong (the message names
// the key, and the file and line or the environment variable); 1 for any other error, the output lost
// (a closed or full standard output: a note on stderr says so) included.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "nerve/config.hpp"
#include "nerve/error.hpp"
#include "nerve/topology.hpp"

#include "common/cli_usage.hpp"
#include "common/standard_output.hpp"
#include "report.hpp"
#include "util/json_text.hpp"

#ifndef NERVE_VERSION_STRING
#error "NERVE_VERSION_STRING must be defined by the build (the CMake project version)"
#endif

namespace {

using nerve::tools::exit_usage;  // bad command line or configuration
constexpr int exit_failure = 1;

struct Options {
  bool json = false;
  std::string config_file;
  std::vector<std::string> settings;  // "key=value"
  std::string synthetic;
  bool synthetic_given = false;  // --synthetic "" too: topology.synthetic set to nothing, as --set does
  bool no_environment = false;
  bool calibrate = false;
  bool help = false, version = false;  // answered after the checks of the line (cli_usage.hpp)
};

// make_settings() turns the options into nerve::Settings. --synthetic comes first so that an explicit
// --set topology.synthetic=... wins (Settings keeps the last value of a key).
nerve::Settings make_settings(const Options& options) {
  nerve::Settings settings;
  if (!options.config_file.empty()) settings.config_file(options.config_file, "--config");
  if (options.no_environment) settings.use_environment(false);
  if (options.synthetic_given) settings.set("topology.synthetic", options.synthetic);
  for (const std::string& setting : options.settings) {
    // A key of blanks only (" =x") is no key, as "=x" is: Settings::set() drops the blanks around a
    // key, and the error was "unknown configuration key ''".
    const std::size_t equals = setting.find('=');
    if (equals == std::string::npos || setting.find_first_not_of(" \t\r\n") >= equals)
      throw CLI::ValidationError("--set", "expected key=value, got '" + setting + "'");
    settings.set(setting.substr(0, equals), setting.substr(equals + 1));
  }
  return settings;
}

// check_configuration() throws as the report would for a configuration that does not load or a
// topology.synthetic / topology.xml that hwloc refuses (ConfigError), without a context. The real
// machine (neither key set) is not discovered: the line cannot make it wrong.
void check_configuration(const nerve::Settings& settings) {
  const nerve::Config config = nerve::Config::load(settings);
  if (!config.topology.synthetic.empty() || !config.topology.xml.empty())
    (void)nerve::Topology::discover(config);
}

void print_text(const nerve::info::Report& report) {
  std::string out = "nerve " + report.version + "\n\n";
  out += nerve::info::print_machine(report.topology) + "\n";
  out += nerve::info::print_workers(report) + "\n";
  out += nerve::info::print_config(report.config) + "\n";
  out += nerve::info::print_host_memory(report.host_memory) + "\n";
  out += nerve::info::print_devices(report.devices);
  for (const std::string& note : report.backend_notes) out += "  " + nerve::info::printable(note) + "\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
}

}  // namespace

int main(int argc, char** argv) {
  nerve::tools::ignore_sigpipe();  // a reader that quits first: exit 1 with a note, not killed silently
  CLI::App app{
      "nerve-info: the machine, workers, configuration and devices as nerve sees them.\n"
      "Creates a nerve context with the given configuration and reports what it did."};
  app.name("nerve-info");
  Options options;
  nerve::tools::add_help_flag(app, options.help);
  app.add_flag("--json", options.json, "print everything as one JSON document (docs/NERVE_INFO.md)");
  app.add_option("--config", options.config_file,
                 "YAML configuration file (takes precedence over NERVE_CONFIG)")
      ->check(nerve::tools::not_an_option(app, "a path"))  // `--config --json` took "--json" as the file
      ->check(CLI::Validator(
          [](const std::string& path) {
            // Empty would fall back to NERVE_CONFIG: not what `--config "$UNSET"` meant.
            return path.empty() ? std::string("needs a file name (it was given an empty one)")
                                : std::string();
          },
          "FILE"));
  app.add_option("--set", options.settings, "set a configuration key, as the API does (repeatable)")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false)
      ->check(nerve::tools::not_an_option(app, "a KEY=VALUE"));
  CLI::Option* synthetic =
      app.add_option("--synthetic", options.synthetic,
                     "use an hwloc synthetic topology, e.g. \"pack:2 numa:2 core:4 pu:1\" "
                     "(shorthand for --set topology.synthetic=...)")
          ->check(nerve::tools::not_an_option(app, "a description"));
  app.add_flag("--no-env", options.no_environment, "ignore the NERVE_* environment (NERVE_CONFIG included)");
  app.add_flag("--calibrate", options.calibrate,
               "measure the bus (latency, bandwidth) between every pair of memory nodes again, save it to "
               "perf.model_dir/bus.json for scheduler.policy heft, and print the matrix");
  nerve::tools::add_version_flag(app, options.version);

  try {
    app.parse(argc, argv);
    options.synthetic_given = synthetic->count() > 0;
    if (options.help || options.version) {
      // After every check of the line (cli_usage.hpp): the --set values, the configuration loaded
      // as the report loads it (the --config file, the NERVE_* variables unless --no-env) — `--help
      // --set no_equals` is the usage error it is without --help — and the machine it describes:
      // hwloc alone reads topology.synthetic and topology.xml, so `--help --synthetic bogus:3`
      // answered where the report exits 2. What needs a context (an accelerator gpu.devices names,
      // a plugin, a NUMA node memory.numa_policy names, the files perf.* writes) is not tried.
      check_configuration(make_settings(options));
      return nerve::tools::answer(
          "nerve-info", options.help ? app.help() : std::string("nerve-info ") + NERVE_VERSION_STRING + "\n");
    }
    if (options.calibrate) {
      std::string save_error;
      const std::string out = nerve::info::calibrate_bus(make_settings(options), options.json, save_error);
      std::fwrite(out.data(), 1, out.size(), stdout);
      const bool lost = nerve::tools::stdout_lost("nerve-info", "the matrix on it is incomplete");
      if (!save_error.empty()) {  // measured, but heft will not find it: that is a failure
        std::cerr << "nerve-info: error: the bus model was measured but not saved: " << save_error << '\n';
        return exit_failure;
      }
      return lost ? exit_failure : 0;
    }
    const nerve::info::Report report = nerve::info::inspect(make_settings(options), NERVE_VERSION_STRING);
    if (options.json) {
      std::cout << nerve::detail::json_text(nerve::info::report_to_json(report), 2) << '\n';
    } else {
      print_text(report);
    }
    // Lost (`> /dev/full`, a closed stdout), the report exited 1 without a word.
    return nerve::tools::stdout_lost("nerve-info", "the report on it is incomplete") ? exit_failure : 0;
  } catch (const CLI::ParseError& error) {
    return nerve::tools::usage_error(app, error);  // exit 2, --help or --version or not
  } catch (const nerve::ConfigError& error) {
    std::cerr << "nerve-info: " << error.what() << '\n';
    return exit_usage;
  } catch (const nerve::Error& error) {
    // Configuration errors that are not ConfigError (a plugin that does not load) are usage errors too.
    std::cerr << "nerve-info: " << (error.code() == nerve::ErrorCode::invalid_config ? "" : "error: ")
              << error.what() << '\n';
    return error.code() == nerve::ErrorCode::invalid_config ? exit_usage : exit_failure;
  } catch (const std::exception& error) {
    std::cerr << "nerve-info: error: " << error.what() << '\n';
    return exit_failure;
  }
}
