// yaml_source.cpp — read_config_file(): the YAML configuration file.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <optional>
#include <sstream>
#include <string_view>
#include <system_error>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include "config/diagnostics.hpp"
#include "config/key_registry.hpp"
#include "config/sources.hpp"
#include "config/yaml_syntax_error.hpp"
#include "util/regular_file.hpp"

namespace nerve::config {
namespace {

std::string_view shape_name(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Scalar: return "a scalar";
    case YAML::NodeType::Sequence: return "a sequence";
    case YAML::NodeType::Map: return "a map";
    default: return "nothing";
  }
}

// explicit_null(): a scalar tagged `!!null` (yaml-cpp keeps it a scalar of empty text), which YAML
// reads as no value, as `~` or nothing.
bool explicit_null(const YAML::Node& node) {
  return node.IsScalar() && node.Tag() == "tag:yaml.org,2002:null";
}

RawValue raw_value(const YAML::Node& node) {
  if (explicit_null(node)) return RawValue::null();
  switch (node.Type()) {
    case YAML::NodeType::Scalar: return RawValue::scalar(node.Scalar());
    case YAML::NodeType::Sequence: {
      std::vector<std::string> items;
      std::vector<RawValue::Shape> shapes;
      std::vector<std::vector<RawValue::Field>> fields;  // of the map items, for `records` keys
      for (const YAML::Node& item : node) {
        items.push_back(item.IsScalar() ? item.Scalar() : std::string());
        shapes.push_back(item.IsSequence()                         ? RawValue::Shape::sequence
                         : item.IsMap()                            ? RawValue::Shape::map
                         : item.IsScalar() && !explicit_null(item) ? RawValue::Shape::scalar
                                                                   : RawValue::Shape::null);
        std::vector<RawValue::Field>& own = fields.emplace_back();
        if (!item.IsMap()) continue;
        for (const auto& field : item) {
          // A field without a value (`device:`) is empty text; a sequence or map there is no text.
          own.emplace_back(field.first.IsScalar() ? field.first.Scalar() : std::string(),
                           field.second.IsScalar() ? std::optional<std::string>(field.second.Scalar())
                           : field.second.IsNull() ? std::optional<std::string>(std::string())
                                                   : std::nullopt);
        }
      }
      return RawValue::sequence(std::move(items), std::move(shapes), std::move(fields));
    }
    case YAML::NodeType::Map: return RawValue::map();
    default: return RawValue::null();
  }
}

// is_null_device() says whether `status` is /dev/null's: the one non-regular file accepted as a
// configuration file (an empty one), as `NERVE_CONFIG=/dev/null` is a natural way to say "none".
bool is_null_device(const struct stat& status) {
  struct stat null_device {};
  return S_ISCHR(status.st_mode) && ::stat("/dev/null", &null_device) == 0 && S_ISCHR(null_device.st_mode) &&
         status.st_rdev == null_device.st_rdev;
}

// check_regular() rejects anything read_whole_file() must not read: a directory, and a FIFO, socket
// or device, where reading blocks until a writer comes (for ever, for a FIFO nobody writes) or never
// ends (/dev/zero). The documentation's rule for file paths, as for topology.xml.
void check_regular(const struct stat& status, const ConfigOrigin& origin, std::string_view named_by) {
  if (S_ISREG(status.st_mode) || is_null_device(status)) return;
  if (S_ISDIR(status.st_mode)) {
    throw_config_error(origin, "",
                       fmt::format("the configuration file (named by {}) is a directory", named_by));
  }
  throw_config_error(origin, "",
                     fmt::format("the configuration file (named by {}) is {}, not a regular file: name "
                                 "a YAML file",
                                 named_by, detail::file_kind(status.st_mode)));
}

// OpenFile closes its descriptor when it goes out of scope.
struct OpenFile {
  explicit OpenFile(int descriptor) : fd(descriptor) {}
  OpenFile(const OpenFile&) = delete;
  OpenFile& operator=(const OpenFile&) = delete;
  ~OpenFile() {
    if (fd >= 0) ::close(fd);
  }
  const int fd;
};

std::string read_whole_file(const std::filesystem::path& path, std::string_view named_by) {
  const ConfigOrigin origin = file_origin(path.string(), 0);
  if (path.empty()) {  // the message would name no file: say what is wrong instead
    throw_config_error(origin, "",
                       fmt::format("the configuration file named by {} is an empty path: name a YAML "
                                   "file, or leave it unset for none (or for NERVE_CONFIG's)",
                                   named_by));
  }
  const auto cannot_open = [&] {
    throw_config_error(
        origin, "",
        fmt::format("cannot open the configuration file (named by {}): {}", named_by, std::strerror(errno)));
  };
  // The type is checked before opening (opening a FIFO for reading waits for a writer) and again on
  // what was opened, non-blocking, in case the path was replaced in between.
  struct stat status {};
  if (::stat(path.c_str(), &status) != 0) cannot_open();
  check_regular(status, origin, named_by);
  const OpenFile file{::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC)};
  const int fd = file.fd;
  if (fd < 0) cannot_open();
  if (::fstat(fd, &status) != 0) cannot_open();
  check_regular(status, origin, named_by);
  try {
    return detail::read_to_end(fd);
  } catch (const std::system_error& error) {
    throw_config_error(origin, "",
                       fmt::format("cannot read the configuration file (named by {}): {}", named_by,
                                   error.code().message()));
  }
}

