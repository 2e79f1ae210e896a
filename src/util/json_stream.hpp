// json_stream.hpp — a JSON document with large arrays, written as it is made, with json_text()'s bytes.
//
// dump_perf_stats() and the trace hold an element per task record. Built whole as a nlohmann::json
// (a node per value, a std::map per object) and then as one string, they needed ~2 KB per record at
// their peak: 2 GB for the default bound of a million records. Here the document is a skeleton
// holding everything else (small), in which each large array stands empty; write_json() writes the
// skeleton exactly as json_text(skeleton, indent) would, except that each of those arrays gets the
// elements its function adds, each written as soon as it is made.
#pragma once

#include <functional>
#include <ostream>
#include <span>
#include <string>

#include <nlohmann/json.hpp>

namespace nerve::detail {

// JsonArrayWriter: the elements of one streamed array, in order.
class JsonArrayWriter {
 public:
  JsonArrayWriter(std::ostream& out, int indent, int depth) : out_(out), indent_(indent), depth_(depth) {}
  JsonArrayWriter(const JsonArrayWriter&) = delete;
  JsonArrayWriter& operator=(const JsonArrayWriter&) = delete;

  void add(const nlohmann::json& element);
  // finish(): closes the array ("[]" when nothing was added).
  void finish();

 private:
  std::ostream& out_;
  int indent_;
  int depth_;
  bool empty_ = true;
};

// A streamed array: where it stands in the skeleton (a JSON pointer, "/tasks/records"; the skeleton
// holds an empty array there) and what fills it.
struct StreamedArray {
  std::string where;
  std::function<void(JsonArrayWriter&)> fill;
};

// write_json(): `skeleton` as json_text(skeleton, indent) writes it, the `streamed` arrays filled in.
// Throws what a filling function throws (the output is then incomplete).
void write_json(std::ostream& out, const nlohmann::json& skeleton, int indent,
                std::span<const StreamedArray> streamed);

}  // namespace nerve::detail
