// Topology::discover(): choose and load the hwloc topology, then read it into a Topology::Builder.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "nerve/config.hpp"
#include "nerve/error.hpp"
#include "nerve/topology.hpp"

#include "config/diagnostics.hpp"
#include "topology/hwloc_reader.hpp"
#include "topology/hwloc_xml_check.hpp"

namespace nerve {
namespace topology {
namespace {

constexpr const char* synthetic_key = "topology.synthetic";
constexpr const char* xml_key = "topology.xml";

// The most PUs a synthetic description may give: Linux's own limit (NR_CPUS with MAXSMP). hwloc builds
// whatever it is given, and a few bytes describe a billion PUs ("pack:1000 core:1000 pu:1000"), which
// hwloc takes minutes to build, and nerve's core distance matrix gigabytes to hold.
constexpr std::uint64_t max_synthetic_pus = 8192;

// arity_at() reads the number at `position` as hwloc does (strtoul with base 0: 0x1f hexadecimal,
// 017 octal), moving `position` past it; saturates at max_synthetic_pus + 1.
std::uint64_t arity_at(std::string_view text, std::size_t& position) {
  int base = 10;
  if (text.substr(position).starts_with("0x") || text.substr(position).starts_with("0X")) {
    base = 16;
    position += 2;
  } else if (text[position] == '0') {
    base = 8;
  }
  std::uint64_t value = 0;
  const char* const first = text.data() + position;
  const auto [last, error] = std::from_chars(first, text.data() + text.size(), value, base);
  position += static_cast<std::size_t>(last - first);
  if (error == std::errc::result_out_of_range) {
    while (position < text.size() && std::isxdigit(static_cast<unsigned char>(text[position]))) ++position;
    return max_synthetic_pus + 1;
  }
  return std::min(value, max_synthetic_pus + 1);
}

// described_pus() is the product of the arities in an hwloc synthetic description (hwloc gives
// every object of a level `arity` children of the next, ending with one PU per object of the last
// level when it is not pu), saturating at max_synthetic_pus + 1. An arity is any number not inside
// a type name ("l2", "numa1i"), attributes "(...)" or memory children "[...]": hwloc needs no blank
// between levels ("core:2core:2" is two levels), and reads a bare number as a level too. Counting
// too much only refuses a description hwloc would have refused; too little would let one through.
std::uint64_t described_pus(std::string_view description) {
  std::uint64_t pus = 1;
  int nesting = 0;
  for (std::size_t position = 0; position < description.size();) {
    const char c = description[position];
    const bool starts_number =
        std::isdigit(static_cast<unsigned char>(c)) &&
        (position == 0 || !std::isalnum(static_cast<unsigned char>(description[position - 1])));
    if (c == '(' || c == '[' || c == '{') ++nesting;
    if ((c == ')' || c == ']' || c == '}') && nesting > 0) --nesting;
    if (nesting > 0 || !starts_number) {
      ++position;
      continue;
    }
    const std::uint64_t arity = arity_at(description, position);
    if (arity != 0 && pus > max_synthetic_pus / arity) return max_synthetic_pus + 1;
    pus *= arity;
  }
  return pus;
}

void use_synthetic(hwloc_topology_t topology, const std::string& description) {
  if (described_pus(description) > max_synthetic_pus) {
    throw ConfigError(fmt::format("'{}' describes more than {} PUs, the most Linux supports (each level's "
                                  "count multiplies the ones above it)",
                                  description, max_synthetic_pus),
                      synthetic_key);
  }
  if (hwloc_topology_set_synthetic(topology, description.c_str()) != 0) {
    throw ConfigError(fmt::format("'{}' is not a valid hwloc synthetic topology (example: \"pack:2 numa:2 "
                                  "core:4 pu:1\")",
                                  description),
                      synthetic_key);
  }
}

// The largest topology.xml nerve reads: an hwloc export of 8192 PUs is 5 MiB.
constexpr std::size_t max_xml_bytes = std::size_t{64} << 20;

// read_xml() returns the content of the topology.xml file `path`, refusing one larger than
// max_xml_bytes before reading it all.
std::string read_xml(const std::string& path) {
  // Checked here because hwloc's own message for a missing file is only a failed return.
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) {
    throw ConfigError(fmt::format("hwloc XML file '{}' does not exist or is not a regular file", path),
                      xml_key);
  }
  std::ifstream file(path, std::ios::binary);
  if (!file) throw ConfigError(fmt::format("cannot open '{}': {}", path, std::strerror(errno)), xml_key);
  std::string text;
  std::vector<char> chunk(std::size_t{1} << 16);
  while (file.read(chunk.data(), static_cast<std::streamsize>(chunk.size())) || file.gcount() > 0) {
    text.append(chunk.data(), static_cast<std::size_t>(file.gcount()));
    if (text.size() > max_xml_bytes) {
      throw ConfigError(
          fmt::format("hwloc XML file '{}' is larger than {} MiB (an export of 8192 PUs is 5 MiB)", path,
                      max_xml_bytes >> 20),
          xml_key);
    }
  }
  if (file.bad()) throw ConfigError(fmt::format("cannot read '{}': {}", path, std::strerror(errno)), xml_key);
  return text;
}

// use_xml() hands hwloc the file's text once nerve's checks pass (hwloc_xml_check.hpp: hwloc 2.9
// crashes on some malformed files); the checked text itself, so that the file cannot change between
// the check and hwloc's reading.
void use_xml(hwloc_topology_t topology, const std::string& path) {
  const std::string text = read_xml(path);
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) {  // hwloc's answer: "Invalid argument"
    throw ConfigError(fmt::format("cannot read '{}' as an hwloc XML topology: the file is empty{}", path,
                                  text.empty() ? "" : " (blanks only)"),
                      xml_key);
  }
  if (const auto problem = find_hwloc_xml_problem(text)) {
    throw ConfigError(fmt::format("cannot read '{}' as an hwloc XML topology: {}", path, *problem), xml_key);
  }
  if (hwloc_topology_set_xmlbuffer(topology, text.c_str(), static_cast<int>(text.size() + 1)) != 0) {
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
  builder.description = loaded.description;
  try {
    topology::read_hwloc_objects(loaded.handle.get(), builder);
    builder.numa_distances = topology::read_numa_distances(loaded.handle.get());
    return std::move(builder).finish();
  } catch (const Error& error) {
    // hwloc accepts some XML files that describe no machine nerve can use (a PU nested in a PU: no
    // cores): that is the file's fault, not a bug, and a configuration error names the key.
    const bool given = !config.topology.synthetic.empty() || !config.topology.xml.empty();
    if (error.code() != ErrorCode::internal || !given) throw;
    const char* key = config.topology.xml.empty() ? topology::synthetic_key : topology::xml_key;
    config::rethrow_with_origin(config, ConfigError(fmt::format("'{}' describes no machine nerve can use: {}",
                                                                loaded.description, error.what()),
                                                    key));
  }
}

}  // namespace nerve
