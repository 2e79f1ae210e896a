#include "config/value_type.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>

#include <fmt/format.h>

#include "config/diagnostics.hpp"
#include "config/suggest.hpp"

namespace nerve::config {
namespace {

using std::chrono::nanoseconds;

// Problem carries the reason a value was rejected from the per-kind parsers up to parse_value(),
// which adds the key and the origin. It never leaves this file.
struct Problem {
  std::string reason;
};

std::string_view trim(std::string_view text) {
  constexpr std::string_view blanks = " \t\r\n";
  const auto first = text.find_first_not_of(blanks);
  if (first == std::string_view::npos) return {};
  return text.substr(first, text.find_last_not_of(blanks) - first + 1);
}

std::vector<std::string> to_strings(const std::vector<std::string_view>& words) {
  return {words.begin(), words.end()};
}

// parse_digits() reads a whole decimal integer (sign allowed) or says why it is not one.
std::int64_t parse_digits(std::string_view digits, std::string_view value, const ValueType& type) {
  std::int64_t number = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), number);
  if (error == std::errc::result_out_of_range) {
    throw Problem{fmt::format("{} is out of range (expected {})", quote(value), type.expected())};
  }
  if (error != std::errc{} || end != digits.data() + digits.size()) {
    throw Problem{fmt::format("{} is not {}", quote(value), type.expected())};
  }
  return number;
}

ParsedValue parse_integer(std::string_view text, const ValueType& type) {
  if (!type.zero_word.empty() && text == type.zero_word)
    return {std::string(type.zero_word), std::int64_t{0}};
  std::int64_t number = 0;
  try {
    number = parse_digits(text, text, type);
  } catch (Problem& problem) {
    if (!type.zero_word.empty()) {
      const std::vector<std::string> words{std::string(type.zero_word)};
      problem.reason += did_you_mean(text, words);
    }
    throw;
  }
  // "-0" is below a range that starts at 0 as much as "-1" is: no key takes a sign.
  if (number < type.min || number > type.max || (text.starts_with('-') && type.min >= 0)) {
    throw Problem{fmt::format("{} is out of range (expected {})", quote(text), type.expected())};
  }
  if (number == 0 && !type.zero_word.empty()) return {std::string(type.zero_word), number};
  return {std::to_string(number), number};
}

ParsedValue parse_boolean(std::string_view text, const ValueType& type) {
  const std::string word = to_lower_ascii(text);
  if (word == "true" || word == "yes" || word == "on" || word == "1") return {"true", true};
  if (word == "false" || word == "no" || word == "off" || word == "0") return {"false", false};
  throw Problem{fmt::format("{} is not {}", quote(text), type.expected())};
}

ParsedValue parse_duration(std::string_view text, const ValueType& type) {
  const std::size_t unit_start = text.find_first_not_of("+-0123456789");
  const std::string_view digits = text.substr(0, unit_start);
  const std::string_view unit = unit_start == std::string_view::npos ? "" : text.substr(unit_start);
  std::int64_t scale = 1000;  // a bare number is in microseconds, like the other *_us keys
  if (unit == "ns") {
    scale = 1;
  } else if (unit == "ms") {
    scale = std::int64_t{1000} * 1000;
  } else if (unit == "s") {
    scale = std::int64_t{1000} * 1000 * 1000;
  } else if (!unit.empty() && unit != "us") {
    if (digits.empty()) throw Problem{fmt::format("{} is not {}", quote(text), type.expected())};
    throw Problem{
        fmt::format("{} has an unknown unit {} (expected {})", quote(text), quote(unit), type.expected())};
  }
  if (digits.empty()) throw Problem{fmt::format("{} is not {}", quote(text), type.expected())};
  const std::int64_t count = parse_digits(digits, text, type);
  // Compare before multiplying so that a huge count cannot overflow. "-0" is below a range that
  // starts at 0, as for integers.
  if (count < type.min / scale || count > type.max / scale || count * scale < type.min ||
      (digits.starts_with('-') && type.min >= 0)) {
    throw Problem{fmt::format("{} is out of range (expected {})", quote(text), type.expected())};
  }
  const nanoseconds value{count * scale};
  if (value.count() % type.resolution_ns != 0) {
    throw Problem{fmt::format("{} is finer than the resolution of {} (expected {})", quote(text),
                              format_duration(nanoseconds{type.resolution_ns}), type.expected())};
  }
  return {format_duration(value), value};
}

