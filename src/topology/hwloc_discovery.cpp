// Topology::discover(): choose and load the hwloc topology, then read it into a Topology::Builder.
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>
#include <utility>

#include <fmt/format.h>

#include "nerve/config.hpp"
#include "nerve/error.hpp"
#include "nerve/topology.hpp"

#include "config/diagnostics.hpp"
#include "topology/hwloc_reader.hpp"

namespace nerve {
namespace topology {
namespace {

constexpr const char* synthetic_key = "topology.synthetic";
constexpr const char* xml_key = "topology.xml";

void use_synthetic(hwloc_topology_t topology, const std::string& description) {
  if (hwloc_topology_set_synthetic(topology, description.c_str()) != 0) {
    throw ConfigError(fmt::format("'{}' is not a valid hwloc synthetic topology (example: \"pack:2 numa:2 "
                                  "core:4 pu:1\")",
                                  description),
                      synthetic_key);
  }
}

void use_xml(hwloc_topology_t topology, const std::string& path) {
  // Checked here because hwloc's own message for a missing file is only a failed return.
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) {
    throw ConfigError(fmt::format("hwloc XML file '{}' does not exist or is not a regular file", path),
                      xml_key);
  }
  if (hwloc_topology_set_xml(topology, path.c_str()) != 0) {
    throw ConfigError(
        fmt::format("cannot read '{}' as an hwloc XML topology: {}", path, std::strerror(errno)), xml_key);
  }
}

void load(LoadedTopology& loaded, const Config::TopologySource& source) {
  if (hwloc_topology_load(loaded.handle.get()) == 0) return;
  const std::string reason = std::strerror(errno);
  if (!source.synthetic.empty()) {
    throw ConfigError(
        fmt::format("hwloc cannot build the synthetic topology '{}': {}", source.synthetic, reason),
        synthetic_key);
  }
  if (!source.xml.empty()) {
    throw ConfigError(fmt::format("'{}' is not a valid hwloc XML topology: {}", source.xml, reason), xml_key);
  }
  throw Error(ErrorCode::internal, fmt::format("hwloc cannot discover this machine's topology: {}", reason));
}

}  // namespace

HwlocTopology make_hwloc_topology() {
  hwloc_topology_t topology = nullptr;
  if (hwloc_topology_init(&topology) != 0) {
    throw Error(ErrorCode::internal, fmt::format("hwloc_topology_init failed: {}", std::strerror(errno)));
  }
  return HwlocTopology(topology);
}

LoadedTopology load_hwloc_topology(const Config::TopologySource& source) {
  if (!source.synthetic.empty() && !source.xml.empty()) {
    throw ConfigError("topology.synthetic and topology.xml are both set; choose one", xml_key);
  }
  LoadedTopology loaded{make_hwloc_topology(), false, "real machine"};
  if (!source.synthetic.empty()) {
    use_synthetic(loaded.handle.get(), source.synthetic);
    loaded.synthetic = true;
    loaded.description = source.synthetic;
  } else if (!source.xml.empty()) {
    use_xml(loaded.handle.get(), source.xml);
    loaded.synthetic = true;
    loaded.description = source.xml;
  }
  load(loaded, source);
  // HWLOC_XMLFILE or HWLOC_SYNTHETIC in the environment also replace the real machine; its PUs then
  // are not ours to bind to.
  if (!loaded.synthetic && hwloc_topology_is_thissystem(loaded.handle.get()) == 0) {
    loaded.synthetic = true;
    loaded.description = "hwloc environment override (HWLOC_XMLFILE / HWLOC_SYNTHETIC)";
  }
  return loaded;
}

}  // namespace topology

Topology Topology::discover(const Config& config) {
  topology::LoadedTopology loaded = [&config] {
    try {
      return topology::load_hwloc_topology(config.topology);
    } catch (const ConfigError& error) {
      // topology.synthetic / topology.xml that hwloc rejects: say where the value came from, as
      // every other configuration error does (docs/CONFIG.md).
      config::rethrow_with_origin(config, error);
    }
  }();
  Builder builder;
  builder.synthetic = loaded.synthetic;
  builder.description = std::move(loaded.description);
  topology::read_hwloc_objects(loaded.handle.get(), builder);
  builder.numa_distances = topology::read_numa_distances(loaded.handle.get());
  return std::move(builder).finish();
}

}  // namespace nerve
