// json_text.hpp — JSON documents as text, whatever bytes their strings hold.
//
// Names come from users (task, kernel and buffer names, paths) and need not be UTF-8; nlohmann::json
// throws on invalid UTF-8 while dumping, which would lose a whole stats file, trace or model for
// one odd byte. json_text() writes such bytes as U+FFFD instead.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace nerve::detail {

template <class Json>
std::string json_text(const Json& document, int indent = -1) {
  return document.dump(indent, ' ', false, Json::error_handler_t::replace);
}

}  // namespace nerve::detail
