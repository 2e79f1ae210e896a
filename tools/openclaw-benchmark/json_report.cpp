// json_report.cpp — the --json document (schema "openclaw.benchmark/1", docs/BENCHMARK_JSON.md) and
// reading it back (--compare, --from-json).
#include <concepts>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/files.hpp"
#include "report.hpp"
#include "util/json_text.hpp"

namespace nerve::benchmark {
namespace {

using Json = nlohmann::ordered_json;
constexpr const char* schema = "openclaw.benchmark/1";

Json measurement_json(const Measurement& m, const Measurement* nerve) {
  Json extra = Json::object();
  for (const auto& [name, value] : m.extra) extra[name] = value;
  return {{"case", m.case_name},
          {"runtime", m.runtime},
          {"variant", m.variant},
          {"value", m.value},
          {"unit", m.unit},
          {"lower_is_better", m.lower_is_better},
          {"min", m.min},
          {"max", m.max},
          {"mad", m.mad},
          {"samples", m.samples},
          {"tasks", m.tasks},
          {"verified", m.verified},
          {"note", m.note},
          {"extra", extra},
          {"nerve_speedup", nerve == nullptr || nerve == &m ? Json(nullptr) : Json(speed(*nerve, m))}};
}

Json comparison_json(const std::vector<Compared>& comparison) {
  Json list = Json::array();
  for (const auto& c : comparison) {
    list.push_back({{"workload", c.workload},
                    {"case", c.case_name},
                    {"variant", c.variant},
                    {"runtime", c.runtime},
                    {"before", c.before},
                    {"after", c.after},
                    {"change", c.change},
                    {"threshold", c.threshold},
                    {"verdict", change_name(c.verdict)}});
  }
  return list;
}

// Reading a report back. A field that is missing or of the wrong type is a BadField, whose text says
// where it is from the top of the document, e.g. `workloads[0] "W1" measurements[2] "10^6
// independent tasks / oneTBB task_group" field "mad": expected a number, found a string` (nlohmann's
// own "type must be number, but is string" said neither which field nor where).
struct BadField : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// found() names what a value is: "a string", "an array", "null", or the number or boolean itself.
std::string found(const Json& value) {
  if (value.is_number() || value.is_boolean() || value.is_null()) return value.dump();
  const std::string type = value.type_name();
  return (type == "object" || type == "array" ? "an " : "a ") + type;
}

[[noreturn]] void wrong_type(const std::string& where, const char* expected, const Json& value) {
  throw BadField(where + ": expected " + expected + ", found " + found(value));
}

// read() converts one value after checking its type (nlohmann would turn 2.5 into the int 2).
void read(const Json& value, const std::string& where, std::string& out) {
  if (!value.is_string()) wrong_type(where, "a string", value);
  out = value.get<std::string>();
}
void read(const Json& value, const std::string& where, double& out) {
  if (!value.is_number()) wrong_type(where, "a number", value);
  out = value.get<double>();
}
void read(const Json& value, const std::string& where, bool& out) {
  if (!value.is_boolean()) wrong_type(where, "true or false", value);
  out = value.get<bool>();
}
template <std::integral T>
void read(const Json& value, const std::string& where, T& out) {
  if (!value.is_number_integer()) wrong_type(where, "a whole number", value);
  if (value.is_number_unsigned() ? !std::in_range<T>(value.get<std::uint64_t>())
                                 : !std::in_range<T>(value.get<std::int64_t>()))
    throw BadField(where + ": " + value.dump() + " is out of range");
  out = value.get<T>();
}
void read(const Json& value, const std::string& where, std::map<std::string, std::string>& out) {
  if (!value.is_object()) wrong_type(where, "an object", value);
  for (const auto& [key, item] : value.items()) read(item, where + " \"" + key + "\"", out[key]);
}
// An optional value is null or of its type, never absent (docs/BENCHMARK_JSON.md): "a string or null".
void read(const Json& value, const std::string& where, std::optional<std::string>& out) {
  if (value.is_null()) return out.reset();
  if (!value.is_string()) wrong_type(where, "a string or null", value);
  out = value.get<std::string>();
}
void read(const Json& value, const std::string& where, std::optional<double>& out) {
  if (value.is_null()) return out.reset();
  if (!value.is_number()) wrong_type(where, "a number or null", value);
  out = value.get<double>();
}
template <class T>
void read(const Json& value, const std::string& where, std::vector<T>& out) {
  if (!value.is_array()) wrong_type(where, "an array", value);
  out.resize(value.size());
  for (std::size_t i = 0; i < value.size(); ++i)
    read(value[i], where + "[" + std::to_string(i) + "]", out[i]);
}

std::string join(const std::string& where, const std::string& name) {
  return where.empty() ? name : where + " " + name;
}

// Object is an object of the document and where it is (`where`: "" for the document itself).
class Object {
 public:
  Object(const Json& json, std::string where) : json_(json), where_(std::move(where)) {
    if (!json_.is_object()) wrong_type(where_.empty() ? "the document" : where_, "an object", json_);
  }
  const Json& json() const { return json_; }

