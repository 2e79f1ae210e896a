// topology_test_support.hpp — helpers shared by the topology tests: topologies from synthetic text or
// XML, and temporary directories.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <hwloc.h>

#include "nerve/config.hpp"
#include "nerve/topology.hpp"

namespace nerve::testing {

// synthetic_topology() discovers the hwloc synthetic machine `description`.
Topology synthetic_topology(const std::string& description);
// xml_topology() discovers the machine in the hwloc XML file `path`.
Topology xml_topology(const std::filesystem::path& path);

// TemporaryDirectory is a fresh directory removed (with its contents) on destruction.
class TemporaryDirectory {
 public:
  TemporaryDirectory();
  TemporaryDirectory(const TemporaryDirectory&) = delete;
  TemporaryDirectory& operator=(const TemporaryDirectory&) = delete;
  ~TemporaryDirectory();

  const std::filesystem::path& path() const { return path_; }
  // write() creates `name` in the directory with `content` and returns its path.
  std::filesystem::path write(const std::string& name, const std::string& content) const;

 private:
  std::filesystem::path path_;
};

// export_synthetic_xml() writes the synthetic machine `description` as hwloc XML to `path`, with a
// NUMA distance matrix of `kind` (HWLOC_DISTANCES_KIND_MEANS_*) when `numa_distances` is not empty.
void export_synthetic_xml(const std::string& description, const std::filesystem::path& path,
                          const std::vector<hwloc_uint64_t>& numa_distances = {}, unsigned long kind = 0);

// export_xml() is the XML text hwloc exports for the synthetic machine `description`, or for this
// machine with all its I/O devices when `description` is empty; in the v1 format when `flags` holds
// HWLOC_TOPOLOGY_EXPORT_XML_FLAG_V1.
std::string export_xml(const std::string& description, unsigned long flags = 0);

}  // namespace nerve::testing
