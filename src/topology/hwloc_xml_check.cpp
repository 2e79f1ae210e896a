// find_hwloc_xml_problem(): a single forward scan of an hwloc XML export (see hwloc_xml_check.hpp).
#include "topology/hwloc_xml_check.hpp"

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "config/diagnostics.hpp"

namespace nerve::topology {
namespace {

// libxml2's default limit (xmlParserMaxDepth); hwloc's own parser recurses once per level without one.
constexpr std::size_t max_depth = 256;
constexpr std::size_t max_bitmap_words = (std::size_t{max_hwloc_xml_index} + 1) / 32;

// XmlProblem carries a problem from deep in the scan to find_hwloc_xml_problem(), which words it.
struct XmlProblem {
  int line;
  std::string message;
};

// Each set an object may have, and the complete set that must come with it and include it.
constexpr std::pair<std::string_view, std::string_view> set_pairs[] = {{"cpuset", "complete_cpuset"},
                                                                       {"nodeset", "complete_nodeset"}};

// The <object> attributes hwloc 2.9 reads, v1-format ones included. It ignores others, yet its own
// parser (used without libxml2) crashes on some of them in v1 files (fuzzing: "onXine_cpuset" on a
// memory-only NUMA node); no export has them.
constexpr std::string_view object_attributes[] = {"type",
                                                  "os_index",
                                                  "gp_index",
                                                  "cpuset",
                                                  "complete_cpuset",
                                                  "online_cpuset",
                                                  "allowed_cpuset",
                                                  "nodeset",
                                                  "complete_nodeset",
                                                  "allowed_nodeset",
                                                  "name",
                                                  "subtype",
                                                  "local_memory",
                                                  "cache_size",
                                                  "cache_linesize",
                                                  "cache_associativity",
                                                  "cache_type",
                                                  "depth",
                                                  "kind",
                                                  "subkind",
                                                  "dont_merge",
                                                  "bridge_type",
                                                  "bridge_pci",
                                                  "pci_busid",
                                                  "pci_type",
                                                  "pci_link_speed",
                                                  "osdev_type",
                                                  "os_level",
                                                  "dmi_board_vendor",
                                                  "dmi_board_name",
                                                  "memory_kB",
                                                  "huge_page_size_kB",
                                                  "huge_page_free"};

// The object types hwloc writes, v1-format ones (Socket, Cache, System) included. hwloc itself reads
// any two-letter prefix ("NU76203008" is a NUMA node), so the checks below that depend on the type
// accept only these names.
constexpr std::string_view object_types[] = {
    "Machine", "Package", "Die",     "Group",    "NUMANode", "MemCache", "L1Cache", "L2Cache",
    "L3Cache", "L4Cache", "L5Cache", "L1iCache", "L2iCache", "L3iCache", "Core",    "PU",
    "Misc",    "Bridge",  "PCIDev",  "OSDev",    "Socket",   "Cache",    "System"};

// The types that have no cpuset: I/O devices and Misc objects. Every other object needs one (hwloc 2.9
// crashes on a v1-format NUMA node without).
constexpr std::string_view types_without_cpuset[] = {"Misc", "Bridge", "PCIDev", "OSDev"};

struct Attribute {
  std::string_view name;  // without its namespace prefix, as hwloc's libxml2 backend sees it
  std::string_view value;
};

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// local_name() drops a namespace prefix: libxml2 hands hwloc <x:object x:cpuset=...> as object and
// cpuset, so the scan must see them so too.
std::string_view local_name(std::string_view name) {
  const auto colon = name.rfind(':');
  return colon == std::string_view::npos ? name : name.substr(colon + 1);
}

bool is_bitmap_attribute(std::string_view name) {
  return name.ends_with("cpuset") || name.ends_with("nodeset");
}

// Bitmap is a set of CPU or NUMA node indices: 32-bit words, least significant first, and above
// them either nothing or (infinite) every index.
struct Bitmap {
  std::vector<std::uint32_t> words;
  bool infinite = false;