ParsedValue parse_choice(std::string_view text, const ValueType& type) {
  for (std::string_view choice : type.choices) {
    if (text == choice) return {std::string(choice), std::string(choice)};
  }
  for (const PlannedChoice& planned : type.planned_choices) {
    if (text == planned.value) {
      throw Problem{fmt::format("{} is not available in this build yet: it arrives with {} (expected {})",
                                quote(text), planned.arrives_with, type.expected())};
    }
  }
  throw Problem{fmt::format("{} is not {}{}", quote(text), type.expected(),
                            did_you_mean(text, to_strings(type.choices)))};
}

ParsedValue parse_readable_file(std::string_view text, const ConfigOrigin& origin) {
  if (text.empty()) return {"", std::string()};  // not set
  std::filesystem::path path(text);
  // A relative path in a configuration file means "next to this file", wherever the program runs.
  if (path.is_relative() && origin.source == ConfigSource::file) {
    path = std::filesystem::path(origin.file).parent_path() / path;
  }
  std::error_code error;
  const auto status = std::filesystem::status(path, error);
  if (!std::filesystem::exists(status)) {
    throw Problem{
        fmt::format("{} does not exist (expected the path of a readable file)", quote(path.string()))};
  }
  if (!std::filesystem::is_regular_file(status)) {
    throw Problem{
        fmt::format("{} is not a regular file (expected the path of a readable file)", quote(path.string()))};
  }
  std::ifstream stream(path);
  if (!stream) {
    throw Problem{fmt::format("{} cannot be read: {}", quote(path.string()), std::strerror(errno))};
  }
  return {path.string(), path.string()};
}

// parse_list() joins the items (a YAML sequence, or comma-separated text) as "a,b,c", each trimmed.
ParsedValue parse_list(const std::vector<std::string>& items, const ValueType& type) {
  std::string joined;
  for (const std::string& raw_item : items) {
    const std::string_view item = trim(raw_item);
    if (item.empty()) throw Problem{fmt::format("has an empty item (expected {})", type.expected())};
    // A sequence item is one value: ["0,1"] is not [0, 1].
    if (item.find(',') != std::string_view::npos) {
      throw Problem{
          fmt::format("item {} holds a comma: one item is one value (write [0, 1], not [\"0,1\"]; "
                      "expected {})",
                      quote(item), type.expected())};
    }
    if (!joined.empty()) joined += ',';
    joined += item;
  }
  if (joined.empty()) throw Problem{fmt::format("is empty (expected {})", type.expected())};
  return {joined, joined};
}

// nested_item() is the Problem of a list whose item `index` (0-based) is a sequence or a map.
Problem nested_item(std::size_t index, std::string_view shape, const ValueType& type) {
  return Problem{fmt::format("item {} is {}: a list holds single values, not a sequence or map (expected {})",
                             index + 1, shape, type.expected())};
}

std::vector<std::string> split_commas(std::string_view text) {
  std::vector<std::string> items;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = text.find(',', start);
    items.emplace_back(text.substr(start, comma == std::string_view::npos ? text.npos : comma - start));
    if (comma == std::string_view::npos) return items;
    start = comma + 1;
  }
}

}  // namespace

std::string ValueType::expected() const {
  switch (kind) {
    case ValueKind::integer:
      if (zero_word.empty()) return fmt::format("an integer {}..{}", min, max);
      return fmt::format("an integer {}..{} or '{}'", min, max, zero_word);
    case ValueKind::boolean: return "a boolean (true/false, yes/no, on/off or 1/0)";
    case ValueKind::duration:
      return fmt::format("a duration {}..{}: integer microseconds or an integer with a unit ns, us, ms or s",
                         format_duration(nanoseconds{min}), format_duration(nanoseconds{max}));
    case ValueKind::choice: return fmt::format("one of {}", fmt::join(choices, ", "));
    case ValueKind::text: return "a string";
    case ValueKind::output_path: return fmt::format("a path, or empty for {}", empty_means);
    case ValueKind::readable_file: return "the path of a readable file";
    case ValueKind::list: return fmt::format("a comma-separated list of {}", item);
    case ValueKind::records:
      return fmt::format("{} items separated by commas, or a sequence of them or of maps with {}", item,
                         fmt::join(fields, ", "));
  }
  return "a value";
}

ValueType integer_type(std::int64_t min, std::int64_t max, std::string_view zero_word) {
  ValueType type;
  type.kind = ValueKind::integer;
  type.min = min;
  type.max = max;
  type.zero_word = zero_word;
  return type;
}

ValueType boolean_type() {
  ValueType type;
  type.kind = ValueKind::boolean;
  return type;
}

ValueType duration_type(nanoseconds min, nanoseconds max, nanoseconds resolution) {
  ValueType type;
  type.kind = ValueKind::duration;
  type.min = min.count();
  type.max = max.count();
  type.resolution_ns = resolution.count();
  return type;
}