// AliasSite: where an alias (`*name`) stands in the text, and where the node it names starts (the
// mark every use of that node carries in the loaded document).
struct AliasSite {
  int pos;
  int line;  // 1-based
  int target;
};

// FileReader walks the document and hands each assignment to `take` as it finds it, remembering the
// line where each key was first set so that a duplicate (YAML forbids them; yaml-cpp keeps both)
// points at both places. Assignments are handed over one by one, in file order, so that the first
// error (a duplicate here, or an unknown key or bad value in `take`) ends the reading: a value that
// is an alias of a large anchored node is not copied for every later key of the file first.
class FileReader {
 public:
  FileReader(std::string file, const AssignmentSink& take, std::vector<AliasSite> aliases)
      : file_(std::move(file)), take_(take), aliases_(std::move(aliases)) {}

  void read(const YAML::Node& document) {
    if (document.IsNull()) return;  // empty file, or only comments
    if (!document.IsMap()) {
      fail(line_of(document), "",
           fmt::format("the top level must be a map of sections or dotted keys, not {}",
                       shape_name(document)));
    }
    int line = 1;
    for (auto it = document.begin(); it != document.end(); ++it) {
      line = place(it->first, line);
      read_top_level(it->first, it->second, line);
    }
  }

 private:
  void read_top_level(const YAML::Node& key, const YAML::Node& value, int line) {
    const std::string name = key_text(key, "", line);
    if (name.find('.') != std::string::npos) return add(name, line, value);
    if (!is_section(name)) {
      // `policy: eager` at the top level is a key without its section; anything else is a section.
      if (!value.IsMap()) return add(name, line, value);
      throw_unknown_section(name, file_origin(file_, line));
    }
    note_first_use(name, line);
    if (value.IsNull()) return;  // an empty section (every key commented out) sets nothing
    if (!value.IsMap()) {
      fail(line, name,
           fmt::format("section '{}' must be a map of keys (e.g. '{}:' then indented 'key: value' "
                       "lines), not {}",
                       name, name, shape_name(value)));
    }
    // A section given as an alias of a map (`scheduler: *common`): its entries stand where the alias
    // does, not where the anchored map was written.
    const std::optional<int> aliased = alias_line(value);
    for (auto it = value.begin(); it != value.end(); ++it) {
      const int key_line = aliased ? *aliased : place(it->first, line);
      // What an alias holds was passed where it was written: its own aliases are not these.
      add(name + "." + key_text(it->first, name, key_line), key_line, it->second, !aliased);
    }
  }