  std::uint32_t word(std::size_t index) const {
    return index < words.size() ? words[index] : (infinite ? ~std::uint32_t{0} : 0);
  }
  bool empty() const {
    return !infinite && std::ranges::all_of(words, [](std::uint32_t w) { return w == 0; });
  }
  bool is_subset_of(const Bitmap& other) const {
    if (infinite && !other.infinite) return false;
    for (std::size_t i = 0; i < std::max(words.size(), other.words.size()); ++i) {
      if ((word(i) & ~other.word(i)) != 0) return false;
    }
    return true;
  }
  bool intersects(const Bitmap& other) const {
    if (infinite && other.infinite) return true;
    for (std::size_t i = 0; i < std::max(words.size(), other.words.size()); ++i) {
      if ((word(i) & other.word(i)) != 0) return true;
    }
    return false;
  }
};

// read_bitmap() reads `value` into `bitmap` as hwloc_bitmap_snprintf() writes it ("0xf...f," for an
// infinite set, then comma-separated words, most significant first, an empty one being zero) and
// returns what is wrong with it, empty when nothing: hwloc_bitmap_sscanf() asserts on a leading
// comma and silently misreads other deviations.
std::string read_bitmap(std::string_view value, Bitmap& bitmap) {
  const std::string format =
      "is not an hwloc bitmap (comma-separated 32-bit words such as \"0x000000ff,,0xffffffff\")";
  std::string_view rest = value;
  if (rest.starts_with("0xf...f")) {
    rest.remove_prefix(7);
    bitmap.infinite = true;
    if (rest.empty()) return {};
    if (rest.front() != ',') return format;
    rest.remove_prefix(1);
  }
  for (;;) {
    if (bitmap.words.size() == max_bitmap_words)
      return fmt::format("names indices above {}", max_hwloc_xml_index);
    const auto comma = rest.find(',');
    const std::string_view word = rest.substr(0, comma);
    const bool last = comma == std::string_view::npos;
    std::uint32_t bits = 0;
    // Empty words are zero words, but never the first (the assertion) nor the last.
    if (word.empty() && ((bitmap.words.empty() && !bitmap.infinite) || last)) return format;
    if (!word.empty()) {
      const char* const end = word.data() + word.size();
      if (word.size() < 3 || word.size() > 10 || !word.starts_with("0x") ||
          std::from_chars(word.data() + 2, end, bits, 16).ptr != end) {
        return format;
      }
    }
    bitmap.words.push_back(bits);
    if (last) break;
    rest.remove_prefix(comma + 1);
  }
  std::ranges::reverse(bitmap.words);
  return {};
}

class Scanner {
 public:
  explicit Scanner(std::string_view text) : text_(text) {}

  void scan() {
    if (const auto nul = text_.find('\0'); nul != std::string_view::npos) {
      move_to(nul);
      fail("NUL byte (nerve reads UTF-8 files; is this UTF-16?)");
    }
    if (text_.starts_with("\xEF\xBB\xBF")) position_ = 3;  // UTF-8 byte order mark
    if (declaration_at(position_)) {
      check_declaration();
    } else {
      // libxml2 reads a document that starts otherwise as EBCDIC or UCS-4 when its first bytes say so.
      skip_blanks();
      if (position_ < text_.size() && text_[position_] != '<') fail("text before the first tag");
    }
    while (position_ < text_.size()) {
      const auto open = text_.find('<', position_);
      if (open == std::string_view::npos) break;
      move_to(open);
      markup();
    }
    if (!open_elements_.empty()) {
      fail(fmt::format("<{}> from line {} is never closed", open_elements_.back().first,
                       open_elements_.back().second));
    }
  }

 private:
  [[noreturn]] void fail(std::string message) const { throw XmlProblem{line_, std::move(message)}; }

  // move_to() advances to `position`, counting lines on the way: each byte is counted once.
  void move_to(std::size_t position) {
    line_ += static_cast<int>(std::count(text_.begin() + static_cast<std::ptrdiff_t>(position_),
                                         text_.begin() + static_cast<std::ptrdiff_t>(position), '\n'));
    position_ = position;
  }

  // skip_past() moves past the next `terminator`, failing with `what` when there is none.
  void skip_past(std::string_view terminator, std::string_view what) {
    const auto end = text_.find(terminator, position_);
    if (end == std::string_view::npos) fail(fmt::format("{} is never closed", what));
    move_to(end + terminator.size());
  }

  void skip_blanks() {
    std::size_t next = position_;
    while (next < text_.size() && is_blank(text_[next])) ++next;
    move_to(next);
  }

  std::string_view name() {
    const std::size_t start = position_;
    std::size_t end = start;
    while (end < text_.size() && !is_blank(text_[end]) &&
           std::string_view("<>/=\"'?").find(text_[end]) == std::string_view::npos) {
      ++end;
    }
    if (end == start) fail(fmt::format("expected a name, found {}", config::quote(text_.substr(start, 1))));
    position_ = end;  // names hold no line feed
    return text_.substr(start, end - start);
  }

  bool at(std::string_view prefix) const { return text_.substr(position_).starts_with(prefix); }

  bool declaration_at(std::size_t position) const {
    return text_.substr(position).starts_with("<?xml") && position + 5 < text_.size() &&
           (is_blank(text_[position + 5]) || text_[position + 5] == '?');
  }

  void expect(char c) {
    if (position_ >= text_.size() || text_[position_] != c) {
      fail(fmt::format("expected '{}', found {}", c,
                       position_ < text_.size() ? config::quote(text_.substr(position_, 1)) : "the end"));
    }
    ++position_;
  }