ValueType choice_type(std::vector<std::string_view> choices, std::vector<PlannedChoice> planned) {
  ValueType type;
  type.kind = ValueKind::choice;
  type.choices = std::move(choices);
  type.planned_choices = std::move(planned);
  return type;
}

ValueType text_type() {
  ValueType type;
  type.kind = ValueKind::text;
  return type;
}

ValueType output_path_type(std::string_view empty_means) {
  ValueType type;
  type.kind = ValueKind::output_path;
  type.empty_means = empty_means;
  return type;
}

ValueType readable_file_type() {
  ValueType type;
  type.kind = ValueKind::readable_file;
  return type;
}

ValueType list_type(std::string_view what) {
  ValueType type;
  type.kind = ValueKind::list;
  type.item = what;
  return type;
}

ValueType records_type(std::string_view what, std::vector<std::string_view> fields) {
  ValueType type;
  type.kind = ValueKind::records;
  type.item = what;
  type.fields = std::move(fields);
  return type;
}

namespace {

// one_value() is `text` trimmed when it is one value of a records item: not empty, and without the
// separators of the key's text form (',' and blanks between items, ':' between fields), which would
// otherwise make one field two items ("2, 5") or change its meaning.
std::string_view one_value(std::string_view text, std::string_view separators, const std::string& what) {
  const std::string_view value = trim(text);
  if (value.empty()) throw Problem{fmt::format("{} has no value", what)};
  if (value.find_first_of(separators) != std::string_view::npos)
    throw Problem{
        fmt::format("{} is {}: one value, please (one item per sequence item)", what, quote(value))};
  return value;
}

// record_text() writes map item `index` (0-based) of a records value as its fields' values in the
// type's order, joined by ':' ({device: 0, high_priority_streams: 2} -> "0:2"): every field once,
// no other, each one value.
std::string record_text(std::size_t index, const std::vector<RawValue::Field>& fields,
                        const ValueType& type) {
  for (const RawValue::Field& field : fields) {
    if (std::find(type.fields.begin(), type.fields.end(), field.first) != type.fields.end()) continue;
    if (field.first == "<<")
      throw Problem{fmt::format("item {}: YAML merge keys ('<<') are not supported", index + 1)};
    throw Problem{fmt::format("item {} has an unknown field {} (a map item has the fields {})", index + 1,
                              field.first.empty() ? std::string("that is no plain name") : quote(field.first),
                              fmt::join(type.fields, ", "))};
  }
  std::vector<std::string_view> values;
  for (const std::string_view wanted : type.fields) {
    const RawValue::Field* found = nullptr;
    for (const RawValue::Field& field : fields) {
      if (field.first != wanted) continue;
      if (found != nullptr) throw Problem{fmt::format("item {} gives '{}' twice", index + 1, wanted)};
      found = &field;
    }
    if (found == nullptr) {
      throw Problem{fmt::format("item {} has no '{}' (a map item has the fields {})", index + 1, wanted,
                                fmt::join(type.fields, ", "))};
    }
    const std::string what = fmt::format("item {}: '{}'", index + 1, wanted);
    if (!found->second) throw Problem{fmt::format("{} is a sequence or map, not one value", what)};
    values.push_back(one_value(*found->second, ",: \t\r\n", what));
  }
  return fmt::format("{}", fmt::join(values, ":"));
}

// records_text() writes a records value given as a sequence as the text its key parses: the items
// separated by ", ".
std::string records_text(const RawValue& raw, const ValueType& type) {
  std::vector<std::string> items;
  for (std::size_t i = 0; i < raw.items.size(); ++i) {
    const RawValue::Shape shape = i < raw.item_shapes.size() ? raw.item_shapes[i] : RawValue::Shape::scalar;
    if (shape == RawValue::Shape::sequence) throw nested_item(i, "a sequence", type);
    if (shape == RawValue::Shape::null) throw Problem{fmt::format("item {} has no value", i + 1)};
    if (shape == RawValue::Shape::map) {
      items.push_back(record_text(
          i, i < raw.item_fields.size() ? raw.item_fields[i] : std::vector<RawValue::Field>{}, type));
    } else {
      items.emplace_back(one_value(raw.items[i], ", \t\r\n", fmt::format("item {}", i + 1)));
    }
  }
  return fmt::format("{}", fmt::join(items, ", "));
}

}  // namespace

