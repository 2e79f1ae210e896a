// Randomized robustness: garbage values, variable names and YAML documents either load or give a
// ConfigError — never another exception, a crash or a sanitizer report. Deterministic seeds, so a
// failure reproduces; the failing input is printed.
#include <random>

#include <gtest/gtest.h>

#include "nerve/error.hpp"

#include "config/diagnostics.hpp"
#include "config/key_registry.hpp"
#include "config/sources.hpp"
#include "config/value_type.hpp"
#include "config_test_support.hpp"

namespace nerve {
namespace {

// Pieces that exercise every parser's edges: digits, signs, units, enum words, separators, control
// bytes, UTF-8 and an embedded NUL.
const std::vector<std::string> pieces{
    "0",    "1",   "9",    "-",    "+",        "4096",      "99999999999999999999",
    "ns",   "us",  "ms",   "s",    "min",      "auto",      "eager",
    "true", "off", "heft", ".",    ":",        " ",         "\t",
    "\n",   "[",   "]",    "{",    "}",        "#",         "'",
    "\"",   "\\",  "\x01", "\x7f", "\xc3\xa9", "\xff",      std::string(1, '\0'),
    "/",    "~",   "&a",   "*a",   "!!str",    "scheduler", "policy",
    "_"};

std::string garbage(std::mt19937& random, std::size_t max_pieces) {
  std::uniform_int_distribution<std::size_t> count(0, max_pieces);
  std::uniform_int_distribution<std::size_t> pick(0, pieces.size() - 1);
  std::string text;
  for (std::size_t n = count(random); n > 0; --n) text += pieces[pick(random)];
  return text;
}

TEST(ConfigRobustness, GarbageValuesThrowConfigErrorOrParse) {
  std::mt19937 random(20240611);
  for (int round = 0; round < 1500; ++round) {
    for (const config::KeySpec& spec : config::key_table()) {
      const std::string text = garbage(random, 6);
      try {
        const config::ParsedValue value =
            config::parse_value(spec.name, spec.type, config::RawValue::scalar(text), config::api_origin());
        // An accepted value's normalized text must itself be accepted, with the same normalization.
        const config::ParsedValue again = config::parse_value(
            spec.name, spec.type, config::RawValue::scalar(value.text), config::api_origin());
        EXPECT_EQ(again.text, value.text) << spec.name << " <- " << ::testing::PrintToString(text);
      } catch (const ConfigError& error) {
        EXPECT_EQ(error.key(), spec.name);
        EXPECT_EQ(std::string(error.what()).find('\n'), std::string::npos)
            << "multi-line message for " << ::testing::PrintToString(text);
      } catch (const std::exception& error) {
        ADD_FAILURE() << spec.name << " <- " << ::testing::PrintToString(text) << ": " << error.what();
      }
    }
  }
}

TEST(ConfigRobustness, GarbageEnvironmentNamesAreIgnoredOrRejected) {
  std::mt19937 random(7);
  const std::string alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ_0123456789a.";
  std::uniform_int_distribution<std::size_t> length(0, 30);
  std::uniform_int_distribution<std::size_t> letter(0, alphabet.size() - 1);
  const std::vector<std::string> prefixes{"NERVE_", "NERVE_SCHEDULER_", "NERVE_TASK_QUEUE_", "NERVE_GPU_", "",
                                          "NERV"};
  for (int round = 0; round < 1000; ++round) {
    std::string name = prefixes[round % prefixes.size()];
    for (std::size_t n = length(random); n > 0; --n) name += alphabet[letter(random)];
    try {
      config::read_environment({{name, garbage(random, 3)}});
    } catch (const ConfigError& error) {
      EXPECT_NE(std::string(error.what()).find(name), std::string::npos) << error.what();
    } catch (const std::exception& error) {
      ADD_FAILURE() << ::testing::PrintToString(name) << ": " << error.what();
    }
  }
}

TEST(ConfigRobustness, GarbageYamlDocumentsThrowConfigErrorOrLoad) {
  std::mt19937 random(99);
  testing::TempDir dir;
  const std::vector<std::string> shapes{
      "scheduler:\n  policy: ", "scheduler.spin_us: ", "parallel:\n  ", "", "task_queue: ", "- ",
      "gpu:\n  devices: "};
  for (int round = 0; round < 400; ++round) {
    const std::string text = shapes[round % shapes.size()] + garbage(random, 8) + "\n" + garbage(random, 4);
    const auto file = dir.write("fuzz.yaml", text);
    try {
      Config::load(testing::hermetic().config_file(file));
    } catch (const ConfigError&) {
    } catch (const std::exception& error) {
      ADD_FAILURE() << ::testing::PrintToString(text) << ": " << error.what();
    }
  }
}

}  // namespace
}  // namespace nerve