  // The XML declaration decides how libxml2 decodes the bytes: one that turns them into other
  // characters (UTF-7, UTF-16, EBCDIC) would hide markup from this scan.
  void check_declaration() {
    position_ += 5;
    for (const Attribute& attribute : attributes("?>")) {
      if (attribute.name != "encoding") continue;
      std::string encoding(attribute.value);
      std::transform(encoding.begin(), encoding.end(), encoding.begin(),
                     [](char c) { return c >= 'a' && c <= 'z' ? static_cast<char>(c - 'a' + 'A') : c; });
      if (encoding != "UTF-8" && encoding != "US-ASCII" && encoding != "ASCII" && encoding != "ISO-8859-1") {
        fail(fmt::format("encoding {} (hwloc writes UTF-8)", config::quote(attribute.value)));
      }
    }
    skip_past("?>", "the XML declaration");
  }

  void markup() {
    if (declaration_at(position_)) fail("an XML declaration after the start of the file");
    if (at("<?")) return skip_past("?>", "a processing instruction");
    if (at("<!--")) return skip_past("-->", "a comment");
    if (at("<![CDATA[")) return skip_past("]]>", "a CDATA section");
    if (at("<!DOCTYPE")) {
      const auto end = text_.find('>', position_);
      const auto subset = text_.find('[', position_);
      if (subset < end)
        fail("DOCTYPE with an internal subset (hwloc writes none; it could declare entities)");
      return skip_past(">", "the DOCTYPE");
    }
    if (at("<!")) fail("unexpected markup '<!'");
    if (at("</")) return end_tag();
    start_tag();
  }

  void end_tag() {
    position_ += 2;
    const std::string_view closed = name();
    skip_blanks();
    expect('>');
    if (open_elements_.empty() || open_elements_.back().first != closed) {
      fail(open_elements_.empty() ? fmt::format("</{}> closes nothing", closed)
                                  : fmt::format("</{}> closes <{}> from line {}", closed,
                                                open_elements_.back().first, open_elements_.back().second));
    }
    open_elements_.pop_back();
  }

  void start_tag() {
    ++position_;
    const int line = line_;
    const std::string_view element = name();
    std::vector<Attribute> found = attributes(">");
    const bool empty = at("/>");
    position_ += empty ? 2 : 1;
    check_element(local_name(element), found, line);
    if (empty) return;
    if (open_elements_.size() == max_depth) fail(fmt::format("elements nested more than {} deep", max_depth));
    open_elements_.emplace_back(element, line);
  }

  // attributes() reads name="value" pairs up to `end` (or "/>"), leaving the position on it; namespace
  // declarations are skipped, prefixes dropped, duplicates refused (libxml2 refuses them, hwloc's
  // own parser would let the last one override a checked first one).
  std::vector<Attribute> attributes(std::string_view end) {
    std::vector<Attribute> found;
    for (;;) {
      skip_blanks();
      if (position_ >= text_.size()) fail("a tag is never closed");
      if (at(end) || at("/>")) break;
      const std::string_view attribute = name();
      skip_blanks();
      expect('=');
      skip_blanks();
      if (position_ >= text_.size() || (text_[position_] != '"' && text_[position_] != '\'')) {
        fail(fmt::format("the value of {} is not quoted", attribute));
      }
      const char quote = text_[position_];
      const auto close = text_.find(quote, position_ + 1);
      if (close == std::string_view::npos) fail(fmt::format("the value of {} is never closed", attribute));
      const std::string_view value = text_.substr(position_ + 1, close - position_ - 1);
      if (value.find('<') != std::string_view::npos) fail(fmt::format("'<' in the value of {}", attribute));
      move_to(close + 1);
      if (attribute != "xmlns" && !attribute.starts_with("xmlns:"))
        found.push_back({local_name(attribute), value});
    }
    std::vector<std::string_view> names;
    names.reserve(found.size());
    for (const Attribute& attribute : found) names.push_back(attribute.name);
    std::ranges::sort(names);
    if (const auto twice = std::ranges::adjacent_find(names); twice != names.end()) {
      fail(fmt::format("attribute {} given twice", *twice));
    }
    return found;
  }

  static const Attribute* find(const std::vector<Attribute>& attributes, std::string_view name) {
    const auto found = std::ranges::find(attributes, name, &Attribute::name);
    return found == attributes.end() ? nullptr : &*found;
  }

