// json_report.cpp — the --json document (schema "openclaw.benchmark/1", docs/BENCHMARK_JSON.md) and
// reading it back (--compare, --from-json).
#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "report.hpp"

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

template <class T>
T get(const Json& json, const char* key) {
  if (!json.contains(key)) throw std::runtime_error(std::string("missing field \"") + key + "\"");
  return json.at(key).get<T>();
}

// container() is json[key], which must be an array (or, with `object`, an object): iterating a null
// or a number yields nothing, so "workloads": null read as a report of no workloads, which --compare
// matched nothing against and --fail-over never failed.
const Json& container(const Json& json, const char* key, bool object = false) {
  if (!json.contains(key)) throw std::runtime_error(std::string("missing field \"") + key + "\"");
  const Json& value = json.at(key);
  if (object ? !value.is_object() : !value.is_array())
    throw std::runtime_error(std::string("field \"") + key + "\": expected " +
                             (object ? "an object" : "an array") + ", found " + value.type_name());
  return value;
}

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

  std::ofstream out(path);
  out << doc.dump(2) << '\n';
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

RunReport read_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  Json doc;
  try {
    doc = Json::parse(in);
    if (get<std::string>(doc, "schema") != schema)
      throw std::runtime_error("schema is \"" + get<std::string>(doc, "schema") + "\", expected \"" + schema +
                               "\"");
    RunReport report;
    report.tool_version = doc.at("tool").at("version").get<std::string>();
    report.git_commit = doc.at("tool").at("git_commit").get<std::string>();
    report.started_at = get<std::string>(doc, "started_at");
    report.duration_s = get<double>(doc, "duration_s");
    const Json& options = doc.at("options");
    report.quick = get<bool>(options, "quick");
    report.threads = get<unsigned>(options, "threads");
    report.repetitions = get<int>(options, "repetitions");
    report.warmup = get<int>(options, "warmup");
    report.settle_ms = get<int>(options, "settle_ms");
    report.only = get<std::vector<std::string>>(options, "only");
    if (options.contains("parameters"))  // absent in files of the first tool version
      report.parameters = options.at("parameters").get<std::map<std::string, std::string>>();
    const Json& machine = doc.at("machine");
    report.hostname = get<std::string>(machine, "hostname");
    report.cpu_model = get<std::string>(machine, "cpu_model");
    report.hardware_threads = get<unsigned>(machine, "hardware_threads");
    const Json& topology = machine.at("topology");
    report.topology_description = get<std::string>(topology, "description");
    report.packages = get<int>(topology, "packages");
    report.numa_nodes = get<int>(topology, "numa_nodes");
    report.cores = get<int>(topology, "cores");
    report.pus = get<int>(topology, "pus");
    for (const auto& c : container(topology, "caches"))
      report.caches.emplace_back(get<int>(c, "level"), get<std::uint64_t>(c, "size_bytes"));
    for (const auto& [name, version] : container(doc, "versions", true).items())
      report.versions.emplace_back(name, version.is_null() ? "" : version.get<std::string>());
    for (const auto& e : container(doc, "config"))
      report.config.push_back(
          {get<std::string>(e, "key"), get<std::string>(e, "value"), get<std::string>(e, "origin")});
    for (const auto& w : container(doc, "workloads")) {
      WorkloadRun run;
      run.result.id = get<std::string>(w, "id");
      run.result.title = get<std::string>(w, "title");
      run.result.size = get<std::string>(w, "size");
      run.duration_s = get<double>(w, "duration_s");
      run.load_before = w.at("load_average").at("before").get<double>();
      run.load_after = w.at("load_average").at("after").get<double>();
      for (const auto& j : container(w, "measurements")) {
        Measurement m;
        m.case_name = get<std::string>(j, "case");
        m.runtime = get<std::string>(j, "runtime");
        m.variant = get<std::string>(j, "variant");
        m.value = get<double>(j, "value");
        m.unit = get<std::string>(j, "unit");
        m.lower_is_better = get<bool>(j, "lower_is_better");
        m.min = get<double>(j, "min");
        m.max = get<double>(j, "max");
        m.mad = get<double>(j, "mad");
        m.samples = get<std::vector<double>>(j, "samples");
        m.tasks = get<std::uint64_t>(j, "tasks");
        m.verified = get<bool>(j, "verified");
        m.note = get<std::string>(j, "note");
        for (const auto& [name, value] : container(j, "extra", true).items())
          m.extra.emplace_back(name, value.get<double>());
        run.result.measurements.push_back(std::move(m));
      }
      report.workloads.push_back(std::move(run));
    }
    for (const auto& s : container(doc, "skipped"))
      report.skipped.push_back(
          {get<std::string>(s, "id"), get<std::string>(s, "title"), get<std::string>(s, "reason")});
    for (const auto& s : container(doc, "scaling")) {
      ScalingSeries series{get<std::string>(s, "workload"), get<std::string>(s, "case"),
                           get<std::string>(s, "variant"),  get<std::string>(s, "unit"),
                           get<bool>(s, "lower_is_better"), {}};
      for (const auto& p : container(s, "points"))
        series.points.push_back({get<unsigned>(p, "threads"), get<double>(p, "value"), get<double>(p, "mad"),
                                 get<bool>(p, "verified")});
      report.scaling.push_back(std::move(series));
    }
    return report;
  } catch (const nlohmann::json::exception& error) {
    throw std::runtime_error(path.string() + ": not an openclaw-benchmark JSON report: " + error.what());
  } catch (const std::runtime_error& error) {
    throw std::runtime_error(path.string() + ": " + error.what());
  }
}

}  // namespace nerve::benchmark
