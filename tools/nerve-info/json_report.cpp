// report_to_json(): the whole report as one JSON document (schema: docs/NERVE_INFO.md).
#include <string>

#include "report.hpp"
#include "topology/topology_json.hpp"

namespace nerve::info {
namespace {

// Fields in the order docs/NERVE_INFO.md lists them, so that the document reads top-down.
using Json = nlohmann::ordered_json;

// The schema name changes only when a field changes meaning or disappears; new fields may be added.
constexpr const char* schema = "nerve.info/1";

const char* source_name(ConfigSource source) {
  switch (source) {
    case ConfigSource::default_value: return "default";
    case ConfigSource::file: return "file";
    case ConfigSource::environment: return "environment";
    case ConfigSource::api: return "api";
  }
  return "unknown";
}

Json origin_json(const ConfigOrigin& origin) {
  Json json = {{"source", source_name(origin.source)}};
  if (origin.source == ConfigSource::file) {
    json["file"] = origin.file;
    json["line"] = origin.line;
  }
  if (origin.source == ConfigSource::environment) json["variable"] = origin.variable;
  json["text"] = origin.describe();  // as the text output shows it
  return json;
}

Json config_json(const Config& config) {
  Json entries = Json::array();
  for (const Config::Entry& entry : config.entries) {
    entries.push_back({{"key", entry.key}, {"value", entry.value}, {"origin", origin_json(entry.origin)}});
  }
  return entries;
}

Json worker_json(const WorkerInfo& worker) {
  return {
      {"index", worker.index},
      {"core", worker.core},
      {"numa_node", worker.numa_node},
      {"package", worker.package},
      {"pu_os_indices", worker.planned_pus},
      {"bound", worker.bound},
      {"not_bound_reason", worker.bound ? Json(nullptr) : Json(worker.not_bound_reason)},
      {"application_thread", worker.application_thread},
      {"observed_cpus", worker.observed_cpus ? Json(*worker.observed_cpus) : Json(nullptr)},
  };
}

Json pool_json(const WorkerPool& pool) {
  return {{"count", pool.count},
          {"automatic", pool.automatic},
          {"reason", pool.reason},
          {"allowed_cpus", pool.allowed_cpus},
          {"available_cpus", pool.available_cpus},
          {"thread_affinity", affinity_name(pool.affinity)}};
}

}  // namespace

nlohmann::ordered_json report_to_json(const Report& report) {
  Json workers = Json::array();
  for (const WorkerInfo& worker : report.workers) workers.push_back(worker_json(worker));
  Json devices = Json::array();
  for (const DeviceInfo& device : report.devices) {
    Json entry = {{"kind", device.kind}, {"name", device.name}, {"count", device.count}};
    if (device.kind != "cpu") {
      entry["index"] = device.index;
      entry["gpu_devices_index"] =
          device.gpu_devices_index >= 0 ? Json(device.gpu_devices_index) : Json(nullptr);
      entry["backend"] = device.backend;
      entry["memory_node"] = device.memory_node;
      entry["memory_node_name"] = device.memory_node_name;
      entry["memory_bytes"] = device.memory_bytes;
      entry["compute_units"] = device.compute_units;
      entry["numa_node"] = device.numa_node;
      entry["pci_bus_id"] = device.pci_bus_id;
      entry["unified_memory"] = device.unified_memory;
      entry["shares_host_cores"] = device.shares_host_cores;
      entry["queues"] = device.queues;
      entry["max_pending_transfers"] = device.max_pending_transfers;
    }
    devices.push_back(std::move(entry));
  }
  return {
      {"schema", schema},
      {"version", report.version},
      {"topology", Json(topology::topology_to_json(report.topology))},
      {"worker_pool", pool_json(report.pool)},
      {"workers", workers},
      {"config", config_json(report.config)},
      {"devices", devices},
      {"backend_notes", report.backend_notes},
      {"host_memory", report.host_memory},
  };
}

}  // namespace nerve::info
