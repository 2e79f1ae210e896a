// model_schema.hpp — whether a file of perf.model_dir is of the schema this nerve reads and writes.
//
// The directory outlives any one nerve version, and other programs may put files there: a file that
// parses but is not of this version's schema (a newer nerve's, another program's, one without
// "schema") is never used and never overwritten, for the kernel models (HistoryModels) and the bus
// model (BusModel) alike — replacing it would lose what a newer version learnt.
#pragma once

#include <optional>
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

}  // namespace nerve::detail