  // check_element() checks the element <`element` `attributes`> that starts on `line`.
  void check_element(std::string_view element, const std::vector<Attribute>& attributes, int line) {
    const bool object = element == "object";
    const Attribute* type = find(attributes, "type");
    const std::string what = object && type != nullptr ? fmt::format("object {}", config::quote(type->value))
                                                       : fmt::format("<{}>", element);
    const auto fail_here = [&](const std::string& message) {
      throw XmlProblem{line, fmt::format("{}: {}", what, message)};
    };
    if (object) {
      if (const auto problem = object_sets_problem(attributes, type)) fail_here(*problem);
    }
    std::vector<std::pair<std::string_view, Bitmap>> sets;
    for (const Attribute& attribute : attributes) {
      if (!is_bitmap_attribute(attribute.name)) continue;
      Bitmap bitmap;
      if (const std::string problem = read_bitmap(attribute.value, bitmap); !problem.empty()) {
        fail_here(fmt::format("{}={} {}", attribute.name, config::quote(attribute.value), problem));
      }
      sets.emplace_back(attribute.name, std::move(bitmap));
    }
    if (!object) return;
    if (const auto problem = set_relations_problem(sets, !seen_object_)) fail_here(*problem);
    seen_object_ = true;
    if (const auto problem = os_index_problem(attributes, type->value)) fail_here(*problem);
  }

  // set_relations_problem() checks what hwloc assumes of an object's sets (of the root's when `root`).
  static std::optional<std::string> set_relations_problem(
      const std::vector<std::pair<std::string_view, Bitmap>>& sets, bool root) {
    const auto set = [&sets](std::string_view name) -> const Bitmap* {
      const auto found = std::ranges::find(sets, name, &std::pair<std::string_view, Bitmap>::first);
      return found == sets.end() ? nullptr : &found->second;
    };
    for (const auto& [plain, complete] : set_pairs) {
      if (set(plain) != nullptr && !set(plain)->is_subset_of(*set(complete))) {
        return fmt::format("{} is not within {} (hwloc's complete sets include the others)", plain, complete);
      }
    }
    // A root that allows none of its CPUs makes hwloc 2.9 crash once the topology turns out empty.
    const Bitmap* cpuset = set("cpuset");
    const Bitmap* allowed = set("allowed_cpuset");
    if (root && cpuset != nullptr && allowed != nullptr && !cpuset->empty() &&
        !cpuset->intersects(*allowed)) {
      return "allowed_cpuset shares no CPU with cpuset";
    }
    return std::nullopt;
  }

  // object_sets_problem() checks what hwloc needs of every object whatever its sets hold; a missing
  // set is a clearer message than a malformed one beside it.
  static std::optional<std::string> object_sets_problem(const std::vector<Attribute>& attributes,
                                                        const Attribute* type) {
    for (const Attribute& attribute : attributes) {
      if (std::ranges::find(object_attributes, attribute.name) == std::end(object_attributes)) {
        return fmt::format("unknown attribute {} (not one hwloc writes)", config::quote(attribute.name));
      }
    }
    if (type == nullptr) return "no type";
    if (std::ranges::find(object_types, type->value) == std::end(object_types)) {
      return "the type is not one hwloc writes";
    }
    if (find(attributes, "cpuset") == nullptr &&
        std::ranges::find(types_without_cpuset, type->value) == std::end(types_without_cpuset)) {
      return "no cpuset (hwloc 2.9 crashes on some objects without)";
    }
    if (type->value == "NUMANode" && find(attributes, "nodeset") == nullptr) return "no nodeset";
    for (const auto& [set, complete] : set_pairs) {
      if (find(attributes, set) != nullptr && find(attributes, complete) == nullptr) {
        return fmt::format(
            "{} without {} (hwloc writes both; hwloc 2.9 crashes on an object without the second)", set,
            complete);
      }
    }
    return std::nullopt;
  }

  // os_index_problem() bounds the index from which hwloc sizes a PU's or NUMA node's bitmaps.
  static std::optional<std::string> os_index_problem(const std::vector<Attribute>& attributes,
                                                     std::string_view type) {
    const Attribute* os_index = find(attributes, "os_index");
    if (os_index == nullptr || (type != "PU" && type != "NUMANode")) return std::nullopt;
    std::uint32_t index = 0;
    const char* const last = os_index->value.data() + os_index->value.size();
    const auto [end, error] = std::from_chars(os_index->value.data(), last, index);
    if (error == std::errc{} && end == last && index <= max_hwloc_xml_index) return std::nullopt;
    return fmt::format("os_index={} is not a number up to {}", config::quote(os_index->value),
                       max_hwloc_xml_index);
  }

  std::string_view text_;
  std::size_t position_ = 0;
  int line_ = 1;
  std::vector<std::pair<std::string_view, int>> open_elements_;  // name and line of each open tag
  bool seen_object_ = false;                                     // the first <object> is the root
};

}  // namespace

std::optional<std::string> find_hwloc_xml_problem(std::string_view xml) {
  try {
    Scanner(xml).scan();
    return std::nullopt;
  } catch (const XmlProblem& problem) {
    return fmt::format("line {}: {}", problem.line, problem.message);
  }
}

}  // namespace nerve::topology
