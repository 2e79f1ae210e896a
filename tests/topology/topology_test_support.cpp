#include "topology_test_support.hpp"

#include <atomic>
#include <cstdlib>
#include <fstream>

#include <unistd.h>

#include <gtest/gtest.h>

#include "topology/hwloc_handle.hpp"

namespace nerve::testing {

Topology synthetic_topology(const std::string& description) {
  Config config;
  config.topology.synthetic = description;
  return Topology::discover(config);
}

Topology xml_topology(const std::filesystem::path& path) {
  Config config;
  config.topology.xml = path.string();
  return Topology::discover(config);
}

TemporaryDirectory::TemporaryDirectory() {
  static std::atomic<int> counter{0};  // unique names within this test process
  path_ = std::filesystem::temp_directory_path() /
          ("nerve-topology-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
  std::filesystem::create_directories(path_);
}

TemporaryDirectory::~TemporaryDirectory() {
  std::error_code error;
  std::filesystem::remove_all(path_, error);
}

std::filesystem::path TemporaryDirectory::write(const std::string& name, const std::string& content) const {
  const std::filesystem::path file = path_ / name;
  std::ofstream(file) << content;
  return file;
}

void export_synthetic_xml(const std::string& description, const std::filesystem::path& path,
                          const std::vector<hwloc_uint64_t>& numa_distances, unsigned long kind) {
  topology::HwlocTopology topology = topology::make_hwloc_topology();
  ASSERT_EQ(hwloc_topology_set_synthetic(topology.get(), description.c_str()), 0);
  ASSERT_EQ(hwloc_topology_load(topology.get()), 0);
  if (!numa_distances.empty()) {
    const auto count = static_cast<unsigned>(hwloc_get_nbobjs_by_type(topology.get(), HWLOC_OBJ_NUMANODE));
    ASSERT_EQ(numa_distances.size(), std::size_t{count} * count);
    std::vector<hwloc_obj_t> nodes;
    for (unsigned i = 0; i < count; ++i)
      nodes.push_back(hwloc_get_obj_by_type(topology.get(), HWLOC_OBJ_NUMANODE, i));
    hwloc_distances_add_handle_t handle =
        hwloc_distances_add_create(topology.get(), "nerve-test", kind | HWLOC_DISTANCES_KIND_FROM_USER, 0);
    ASSERT_NE(handle, nullptr);
    std::vector<hwloc_uint64_t> values = numa_distances;  // hwloc takes a non-const pointer
    ASSERT_EQ(hwloc_distances_add_values(topology.get(), handle, count, nodes.data(), values.data(), 0), 0);
    ASSERT_EQ(hwloc_distances_add_commit(topology.get(), handle, 0), 0);
  }
  ASSERT_EQ(hwloc_topology_export_xml(topology.get(), path.c_str(), 0), 0);
}

std::string export_xml(const std::string& description, unsigned long flags) {
  topology::HwlocTopology topology = topology::make_hwloc_topology();
  if (description.empty()) {
    EXPECT_EQ(hwloc_topology_set_io_types_filter(topology.get(), HWLOC_TYPE_FILTER_KEEP_ALL), 0);
    // Without hwloc's PCI component (hwloc_topology_set_components() refuses to leave it out): its
    // allocations (libpciaccess's) are never freed, and LeakSanitizer reports them once hwloc has
    // unloaded the plugin, with no library name left to suppress them by. The OS devices (disks,
    // network) still make I/O objects for the export.
    ::setenv("HWLOC_COMPONENTS", "-pci", 1);
  } else {
    EXPECT_EQ(hwloc_topology_set_synthetic(topology.get(), description.c_str()), 0);
  }
  EXPECT_EQ(hwloc_topology_load(topology.get()), 0);
  ::unsetenv("HWLOC_COMPONENTS");
  char* buffer = nullptr;
  int length = 0;
  EXPECT_EQ(hwloc_topology_export_xmlbuffer(topology.get(), &buffer, &length, flags), 0);
  std::string xml = buffer != nullptr ? std::string(buffer) : std::string();
  hwloc_free_xmlbuffer(topology.get(), buffer);
  return xml;
}

}  // namespace nerve::testing