  // The walk goes in document order and keeps `walked_`, the start of the last node of the text it
  // passed. A node starting there or before is an alias (`*name`): the loaded document shares the
  // anchored node, whose mark is the anchor's, under every alias. Such a node is reported where the
  // alias stands (aliases_, from the parser's events).

  // place(): the line of an entry's key; `enclosing` when an alias used as a key cannot be found.
  int place(const YAML::Node& key, int enclosing) {
    if (const std::optional<int> line = alias_line(key)) return *line;
    // An empty key (`~: 5`, `: 5`) has a mark of its own, its line; only a node without one (none
    // was seen in files) falls back on the enclosing line.
    return key.Mark().is_null() ? enclosing : line_of(key);
  }

  // alias_line(): for an alias, the line it stands on (nullopt for a node written here, which the walk
  // then passes: a scalar's start, a collection's entries).
  std::optional<int> alias_line(const YAML::Node& node) {
    if (node.IsNull()) return std::nullopt;  // a null's mark is the next token's: no place of its own
    const int pos = node.Mark().pos;
    if (pos > walked_) {
      if (node.IsScalar()) walked_ = pos;
      return std::nullopt;
    }
    // The next alias of the text naming this node (each alias is met once, in order; one that was not
    // recognised, an alias of a null, is stepped over).
    for (std::size_t i = next_alias_; i < aliases_.size(); ++i) {
      if (aliases_[i].target != pos || aliases_[i].pos <= walked_) continue;
      next_alias_ = i + 1;
      walked_ = aliases_[i].pos;
      return aliases_[i].line;
    }
    return std::nullopt;
  }

  // pass(): the walk passes a value, so that anchors and aliases inside it are where they are.
  void pass(const YAML::Node& value) {
    if (alias_line(value) || value.IsScalar() || value.IsNull()) return;  // an alias's content was passed
    for (auto it = value.begin(); it != value.end(); ++it) {
      if (value.IsMap()) {
        pass(it->first);
        pass(it->second);
      } else {
        pass(*it);
      }
    }
  }

  void add(const std::string& name, int line, const YAML::Node& value, bool written_here = true) {
    note_first_use(name, line);
    take_({name, raw_value(value), file_origin(file_, line)});
    if (written_here) pass(value);
  }

  void note_first_use(const std::string& name, int line) {
    const auto [first, inserted] = first_line_.emplace(name, line);
    if (!inserted) {
      fail(line, name, fmt::format("{}: duplicate key (first set at line {})", name, first->second));
    }
  }

  std::string key_text(const YAML::Node& key, std::string_view section, int line) {
    if (!key.IsScalar()) {
      fail(line, section,
           section.empty()
               ? fmt::format("a key must be a plain word, not {}", shape_name(key))
               : fmt::format("a key of section '{}' must be a plain word, not {}", section, shape_name(key)));
    }
    return key.Scalar();
  }

  static int line_of(const YAML::Node& node) { return node.Mark().line + 1; }  // yaml-cpp counts from 0

  [[noreturn]] void fail(int line, std::string_view key, std::string_view message) const {
    throw_config_error(file_origin(file_, line), key, message);
  }

  std::string file_;
  const AssignmentSink& take_;
  std::map<std::string, int> first_line_;
  const std::vector<AliasSite> aliases_;
  std::size_t next_alias_ = 0;
  int walked_ = -1;
};

// EventChecker reads the parser's events before the document is loaded, for two mistakes yaml-cpp
// does not report.
//
// A token that cannot start a node where it stands (`,` outside a flow collection) is neither
// consumed nor reported: yaml-cpp's parser (0.7 and 0.8; jbeder/yaml-cpp#1040) answers with an empty
// document and starts the next one at the same token, so YAML::LoadAll() adds empty documents for
// ever, gigabytes within a minute. A document that starts where the previous one started is that
// loop: reported as a syntax error at the token instead.
//
// Quoted scalars that are never closed: yaml-cpp accepts a double- or single-quoted scalar that runs
// to the end of the file (`policy: "eager` on the last line reads as `eager`; with lines after it,
// the quote swallows them and the error shows up as a bad value), so each scalar whose source text
// starts with a quote is scanned from there, by YAML's rules, for its closing quote: `\x` escapes in
// "...", '' in '...'. A quoted scalar may span lines; it may not end the file unclosed. The error
// points at the line where the quote opened.
//
// It reads the parser's events, not a loaded document: there each scalar of the text is one event
// and an alias (`*name`) is one event too, while the document shares the anchored node under every
// alias, so a walk over it visits a node once per path to it: nine aliases of nine aliases ... ("a
// billion laughs") took exponential time in a file of a few hundred bytes. The parser's own syntax
// errors (YAML::Exception) are its caller's to report.
class EventChecker : public YAML::EventHandler {
 public:
  EventChecker(const std::string& text, std::string file) : text_(text), file_(std::move(file)) {}

