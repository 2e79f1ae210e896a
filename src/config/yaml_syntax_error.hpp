// yaml_syntax_error.hpp — how a YAML syntax error in the configuration file is reported.
//
// yaml-cpp reports where its parser gave up, which for some errors is not where the mistake is: an
// unclosed flow sequence (`policy: [eager`) fails lines later, or on the line after the last one, and
// a document nested too deeply says only "bad file". throw_yaml_syntax_error() words these so that the
// message names a line of the file and says what is wrong.
//
// Thread safety: a pure function of its arguments.
#pragma once

#include <string>

#include <yaml-cpp/exceptions.h>

namespace nerve::config {

// throw_yaml_syntax_error() throws the ConfigError for `error`, raised while parsing `text` (the
// contents of `file`): "<file>:<line>: YAML syntax error: ...". The line is never past the file's last
// line. For an unclosed flow sequence or map it is the line where the `[` or `{` opened, when a scan
// of the text (skipping comments and quoted scalars) finds that bracket still open where the parser
// gave up; otherwise the parser's line.
[[noreturn]] void throw_yaml_syntax_error(const YAML::Exception& error, const std::string& text,
                                          const std::string& file);

}  // namespace nerve::config