  template <class T>
  T get(const std::string& key) const {
    T value{};
    read(at(key), field(key), value);
    return value;
  }
  Object object(const std::string& key) const { return {at(key), join(where_, key)}; }
  // items() is the array `key`, which must be an array ("workloads": null would iterate as no
  // workloads), as Objects named by their index and the text of their fields `labels`, e.g.
  // `workloads[2] "W5"`.
  std::vector<Object> items(const std::string& key, std::initializer_list<const char*> labels = {}) const {
    const Json& list = at(key);
    if (!list.is_array()) wrong_type(field(key), "an array", list);
    std::vector<Object> objects;
    for (std::size_t i = 0; i < list.size(); ++i) {
      std::string label;
      for (const char* name : labels) {
        if (list[i].is_object() && list[i].contains(name) && list[i][name].is_string())
          label += (label.empty() ? "" : " / ") + list[i][name].get<std::string>();
      }
      objects.emplace_back(list[i], join(where_, key + "[" + std::to_string(i) + "]") +
                                        (label.empty() ? "" : " \"" + label + "\""));
    }
    return objects;
  }
  // items_or_null() is items() of an array that may be null instead ("comparison": none).
  std::vector<Object> items_or_null(const std::string& key,
                                    std::initializer_list<const char*> labels = {}) const {
    const Json& list = at(key);
    if (list.is_null()) return {};
    if (!list.is_array()) wrong_type(field(key), "an array or null", list);
    return items(key, labels);
  }
  const std::string& where() const { return where_; }

 private:
  const Json& at(const std::string& key) const {
    if (!json_.contains(key))
      throw BadField(where_ + (where_.empty() ? "" : ": ") + "missing field \"" + key + "\"");
    return json_.at(key);
  }
  std::string field(const std::string& key) const { return join(where_, "field \"" + key + "\""); }