  void check() {
    std::istringstream stream(text_);
    YAML::Parser parser(stream);
    while (parser.HandleNextDocument(*this)) {
    }
  }

  // aliases(): every alias of the text, in order, with the start of the node it names.
  std::vector<AliasSite> aliases() const { return aliases_; }

  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                const std::string&) override {
    note_anchor(mark, anchor);
    check_scalar(mark);
  }
  void OnDocumentStart(const YAML::Mark& mark) override { check_progress(mark); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t anchor) override { note_anchor(mark, anchor); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t anchor) override {
    const auto named = anchors_.find(anchor);
    if (named != anchors_.end()) aliases_.push_back(AliasSite{mark.pos, mark.line + 1, named->second});
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                       YAML::EmitterStyle::value) override {
    note_anchor(mark, anchor);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t anchor,
                  YAML::EmitterStyle::value) override {
    note_anchor(mark, anchor);
  }
  void OnMapEnd() override {}

 private:
  void check_progress(const YAML::Mark& mark) {
    if (last_document_start_ && *last_document_start_ == mark.pos) {
      const auto at = static_cast<std::size_t>(mark.pos);
      throw_config_error(file_origin(file_, mark.line + 1), "",
                         fmt::format("YAML syntax error: unexpected {} (at column {}): no value, key or "
                                     "document can start with it here",
                                     quote(at < text_.size() ? std::string_view(text_).substr(at, 1) : ""),
                                     mark.column + 1));
    }
    last_document_start_ = mark.pos;
  }

  void check_scalar(const YAML::Mark& mark) const {
    if (mark.is_null() || mark.pos < 0 || static_cast<std::size_t>(mark.pos) >= text_.size()) return;
    const auto start = static_cast<std::size_t>(mark.pos);
    const std::size_t open = after_properties(start);
    if (open >= text_.size()) return;
    const char quote = text_[open];
    if (quote != '"' && quote != '\'') return;
    for (std::size_t i = open + 1; i < text_.size(); ++i) {
      if (quote == '"' && text_[i] == '\\') {
        ++i;  // an escape: the next character is never the closing quote
      } else if (text_[i] == quote) {
        if (quote == '\'' && i + 1 < text_.size() && text_[i + 1] == '\'') {
          ++i;  // '' is a quote inside a single-quoted scalar
        } else {
          return;
        }
      }
    }
    // Where the quote stands: after the scalar's properties, maybe on a later line.
    const std::string_view skipped = std::string_view(text_).substr(start, open - start);
    const auto breaks = static_cast<int>(std::count(skipped.begin(), skipped.end(), '\n'));
    const std::size_t line_start = skipped.rfind('\n');
    const int column = breaks == 0 ? mark.column + static_cast<int>(open - start)
                                   : static_cast<int>(skipped.size() - line_start - 1);
    throw_config_error(file_origin(file_, mark.line + 1 + breaks), "",
                       fmt::format("YAML syntax error: the {}-quoted scalar that opens here (at column {}) "
                                   "has no closing {} before the end of the file",
                                   quote == '"' ? "double" : "single", column + 1, quote));
  }

  // after_properties(): where a node's content starts, past the anchor (`&name`) and tag (`!!str`)
  // the parser's mark starts at, and the blanks, line breaks and comments after them.
  std::size_t after_properties(std::size_t at) const {
    const auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
    while (at < text_.size() && (text_[at] == '&' || text_[at] == '!')) {
      while (at < text_.size() && !blank(text_[at])) ++at;
      while (at < text_.size()) {
        if (blank(text_[at])) {
          ++at;
        } else if (text_[at] == '#') {
          while (at < text_.size() && text_[at] != '\n') ++at;
        } else {
          break;
        }
      }
    }
    return at;
  }

  void note_anchor(const YAML::Mark& mark, YAML::anchor_t anchor) {
    if (anchor != YAML::NullAnchor) anchors_[anchor] = mark.pos;
  }

  const std::string& text_;
  std::string file_;
  std::optional<int> last_document_start_;  // the offset of the last document's first token
  std::map<YAML::anchor_t, int> anchors_;   // where each anchored node starts
  std::vector<AliasSite> aliases_;
};

