// value_type.hpp — the types a configuration value can have, and how text becomes a typed value.
//
// Every source (YAML file, environment, Settings::set) delivers a RawValue; parse_value() checks it
// against the key's ValueType and yields a ParsedValue: the typed value that a key's apply function
// stores into Config, plus its normalized text for Config::entries ("auto", "10ms", "true").
// One parser per type means a value is accepted or rejected the same way whatever its source.
//
// Sequence-valued keys (gpu.devices) are of kind `list`: the parser takes RawValue::items (a YAML
// sequence) or comma-separated text (YAML scalar, the environment and the API) and normalizes both
// to "a,b,c". An item that is itself a sequence or a map ([[0]], [0, {a: 1}]) is rejected as such.
// Keys of kind `records` (scheduler.gpu_stream_priorities) take "a:b" items as text, or a YAML
// sequence whose items are such text or maps with the type's named fields ({device: 0,
// high_priority_streams: 2}, the seed's form), each map written as its field values joined by ':'.
// Every other kind is a scalar, and a sequence or map is rejected with a message saying so.
//
// Thread safety: all functions here are pure; ValueType objects are immutable after construction.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "nerve/config.hpp"

namespace nerve::config {

enum class ValueKind {
  integer,        // decimal integer in [min, max]; optionally a word (e.g. "auto") standing for 0
  boolean,        // true/false, yes/no, on/off, 1/0 (any case)
  duration,       // integer microseconds, or an integer with a unit ns|us|ms|s; in [min, max]
  choice,         // one word out of a fixed list
  text,           // any string
  output_path,    // a path nerve writes to, verbatim; "" = not set; only blanks is an error
  readable_file,  // a path naming an existing, readable regular file ("" = not set)
  list,           // non-empty words separated by commas (or a YAML sequence of them)
  records,        // text, or a YAML sequence of text items or maps with the `fields` (joined by ':')
};

// A value of a choice type that the documentation promises but this build does not implement yet.
struct PlannedChoice {
  std::string_view value;         // e.g. "heft"
  std::string_view arrives_with;  // e.g. "the performance-model work"
};

struct ValueType {
  ValueKind kind = ValueKind::text;
  std::int64_t min = 0;            // integer: smallest value; duration: shortest, in nanoseconds
  std::int64_t max = 0;            // integer: largest value; duration: longest, in nanoseconds
  std::string_view zero_word;      // integer: a word accepted for (and shown instead of) 0
  std::int64_t resolution_ns = 1;  // duration: the value must be a whole multiple of this
  std::vector<std::string_view> choices;
  std::vector<PlannedChoice> planned_choices;
  std::string_view item;                  // list, records: what one item is, for messages
  std::vector<std::string_view> fields;   // records: the fields of a map item, in the order joined
  std::string_view empty_means = "none";  // output_path: what the empty value stands for, for messages

  // expected() describes the accepted values for messages and documentation, e.g.
  // "an integer 0..4096 or 'auto'", "one of eager, locality_aware_stealing".
  std::string expected() const;
};

ValueType integer_type(std::int64_t min, std::int64_t max, std::string_view zero_word = {});
ValueType boolean_type();
ValueType duration_type(std::chrono::nanoseconds min, std::chrono::nanoseconds max,
                        std::chrono::nanoseconds resolution);
ValueType choice_type(std::vector<std::string_view> choices, std::vector<PlannedChoice> planned = {});
ValueType text_type();
// output_path_type(): `empty_means` says what "" stands for ("none": nothing is written; "the default
// directory" for perf.model_dir), in the messages that expect a path.
ValueType output_path_type(std::string_view empty_means = "none");
ValueType readable_file_type();
// list_type(): `what` names one item in messages ("a device index or name").
ValueType list_type(std::string_view what);
// records_type(): `what` names one item in messages; `fields` are a map item's, joined by ':'.
ValueType records_type(std::string_view what, std::vector<std::string_view> fields);

// RawValue is a value as a source delivered it, before any checking.
struct RawValue {
  enum class Shape { scalar, null, sequence, map };
  Shape shape = Shape::scalar;
  std::string text;                // Shape::scalar
  std::vector<std::string> items;  // Shape::sequence: the items' text ("" for an item that is no scalar)
  std::vector<Shape> item_shapes;  // Shape::sequence: each item's shape, when the source knows it
  // Shape::sequence, an item of Shape::map: its fields in file order, each with its text, or no
  // text when the field's value is not a scalar (a YAML source fills it; others have no maps).
  using Field = std::pair<std::string, std::optional<std::string>>;
  std::vector<std::vector<Field>> item_fields;

  static RawValue scalar(std::string text) { return RawValue{Shape::scalar, std::move(text), {}, {}, {}}; }
  static RawValue null() { return RawValue{Shape::null, {}, {}, {}, {}}; }
  static RawValue map() { return RawValue{Shape::map, {}, {}, {}, {}}; }
  static RawValue sequence(std::vector<std::string> items, std::vector<Shape> item_shapes = {},
                           std::vector<std::vector<Field>> item_fields = {}) {
    return RawValue{Shape::sequence, {}, std::move(items), std::move(item_shapes), std::move(item_fields)};
  }
};

struct ParsedValue {
  std::string text;  // normalized, as shown in Config::entries and by nerve-info
  std::variant<std::int64_t, bool, std::chrono::nanoseconds, std::string> data;

  // The accessors throw std::bad_variant_access when used with the wrong kind (a bug in a key row).
  std::int64_t integer() const { return std::get<std::int64_t>(data); }
  bool boolean() const { return std::get<bool>(data); }
  std::chrono::nanoseconds duration() const { return std::get<std::chrono::nanoseconds>(data); }
  const std::string& string() const { return std::get<std::string>(data); }
};

// parse_value() checks `raw` against `type` for configuration key `key`. A relative readable_file
// path from a file source is resolved against that file's directory. Throws ConfigError naming the
// key, the origin, the value and what was expected; never anything else.
ParsedValue parse_value(std::string_view key, const ValueType& type, const RawValue& raw,
                        const ConfigOrigin& origin);

// format_duration() gives the shortest exact text for `d`: "0", "1500us", "10ms", "2s".
std::string format_duration(std::chrono::nanoseconds d);

}  // namespace nerve::config
