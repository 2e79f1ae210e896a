#include "util/json_stream.hpp"

#include <algorithm>

#include "util/json_text.hpp"

namespace nerve::detail {
namespace {

// new_line(): what nlohmann::json writes before a member or element at `depth` (or a closing bracket
// at `depth`): a line break and the indentation when pretty-printing, nothing when compact.
void new_line(std::ostream& out, int indent, int depth) {
  if (indent < 0) return;
  out << '\n' << std::string(static_cast<std::size_t>(indent * depth), ' ');
}

// write_nested(): `value` as it reads at `depth` of a pretty-printed document: its own dump with every
// line after the first indented by `depth` levels (its strings hold no raw line breaks: JSON escapes
// them).
void write_nested(std::ostream& out, const nlohmann::json& value, int indent, int depth) {
  const std::string text = json_text(value, indent);
  if (indent <= 0 || depth == 0) {
    out << text;
    return;
  }
  const std::string margin(static_cast<std::size_t>(indent * depth), ' ');
  std::size_t from = 0;
  for (std::size_t at = text.find('\n'); at != std::string::npos; at = text.find('\n', from)) {
    out.write(text.data() + from, static_cast<std::streamsize>(at + 1 - from));
    out << margin;
    from = at + 1;
  }
  out.write(text.data() + from, static_cast<std::streamsize>(text.size() - from));
}

void write_value(std::ostream& out, const nlohmann::json& value, int indent, int depth,
                 const std::string& where, std::span<const StreamedArray> streamed) {
  for (const StreamedArray& array : streamed) {
    if (array.where != where) continue;
    JsonArrayWriter writer(out, indent, depth);
    array.fill(writer);
    writer.finish();
    return;
  }
  const bool holds_streamed = std::any_of(streamed.begin(), streamed.end(), [&](const StreamedArray& array) {
    return array.where.size() > where.size() && array.where.starts_with(where + '/');
  });
  if (!holds_streamed || !value.is_structured() || value.empty()) {
    write_nested(out, value, indent, depth);
    return;
  }
  const bool object = value.is_object();
  out << (object ? '{' : '[');
  bool first = true;
  std::size_t index = 0;
  for (const auto& item : value.items()) {
    if (!first) out << ',';
    first = false;
    new_line(out, indent, depth + 1);
    std::string path = where + '/';
    if (object) {
      out << json_text(nlohmann::json(item.key())) << (indent >= 0 ? ": " : ":");
      path += item.key();  // the arrays' names hold no '/' or '~' to escape
    } else {
      path += std::to_string(index++);
    }
    write_value(out, item.value(), indent, depth + 1, path, streamed);
  }
  new_line(out, indent, depth);
  out << (object ? '}' : ']');
}

}  // namespace

void JsonArrayWriter::add(const nlohmann::json& element) {
  out_ << (empty_ ? '[' : ',');
  empty_ = false;
  new_line(out_, indent_, depth_ + 1);
  write_nested(out_, element, indent_, depth_ + 1);
}

void JsonArrayWriter::finish() {
  if (empty_) {
    out_ << "[]";
    return;
  }
  new_line(out_, indent_, depth_);
  out_ << ']';
}

void write_json(std::ostream& out, const nlohmann::json& skeleton, int indent,
                std::span<const StreamedArray> streamed) {
  write_value(out, skeleton, indent, 0, "", streamed);
}

}  // namespace nerve::detail
