#include "config/yaml_syntax_error.hpp"

#include <algorithm>
#include <cstring>
#include <optional>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#if __has_include(<yaml-cpp/depthguard.h>)  // yaml-cpp 0.7 and later bound the nesting depth
#include <yaml-cpp/depthguard.h>
#define NERVE_YAML_HAS_DEPTH_GUARD 1
#endif

#include "config/diagnostics.hpp"

namespace nerve::config {
namespace {

// last_line() is the 1-based number of the file's last line (1 for an empty file).
int last_line(std::string_view text) {
  int lines = static_cast<int>(std::count(text.begin(), text.end(), '\n'));
  if (text.empty() || text.back() != '\n') ++lines;
  return lines;
}

// FlowOpening is a `[` or `{` that starts a flow collection, with its 1-based line and column.
struct FlowOpening {
  char bracket;
  int line;
  int column;
};

// FlowScanner finds the flow collections still open at a point of the text, by a light reading of
// YAML's rules rather than a parser: comments, quoted scalars and block scalars (`|`, `>`: the lines
// below indented more than the line that opens them) are skipped; inside a flow collection every
// bracket is an indicator; outside, `[` and `{` open one only where a node may start (at the start of
// a line, after `- `, `? `, `: ` or a node's `&anchor` / `!tag`), since a plain scalar such as `a[0]`
// may hold them. It is not a parser and can misread unusual text, so the caller trusts an opening
// only when it is the kind of collection the parser says is unclosed and lies before where the
// parser gave up; otherwise the parser's own line is reported.
class FlowScanner {
 public:
  explicit FlowScanner(std::string_view text) : text_(text) {}

  // innermost_open() is the innermost flow collection open at byte `end`, or none.
  std::optional<FlowOpening> innermost_open(std::size_t end) {
    end = std::min(end, text_.size());
    for (std::size_t i = 0; i < end; ++i) {
      const char c = text_[i];
      if (c == '\n') {
        ++line_;
        line_start_ = i + 1;
      } else if (c == '#' && (i == line_start_ || is_blank(text_[i - 1]))) {
        i = std::min(text_.find('\n', i), end) - 1;  // the comment runs to the end of the line
      } else if ((c == '"' || c == '\'') && node_may_start(i)) {
        if (!skip_quoted(i, end)) return std::nullopt;  // an unclosed quote: another error
      } else if ((c == '|' || c == '>') && open_.empty() && node_may_start(i)) {
        skip_block_scalar(i, end);
      } else if ((c == '[' || c == '{') && (!open_.empty() || node_may_start(i))) {
        open_.push_back({c, line_, static_cast<int>(i - line_start_) + 1});
      } else if ((c == ']' || c == '}') && !open_.empty()) {
        open_.pop_back();
      }
    }
    if (open_.empty()) return std::nullopt;
    return open_.back();
  }

 private:
  static bool is_blank(char c) { return c == ' ' || c == '\t'; }

  // node_may_start() says whether a node may begin at byte `i`.
  bool node_may_start(std::size_t i) const {
    std::size_t j = i;
    while (true) {
      const std::size_t word_end = j;
      while (j > 0 && (is_blank(text_[j - 1]) || (!open_.empty() && text_[j - 1] == '\n'))) --j;
      if (j == 0 || text_[j - 1] == '\n') return true;
      const char before = text_[j - 1];
      if (!open_.empty() && (before == ',' || before == '[' || before == '{')) return true;
      // `:`, `-` and `?` are indicators only when a blank follows them (`a:[b` is one plain scalar).
      if ((before == ':' || before == '-' || before == '?') && j < word_end) {
        return j == 1 || is_blank(text_[j - 2]) || text_[j - 2] == '\n' || before == ':';
      }
      // Step back over an anchor or a tag: the node starts after it.
      std::size_t word_start = j;
      while (word_start > 0 && !is_blank(text_[word_start - 1]) && text_[word_start - 1] != '\n')
        --word_start;
      if (word_start == j || (text_[word_start] != '&' && text_[word_start] != '!')) return false;
      j = word_start;
    }
  }

  // indentation() is the number of spaces that start the line beginning at byte `start`.
  std::size_t indentation(std::size_t start) const {
    const std::size_t first = text_.find_first_not_of(' ', start);
    return (first == std::string_view::npos ? text_.size() : first) - start;
  }