  const Json& json_;
  std::string where_;
};

}  // namespace

void write_json(const RunReport& report, const std::vector<Compared>* comparison,
                const std::filesystem::path& path) {
  Json doc;
  doc["schema"] = schema;
  doc["tool"] = {
      {"name", "openclaw-benchmark"}, {"version", report.tool_version}, {"git_commit", report.git_commit}};
  doc["started_at"] = report.started_at;
  doc["duration_s"] = report.duration_s;
  doc["verified"] = report.verified();
  doc["options"] = {{"quick", report.quick},
                    {"threads", report.threads},
                    {"repetitions", report.repetitions},
                    {"warmup", report.warmup},
                    {"settle_ms", report.settle_ms},
                    {"only", report.only},
                    {"parameters", report.parameters},
                    {"config_file", report.config_file.empty() ? Json(nullptr) : Json(report.config_file)}};
  Json caches = Json::array();
  for (const auto& [level, bytes] : report.caches)
    caches.push_back({{"level", level}, {"size_bytes", bytes}});
  doc["machine"] = {{"hostname", report.hostname},
                    {"cpu_model", report.cpu_model},
                    {"hardware_threads", report.hardware_threads},
                    {"topology",
                     {{"description", report.topology_description},
                      {"packages", report.packages},
                      {"numa_nodes", report.numa_nodes},
                      {"cores", report.cores},
                      {"pus", report.pus},
                      {"caches", caches}}}};
  Json versions = Json::object();
  for (const auto& [name, version] : report.versions)
    versions[name] = version.empty() ? Json(nullptr) : Json(version);
  doc["versions"] = versions;
  Json config = Json::array();
  for (const auto& entry : report.config)
    config.push_back({{"key", entry.key}, {"value", entry.value}, {"origin", entry.origin}});
  doc["config"] = config;
  Json workloads = Json::array();
  for (const auto& run : report.workloads) {
    Json measurements = Json::array();
    for (const auto& m : run.result.measurements)
      measurements.push_back(measurement_json(m, headline(run.result, m.case_name)));
    workloads.push_back({{"id", run.result.id},
                         {"title", run.result.title},
                         {"size", run.result.size},
                         {"verified", run.result.verified()},
                         {"duration_s", run.duration_s},
                         {"load_average", {{"before", run.load_before}, {"after", run.load_after}}},
                         {"measurements", measurements}});
  }
  doc["workloads"] = workloads;
  Json skipped = Json::array();
  for (const auto& s : report.skipped)
    skipped.push_back({{"id", s.id}, {"title", s.title}, {"reason", s.reason}});
  doc["skipped"] = skipped;
  Json scaling = Json::array();
  for (const auto& series : report.scaling) {
    Json points = Json::array();
    for (const auto& p : series.points)
      points.push_back(
          {{"threads", p.threads}, {"value", p.value}, {"mad", p.mad}, {"verified", p.verified}});
    scaling.push_back({{"workload", series.workload},
                       {"case", series.case_name},
                       {"variant", series.variant},
                       {"unit", series.unit},
                       {"lower_is_better", series.lower_is_better},
                       {"points", points}});
  }
  doc["scaling"] = scaling;
  doc["comparison"] = comparison != nullptr ? comparison_json(*comparison) : Json(nullptr);

  // json_text(): a text that is not UTF-8 (a path, a configuration value, the host name) is written
  // as U+FFFD; dump() threw on it, and the whole report was lost.
  nerve::tools::write_file(path, nerve::detail::json_text(doc, 2) + '\n');
}

RunReport read_json(const std::filesystem::path& path) {
  const std::string text = nerve::tools::read_file(path);  // its errors name the file
  try {
    const Json json = Json::parse(text);
    const Object doc(json, "");
    if (const auto found_schema = doc.get<std::string>("schema"); found_schema != schema)
      throw BadField("field \"schema\" is \"" + found_schema + "\", expected \"" + schema + "\"");
    RunReport report;
    // Every field is read or checked, even those a report read back does not keep (the tool's name,
    // `verified`, the comparison): a file with one missing or of the wrong type is not a report.
    const Object tool = doc.object("tool");
    (void)tool.get<std::string>("name");
    report.tool_version = tool.get<std::string>("version");
    report.git_commit = tool.get<std::string>("git_commit");
    report.started_at = doc.get<std::string>("started_at");
    report.duration_s = doc.get<double>("duration_s");
    (void)doc.get<bool>("verified");  // recomputed from the workloads: RunReport::verified()
    const Object options = doc.object("options");
    report.quick = options.get<bool>("quick");
    report.threads = options.get<unsigned>("threads");
    report.repetitions = options.get<int>("repetitions");
    report.warmup = options.get<int>("warmup");
    report.settle_ms = options.get<int>("settle_ms");
    report.only = options.get<std::vector<std::string>>("only");
    report.parameters = options.get<std::map<std::string, std::string>>("parameters");
    report.config_file = options.get<std::optional<std::string>>("config_file").value_or("");
    const Object machine = doc.object("machine");
    report.hostname = machine.get<std::string>("hostname");
    report.cpu_model = machine.get<std::string>("cpu_model");
    report.hardware_threads = machine.get<unsigned>("hardware_threads");
    const Object topology = machine.object("topology");
    report.topology_description = topology.get<std::string>("description");
    report.packages = topology.get<int>("packages");
    report.numa_nodes = topology.get<int>("numa_nodes");
    report.cores = topology.get<int>("cores");
    report.pus = topology.get<int>("pus");
    for (const Object& c : topology.items("caches"))
      report.caches.emplace_back(c.get<int>("level"), c.get<std::uint64_t>("size_bytes"));
    const Object versions = doc.object("versions");
    for (const char* name : version_names)
      report.versions.emplace_back(name, versions.get<std::optional<std::string>>(name).value_or(""));
    for (const Object& e : doc.items("config", {"key"}))
      report.config.push_back(
          {e.get<std::string>("key"), e.get<std::string>("value"), e.get<std::string>("origin")});
    for (const Object& w : doc.items("workloads", {"id"})) {
      WorkloadRun run;
      run.result.id = w.get<std::string>("id");
      run.result.title = w.get<std::string>("title");
      run.result.size = w.get<std::string>("size");
      (void)w.get<bool>("verified");  // recomputed from the measurements: WorkloadResult::verified()
      run.duration_s = w.get<double>("duration_s");
      const Object load = w.object("load_average");
      run.load_before = load.get<double>("before");
      run.load_after = load.get<double>("after");
      for (const Object& j : w.items("measurements", {"case", "variant"})) {
        Measurement m;
        m.case_name = j.get<std::string>("case");
        m.runtime = j.get<std::string>("runtime");
        m.variant = j.get<std::string>("variant");
        m.value = j.get<double>("value");
        m.unit = j.get<std::string>("unit");
        m.lower_is_better = j.get<bool>("lower_is_better");
        m.min = j.get<double>("min");
        m.max = j.get<double>("max");
        m.mad = j.get<double>("mad");
        m.samples = j.get<std::vector<double>>("samples");
        m.tasks = j.get<std::uint64_t>("tasks");
        m.verified = j.get<bool>("verified");
        m.note = j.get<std::string>("note");
        const Object extra = j.object("extra");
        for (const auto& item : extra.json().items())
          m.extra.emplace_back(item.key(), extra.get<double>(item.key()));
        (void)j.get<std::optional<double>>("nerve_speedup");  // recomputed: speed()
        run.result.measurements.push_back(std::move(m));
      }
      report.workloads.push_back(std::move(run));
    }
    for (const Object& s : doc.items("skipped", {"id"}))
      report.skipped.push_back(
          {s.get<std::string>("id"), s.get<std::string>("title"), s.get<std::string>("reason")});
    for (const Object& s : doc.items("scaling", {"workload"})) {
      ScalingSeries series{s.get<std::string>("workload"), s.get<std::string>("case"),
                           s.get<std::string>("variant"),  s.get<std::string>("unit"),
                           s.get<bool>("lower_is_better"), {}};
      for (const Object& p : s.items("points"))
        series.points.push_back({p.get<unsigned>("threads"), p.get<double>("value"), p.get<double>("mad"),
                                 p.get<bool>("verified")});
      report.scaling.push_back(std::move(series));
    }
    // The comparison the file was written with; --compare compares again, against this run.
    for (const Object& c : doc.items_or_null("comparison", {"workload", "case", "variant"})) {
      for (const char* name : {"workload", "case", "variant", "runtime"}) (void)c.get<std::string>(name);
      for (const char* name : {"before", "after", "change", "threshold"}) (void)c.get<double>(name);
      if (const auto verdict = c.get<std::string>("verdict");
          verdict != "better" && verdict != "worse" && verdict != "same" && verdict != "missing")
        throw BadField(c.where() + " field \"verdict\": expected better, worse, same or missing, found \"" +
                       verdict + "\"");
    }
    return report;
  } catch (const std::exception& error) {  // BadField, or nlohmann's parse error
    throw std::runtime_error(path.string() + ": not an openclaw-benchmark JSON report: " + error.what());
  }
}

}  // namespace nerve::benchmark