ParsedValue parse_value(std::string_view key, const ValueType& type, const RawValue& raw,
                        const ConfigOrigin& origin) {
  try {
    // A NUL byte (a YAML "\0" escape, a string from the API) ends the text for hwloc, the file system
    // and every C interface a value reaches: what follows it would be dropped without a word.
    const auto refuse_nul = [&type](const std::string& text) {
      if (const auto nul = text.find('\0'); nul != std::string::npos) {
        throw Problem{fmt::format("{} holds a NUL byte (at byte {}), which would cut it short (expected {})",
                                  quote(text), nul, type.expected())};
      }
    };
    refuse_nul(raw.text);
    for (const std::string& item : raw.items) refuse_nul(item);
    for (const auto& fields : raw.item_fields) {
      for (const auto& [name, value] : fields) {
        refuse_nul(name);
        if (value) refuse_nul(*value);
      }
    }
    switch (raw.shape) {
      case RawValue::Shape::null:
        // `trace:` with nothing after it reads as the empty string ("not set") where that is a value.
        if (type.kind == ValueKind::text || type.kind == ValueKind::output_path ||
            type.kind == ValueKind::readable_file || type.kind == ValueKind::records)
          return {"", std::string()};
        throw Problem{fmt::format("no value given (expected {})", type.expected())};
      case RawValue::Shape::sequence:
        if (type.kind == ValueKind::list) {
          for (std::size_t i = 0; i < raw.item_shapes.size(); ++i) {
            if (raw.item_shapes[i] == RawValue::Shape::sequence) throw nested_item(i, "a sequence", type);
            if (raw.item_shapes[i] == RawValue::Shape::map) throw nested_item(i, "a map", type);
          }
          return parse_list(raw.items, type);
        }
        if (type.kind == ValueKind::records) {
          std::string text = records_text(raw, type);
          return {text, text};
        }
        throw Problem{fmt::format("expected {}, got a sequence", type.expected())};
      case RawValue::Shape::map: throw Problem{fmt::format("expected {}, got a map", type.expected())};
      case RawValue::Shape::scalar: break;
    }
    // Output paths are taken verbatim; everything else ignores surrounding blanks (common in env
    // values) — the text keys too (memory.numa_policy, distributed.nodes and .compression,
    // topology.synthetic): each is a structured value, shown as it is read (nerve-info).
    const bool verbatim = type.kind == ValueKind::output_path;
    const std::string_view text = verbatim ? std::string_view(raw.text) : trim(raw.text);
    switch (type.kind) {
      case ValueKind::integer: return parse_integer(text, type);
      case ValueKind::boolean: return parse_boolean(text, type);
      case ValueKind::duration: return parse_duration(text, type);
      case ValueKind::choice: return parse_choice(text, type);
      case ValueKind::text:
      case ValueKind::records: return {std::string(text), std::string(text)};
      case ValueKind::output_path:
        // NERVE_PERF_TRACE=" " wrote a file named " ": blanks alone are a mistake, not a name.
        if (!text.empty() && trim(text).empty())
          throw Problem{fmt::format("{} is only blanks (expected {})", quote(text), type.expected())};
        return {std::string(text), std::string(text)};
      case ValueKind::readable_file: return parse_readable_file(text, origin);
      case ValueKind::list: {
        // A YAML flow sequence written as text (from the API or the environment: "[0, 2]") means
        // what it means in a file.
        if (text.size() >= 2 && text.front() == '[' && text.back() == ']') {
          const std::string_view inside = trim(text.substr(1, text.size() - 2));
          std::vector<std::string> items = inside.empty() ? std::vector<std::string>{} : split_commas(inside);
          for (std::size_t i = 0; i < items.size(); ++i) {  // a quoted item is its text, as YAML reads it
            std::string& item = items[i];
            const std::string_view bare = trim(item);
            if (bare.starts_with('[')) throw nested_item(i, "a sequence", type);
            if (bare.starts_with('{')) throw nested_item(i, "a map", type);
            if (bare.size() >= 2 && (bare.front() == '"' || bare.front() == '\'') &&
                bare.back() == bare.front())
              item = std::string(bare.substr(1, bare.size() - 2));
          }
          return parse_list(items, type);
        }
        // Nothing but blanks is an empty list, as [] is, not a list with one empty item.
        if (trim(text).empty()) return parse_list({}, type);
        return parse_list(split_commas(text), type);
      }
    }
    throw Problem{"has a type this build does not know"};
  } catch (const Problem& problem) {
    throw_config_error(origin, key, fmt::format("{}: {}", key, problem.reason));
  }
}

std::string format_duration(nanoseconds d) {
  const std::int64_t count = d.count();
  if (count == 0) return "0";
  if (count % 1'000'000'000 == 0) return fmt::format("{}s", count / 1'000'000'000);
  if (count % 1'000'000 == 0) return fmt::format("{}ms", count / 1'000'000);
  if (count % 1'000 == 0) return fmt::format("{}us", count / 1'000);
  return fmt::format("{}ns", count);
}

}  // namespace nerve::config