  // skip_block_scalar() moves `i` to the end of the block scalar whose indicator is at `i`: the rest
  // of its line and the lines after it that are blank or indented more than that line.
  void skip_block_scalar(std::size_t& i, std::size_t end) {
    const std::size_t parent_indent = indentation(line_start_);
    std::size_t next = text_.find('\n', i);
    while (next != std::string_view::npos && next + 1 < end) {
      const std::size_t start = next + 1;
      const std::size_t line_end = std::min(text_.find('\n', start), text_.size());
      const bool blank = text_.find_first_not_of(" \t\r", start) >= line_end;
      if (!blank && indentation(start) <= parent_indent) break;
      ++line_;
      line_start_ = start;
      next = line_end < text_.size() ? line_end : std::string_view::npos;
    }
    // Stop before the newline that ends the scalar's last line: the main loop counts it.
    i = (next == std::string_view::npos ? std::min(text_.size(), end) : std::min(next, end)) - 1;
  }

  // skip_quoted() moves `i` to the quote that closes the scalar opening at `i`; false when there is none
  // before `end`.
  bool skip_quoted(std::size_t& i, std::size_t end) {
    const char quote = text_[i];
    for (std::size_t k = i + 1; k < end; ++k) {
      if (text_[k] == '\n') {
        ++line_;
        line_start_ = k + 1;
      } else if (quote == '"' && text_[k] == '\\') {
        ++k;  // an escape: the next character is never the closing quote
      } else if (text_[k] == quote) {
        if (quote == '\'' && k + 1 < end && text_[k + 1] == '\'') {
          ++k;  // '' is a quote inside a single-quoted scalar
        } else {
          i = k;
          return true;
        }
      }
    }
    return false;
  }

  std::string_view text_;
  std::vector<FlowOpening> open_;
  int line_ = 1;
  std::size_t line_start_ = 0;
};

}  // namespace

void throw_yaml_syntax_error(const YAML::Exception& error, const std::string& text, const std::string& file) {
  const int last = last_line(text);
  // yaml-cpp counts lines from 0, and gives the line after the last one when the file ends too soon.
  const int parser_line = error.mark.is_null() ? 0 : std::min(error.mark.line + 1, last);
  const bool at_end = !error.mark.is_null() && error.mark.line + 1 > last;
  const std::string gave_up = at_end ? "at the end of the file" : fmt::format("at line {}", parser_line);

#ifdef NERVE_YAML_HAS_DEPTH_GUARD
  if (const auto* deep = dynamic_cast<const YAML::DeepRecursion*>(&error)) {
    // yaml-cpp's message for this is "bad file".
    throw_config_error(file_origin(file, parser_line), "",
                       fmt::format("YAML syntax error: sequences and maps are nested too deeply (the "
                                   "parser stops at {} levels; a configuration needs two: a section "
                                   "and its keys)",
                                   deep->depth()));
  }
#endif
  const bool sequence = error.msg == YAML::ErrorMsg::END_OF_SEQ_FLOW;
  if (sequence || error.msg == YAML::ErrorMsg::END_OF_MAP_FLOW) {
    const std::size_t end = error.mark.pos >= 0 ? static_cast<std::size_t>(error.mark.pos) : text.size();
    const auto opening = FlowScanner(text).innermost_open(end);
    if (opening && opening->bracket == (sequence ? '[' : '{') && opening->line <= std::max(parser_line, 1)) {
      throw_config_error(
          file_origin(file, opening->line), "",
          fmt::format("YAML syntax error: the flow {} that opens here with '{}' (at column {}) "
                      "is not closed (the parser gave up {}: {})",
                      sequence ? "sequence" : "map", opening->bracket, opening->column, gave_up,
                      printable(error.msg)));
    }
  }
  // A collection closed by the other bracket (`[1, 2` then `}`): the parser says "illegal flow end"
  // where the `}` stands; the mistake is the `[` left open.
  if (error.msg == YAML::ErrorMsg::FLOW_END && error.mark.pos >= 0 &&
      static_cast<std::size_t>(error.mark.pos) < text.size()) {
    const auto at = static_cast<std::size_t>(error.mark.pos);
    const char closing = text[at];
    const auto opening = FlowScanner(text).innermost_open(at);
    if (opening && (closing == ']' || closing == '}') && closing != (opening->bracket == '[' ? ']' : '}')) {
      throw_config_error(
          file_origin(file, opening->line), "",
          fmt::format("YAML syntax error: the flow {} that opens here with '{}' (at column {}) "
                      "is not closed: '{}' at line {} closes it",
                      opening->bracket == '[' ? "sequence" : "map", opening->bracket, opening->column,
                      closing, parser_line));
    }
  }
  throw_config_error(file_origin(file, parser_line), "",
                     fmt::format("YAML syntax error: {}", printable(error.msg)));
}

}  // namespace nerve::config
