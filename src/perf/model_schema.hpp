// model_schema.hpp — whether a file of perf.model_dir is of the schema this nerve reads and writes,
// and shaped as one.
//
// The directory outlives any one nerve version, and other programs may put files there: a file that
// parses but is not of this version's schema (a newer nerve's, another program's, one without
// "schema") is never used and never overwritten, for the kernel models (HistoryModels) and the bus
// model (BusModel) alike — replacing it would lose what a newer version learnt. A file of the schema
// whose rows are misshapen is skipped with a warning that names the row and the field, for both alike:
// nlohmann's own errors name neither ("key 'to' not found", "cannot use at() with number").
#pragma once

#include <algorithm>
#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "util/json_text.hpp"

namespace nerve::detail {

// other_schema(): why `json` is not a `schema` document, for a warning; nullopt when it is one.
inline std::optional<std::string> other_schema(const nlohmann::json& json, std::string_view schema) {
  if (!json.is_object() || !json.contains("schema"))
    return fmt::format("it has no \"schema\": not a {} file", schema);
  const nlohmann::json& named = json.at("schema");
  if (named.is_string() && named.get_ref<const std::string&>() == schema) return std::nullopt;
  return fmt::format("its schema is {}, not \"{}\"", json_text(named), schema);
}

// described(): a JSON value for a message: a scalar as written, an array or object by its kind.
inline std::string described(const nlohmann::json& value) {
  if (value.is_array()) return "an array";
  if (value.is_object()) return "an object";
  return json_text(value);
}

// model_rows(): the array `name` of a model file ("entries", "links"), every item an object; throws
// std::runtime_error saying which is not.
inline const nlohmann::json& model_rows(const nlohmann::json& json, std::string_view name) {
  const auto rows = json.find(name);
  if (rows == json.end()) throw std::runtime_error(fmt::format("it has no \"{}\"", name));
  if (!rows->is_array())
    throw std::runtime_error(fmt::format("\"{}\" is {}, not an array", name, described(*rows)));
  for (std::size_t index = 0; index < rows->size(); ++index) {
    const nlohmann::json& row = (*rows)[index];
    if (!row.is_object())
      throw std::runtime_error(fmt::format("{}[{}] is {}, not an object", name, index, described(row)));
  }
  return *rows;
}

enum class FieldKind { number, text, numbers };

// row_field(): field `name` of `row`, item `index` of the array `rows` (from model_rows()), of `kind`;
// nullptr when the row has none and it is not `required`. A missing or mistyped field throws
// std::runtime_error naming the row and the field: `entries[2]: "mean_ns" is "10", not a number`.
inline const nlohmann::json* row_field(const nlohmann::json& row, std::string_view rows, std::size_t index,
                                       const char* name, FieldKind kind, bool required = true) {
  const auto field = row.find(name);
  if (field == row.end()) {
    if (!required) return nullptr;
    throw std::runtime_error(fmt::format("{}[{}] has no \"{}\"", rows, index, name));
  }
  const auto number = [](const nlohmann::json& value) { return value.is_number(); };
  const bool fits = kind == FieldKind::number ? field->is_number()
                    : kind == FieldKind::text
                        ? field->is_string()
                        : field->is_array() && std::all_of(field->begin(), field->end(), number);
  if (!fits) {
    throw std::runtime_error(fmt::format("{}[{}]: \"{}\" is {}, not {}", rows, index, name, described(*field),
                                         kind == FieldKind::number ? "a number"
                                         : kind == FieldKind::text ? "a string"
                                                                   : "an array of numbers"));
  }
  return &*field;
}

}  // namespace nerve::detail