// check_plain_text() refuses what the YAML parser would misread without a word: a NUL byte (read
// with the next byte as an escape, `eager<NUL>n` as `eager`; first in the file, it makes the file
// UTF-16 to the parser, one long comment), and files in UTF-16 or UTF-32, whose unclosed quotes
// the quote check, which reads bytes, cannot find. A configuration file is UTF-8 text.
void check_plain_text(std::string_view text, const std::string& file) {
  for (const std::string_view mark :
       {std::string_view("\xFF\xFE"), std::string_view("\xFE\xFF"), std::string_view("\0\0\xFE\xFF", 4)}) {
    if (!text.starts_with(mark)) continue;
    std::string bytes;
    for (const char c : mark)
      bytes += fmt::format("{}{:02X}", bytes.empty() ? "" : " ", static_cast<unsigned char>(c));
    throw_config_error(file_origin(file, 1), "",
                       fmt::format("the file is UTF-16 or UTF-32 (it starts with a byte order mark {}): "
                                   "save it as UTF-8",
                                   bytes));
  }
  if (const std::size_t nul = text.find('\0'); nul != std::string_view::npos) {
    const auto line =
        1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<long>(nul), '\n'));
    throw_config_error(file_origin(file, line), "",
                       fmt::format("the file holds a NUL byte (at byte {}, line {}): a configuration file "
                                   "is UTF-8 text (a file saved as UTF-16 or UTF-32 has NUL bytes)",
                                   nul, line));
  }
}

}  // namespace

void read_config_file(const std::filesystem::path& path, std::string_view named_by,
                      const AssignmentSink& take) {
  std::string text = read_whole_file(path, named_by);
  // A UTF-8 byte order mark (editors on Windows write one) is no content. yaml-cpp skips it but counts
  // positions without it, while the checks read `text` by those positions: they looked three bytes
  // early, refusing valid files and missing unclosed quotes.
  if (text.starts_with("\xEF\xBB\xBF")) text.erase(0, 3);
  check_plain_text(text, path.string());
  YAML::Node document;
  std::vector<AliasSite> aliases;
  try {
    EventChecker checker(text, path.string());
    checker.check();  // before LoadAll(), which may never return
    aliases = checker.aliases();
    std::vector<YAML::Node> documents = YAML::LoadAll(text);
    // A second document (after `---`) would otherwise be ignored, typos and all; empty ones hold nothing.
    std::erase_if(documents,
                  [&](const YAML::Node& each) { return each.IsNull() && &each != &documents.front(); });
    if (documents.size() > 1) {
      const YAML::Mark mark = documents[1].Mark();
      throw_config_error(file_origin(path.string(), mark.line >= 0 ? mark.line + 1 : 0), "",
                         fmt::format("the file holds {} YAML documents; a configuration is one document "
                                     "(remove the `---` separators)",
                                     documents.size()));
    }
    if (!documents.empty()) document = documents.front();
  } catch (const YAML::Exception& error) {
    throw_yaml_syntax_error(error, text, path.string());
  }
  FileReader(path.string(), take, std::move(aliases)).read(document);
}

}  // namespace nerve::config
