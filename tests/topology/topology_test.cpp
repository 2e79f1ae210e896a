// Discovery from the real machine, synthetic descriptions and XML; tree(), JSON, errors.
#include "nerve/topology.hpp"

#include <algorithm>
#include <string>

#include <gtest/gtest.h>

#include "nerve/config.hpp"
#include "nerve/error.hpp"

#include "topology/topology_builder.hpp"
#include "topology/topology_json.hpp"
#include "topology_test_support.hpp"

namespace nerve {
namespace {

using testing::synthetic_topology;
using testing::TemporaryDirectory;
using testing::xml_topology;

bool contains(const std::vector<int>& list, int value) {
  return std::ranges::find(list, value) != list.end();
}

void expect_consistent(const Topology& topology) {
  ASSERT_GE(topology.cores().size(), 1u);
  ASSERT_GE(topology.packages().size(), 1u);
  ASSERT_GE(topology.numa_nodes().size(), 1u);
  for (const Core& core : topology.cores()) {
    EXPECT_FALSE(core.pu_os_indices.empty()) << "core " << core.index;
    ASSERT_LT(static_cast<std::size_t>(core.package), topology.packages().size());
    ASSERT_LT(static_cast<std::size_t>(core.numa_node), topology.numa_nodes().size());
    EXPECT_TRUE(contains(topology.packages()[core.package].cores, core.index));
    EXPECT_TRUE(contains(topology.numa_nodes()[core.numa_node].cores, core.index));
    EXPECT_TRUE(contains(topology.packages()[core.package].numa_nodes, core.numa_node));
  }
  const int count = static_cast<int>(topology.cores().size());
  for (int a = 0; a < count; ++a) {
    EXPECT_EQ(topology.distance(a, a), 0);
    for (int b = 0; b < count; ++b) {
      EXPECT_EQ(topology.distance(a, b), topology.distance(b, a));
      if (a != b) EXPECT_GT(topology.distance(a, b), 0);
    }
  }
  EXPECT_GE(topology.pu_count(), count);
}

TEST(TopologyDiscovery, RealMachineIsConsistent) {
  const Topology topology = Topology::discover(Config{});
  EXPECT_FALSE(topology.synthetic());
  EXPECT_EQ(topology.description(), "real machine");
  expect_consistent(topology);
  for (std::size_t node = 0; node < topology.numa_nodes().size(); ++node) {
    EXPECT_GE(topology.numa_distance(static_cast<int>(node), static_cast<int>(node)), 10);
  }
}

TEST(TopologyDiscovery, TwoPackagesTwoNodesEach) {
  const Topology topology = synthetic_topology("pack:2 numa:2 core:4 pu:1");
  EXPECT_TRUE(topology.synthetic());
  EXPECT_EQ(topology.description(), "pack:2 numa:2 core:4 pu:1");
  expect_consistent(topology);
  ASSERT_EQ(topology.packages().size(), 2u);
  ASSERT_EQ(topology.numa_nodes().size(), 4u);
  ASSERT_EQ(topology.cores().size(), 16u);
  EXPECT_EQ(topology.pu_count(), 16);
  EXPECT_EQ(topology.packages()[1].numa_nodes, (std::vector<int>{2, 3}));
  EXPECT_EQ(topology.numa_nodes()[2].cores, (std::vector<int>{8, 9, 10, 11}));
  EXPECT_EQ(topology.numa_nodes()[2].package, 1);
  EXPECT_EQ(topology.cores()[13].pu_os_indices, (std::vector<int>{13}));
  for (const NumaNode& node : topology.numa_nodes()) EXPECT_EQ(node.memory_bytes, 1ull << 30);
}

TEST(TopologyDiscovery, DistanceOrderSameNodeOtherNodeOtherPackage) {
  const Topology topology = synthetic_topology("pack:2 numa:2 core:4 pu:1");
  EXPECT_EQ(topology.distance(0, 1), core_distance::same_numa);
  EXPECT_EQ(topology.distance(0, 4), 2 * core_distance::other_numa);  // default remote latency 20
  EXPECT_LT(topology.distance(0, 1), topology.distance(0, 4));
  EXPECT_LT(topology.distance(0, 4), topology.distance(0, 8));
  EXPECT_EQ(topology.distance(0, 8), topology.distance(0, 12));
  EXPECT_EQ(topology.numa_distance(0, 0), 10);
  EXPECT_EQ(topology.numa_distance(0, 3), 20);
  EXPECT_EQ(topology.cores_by_distance(5),
            (std::vector<int>{4, 6, 7, 0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15}));
}

TEST(TopologyDiscovery, CachesAndTheirDistances) {
  const Topology topology = synthetic_topology("pack:1 l3:2 l2:2 core:2 pu:2");
  expect_consistent(topology);
  ASSERT_EQ(topology.cores().size(), 8u);
  EXPECT_EQ(topology.pu_count(), 16);
  EXPECT_EQ(topology.cores()[1].pu_os_indices, (std::vector<int>{2, 3}));
  std::vector<std::vector<int>> l2, l3;
  for (const Cache& cache : topology.caches()) {
    EXPECT_GT(cache.size_bytes, 0u);
    (cache.level == 2 ? l2 : l3).push_back(cache.cores);
  }
  EXPECT_EQ(l2, (std::vector<std::vector<int>>{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(l3, (std::vector<std::vector<int>>{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(topology.distance(0, 1), core_distance::shared_l2);
  EXPECT_EQ(topology.distance(0, 2), core_distance::shared_l3);
  EXPECT_EQ(topology.distance(0, 4), core_distance::same_numa);
  EXPECT_EQ(topology.cores_by_distance(2), (std::vector<int>{3, 0, 1, 4, 5, 6, 7}));
}

TEST(TopologyDiscovery, MachineWithoutPackagesGetsOne) {
  const Topology topology = synthetic_topology("core:3 pu:2");
  expect_consistent(topology);
  ASSERT_EQ(topology.packages().size(), 1u);
  ASSERT_EQ(topology.numa_nodes().size(), 1u);
  EXPECT_EQ(topology.packages()[0].cores, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(topology.packages()[0].numa_nodes, (std::vector<int>{0}));
}

TEST(TopologyDiscovery, NumaNodesAbovePackages) {
  const Topology topology = synthetic_topology("numa:2 pack:2 core:2 pu:1");
  expect_consistent(topology);
  ASSERT_EQ(topology.packages().size(), 4u);
  ASSERT_EQ(topology.numa_nodes().size(), 2u);
  EXPECT_EQ(topology.numa_nodes()[1].cores, (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(topology.packages()[3].numa_nodes, (std::vector<int>{1}));
  // Another package is farther than anything on the same package, even on the same node.
  EXPECT_LT(topology.distance(0, 1), topology.distance(0, 2));
  EXPECT_LT(topology.distance(0, 2), topology.distance(0, 4));
}

TEST(TopologyDiscovery, HandMadeBuilderFillsMissingLevels) {
  Topology::Builder builder;
  builder.cores = {Core{.index = 0, .package = 0, .numa_node = 0, .pu_os_indices = {0}},
                   Core{.index = 0, .package = 0, .numa_node = 0, .pu_os_indices = {1}}};
  const Topology topology = std::move(builder).finish();
  EXPECT_EQ(topology.cores()[1].index, 1);
  EXPECT_EQ(topology.packages().size(), 1u);
  EXPECT_EQ(topology.numa_nodes()[0].cores, (std::vector<int>{0, 1}));
  EXPECT_EQ(topology.distance(0, 1), core_distance::same_numa);
}

TEST(TopologyDiscovery, InconsistentBuilderIsAnInternalError) {
  Topology::Builder builder;
  builder.numa_nodes.emplace_back();
  builder.cores = {Core{.index = 0, .package = 0, .numa_node = 3, .pu_os_indices = {0}}};
  try {
    std::move(builder).finish();
    FAIL() << "finish() accepted a core on NUMA node 3 of 1";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::internal);
  }
}

TEST(TopologyDiscovery, IndexOutOfRangeIsInvalidArgument) {
  const Topology topology = synthetic_topology("core:2 pu:1");
  EXPECT_THROW((void)topology.distance(0, 2), Error);
  EXPECT_THROW((void)topology.cores_by_distance(-1), Error);
  EXPECT_THROW((void)topology.numa_distance(1, 0), Error);
}

TEST(TopologyDiscovery, XmlRoundTripKeepsTheMachine) {
  const TemporaryDirectory directory;
  const auto path = directory.path() / "machine.xml";
  testing::export_synthetic_xml("pack:2 numa:2 l2:2 core:2 pu:2", path);
  const Topology from_xml = xml_topology(path);
  EXPECT_TRUE(from_xml.synthetic());
  EXPECT_EQ(from_xml.description(), path.string());
  nlohmann::json expected = topology::topology_to_json(synthetic_topology("pack:2 numa:2 l2:2 core:2 pu:2"));
  nlohmann::json actual = topology::topology_to_json(from_xml);
  expected.erase("description");
  actual.erase("description");
  EXPECT_EQ(actual, expected);
}

void expect_config_error(const Config& config, const std::string& key) {
  try {
    (void)Topology::discover(config);
    FAIL() << "discover() accepted an invalid " << key;
  } catch (const ConfigError& error) {
    EXPECT_EQ(error.key(), key);
    EXPECT_EQ(error.code(), ErrorCode::invalid_config);
    EXPECT_NE(std::string(error.what()), "");
  }
}

TEST(TopologyErrors, InvalidSyntheticDescriptionNamesTheKey) {
  Config config;
  config.topology.synthetic = "pack:2 banana:3";
  expect_config_error(config, "topology.synthetic");
  config.topology.synthetic = "pack:0";
  expect_config_error(config, "topology.synthetic");
}

// Regression (fuzzing): hwloc builds any synthetic machine it is given, and a few bytes describe
// millions of PUs ("pack:1000 core:1000 pu:1000" took minutes and gigabytes in hwloc, then in the core
// distance matrix). A description of more PUs than Linux supports is refused before hwloc sees it.
TEST(TopologyErrors, SyntheticMachineLargerThanLinuxSupportsIsRejected) {
  Config config;
  for (const char* description : {"pack:4 core:1024 pu:4", "pack:1000 core:1000(indexes=1) [numa] pu:1000",
                                  "pack:2 l2:361core:361 pu:2", "pack:0x10 core:01000 pu:2", "2 4096 2"}) {
    SCOPED_TRACE(description);
    config.topology.synthetic = description;
    expect_config_error(config, "topology.synthetic");
    try {
      (void)Topology::discover(config);
    } catch (const ConfigError& error) {
      EXPECT_NE(std::string(error.what()).find("describes more than 8192 PUs"), std::string::npos)
          << error.what();
    }
  }
  config.topology.synthetic = "pack:2 core:2 [numa] pu:2(indexes=0,2,1,3,4,6,5,7)";
  EXPECT_EQ(Topology::discover(config).pu_count(), 8) << "attributes and memory children count as before";
}

TEST(TopologyErrors, MissingOrBrokenXmlNamesTheKey) {
  const TemporaryDirectory directory;
  Config config;
  config.topology.xml = (directory.path() / "missing.xml").string();
  expect_config_error(config, "topology.xml");
  config.topology.xml = directory.write("broken.xml", "<topology><object type=\"Mach").string();
  expect_config_error(config, "topology.xml");
}

TEST(TopologyErrors, SyntheticAndXmlTogetherAreRejected) {
  Config config;
  config.topology.synthetic = "core:2 pu:1";
  config.topology.xml = "/nonexistent.xml";
  expect_config_error(config, "topology.xml");
}

TEST(TopologyTree, MentionsEveryPackageNodeAndCore) {
  const Topology topology = synthetic_topology("pack:2 numa:2 core:4 pu:1");
  const std::string tree = topology.tree();
  for (int i = 0; i < 2; ++i) EXPECT_NE(tree.find("Package " + std::to_string(i)), std::string::npos) << tree;
  for (int i = 0; i < 4; ++i)
    EXPECT_NE(tree.find("NUMA node " + std::to_string(i) + " "), std::string::npos) << tree;
  for (int i = 0; i < 16; ++i)
    EXPECT_NE(tree.find("Core " + std::to_string(i) + " "), std::string::npos) << tree;
  EXPECT_NE(tree.find("1024 MiB"), std::string::npos) << tree;
}

TEST(TopologyTree, NestsCachesAndPus) {
  const std::string tree = synthetic_topology("pack:1 l3:2 l2:2 core:2 pu:2").tree();
  EXPECT_NE(tree.find("L3 #1"), std::string::npos) << tree;
  EXPECT_NE(tree.find("L2 #3"), std::string::npos) << tree;
  EXPECT_NE(tree.find("Core 7 (PU P#14, P#15)"), std::string::npos) << tree;
  // L3 #1 comes before the cores below it, one level less indented.
  const auto l3 = tree.find("L3 #1");
  const auto core = tree.find("Core 4 ");
  ASSERT_LT(l3, core);
}

TEST(TopologyTree, RealMachineRenders) {
  const Topology topology = Topology::discover(Config{});
  const std::string tree = topology.tree();
  EXPECT_EQ(tree.rfind("Machine (real machine)", 0), 0u) << tree;
  for (const Core& core : topology.cores()) {
    EXPECT_NE(tree.find("Core " + std::to_string(core.index) + " "), std::string::npos) << tree;
  }
}

TEST(TopologyJson, DescribesEverything) {
  const Topology topology = synthetic_topology("pack:2 numa:2 core:4 pu:1");
  const nlohmann::json json = topology::topology_to_json(topology);
  EXPECT_EQ(json["synthetic"], true);
  EXPECT_EQ(json["description"], "pack:2 numa:2 core:4 pu:1");
  EXPECT_EQ(json["pu_count"], 16);
  EXPECT_EQ(json["packages"].size(), 2u);
  ASSERT_EQ(json["numa_nodes"].size(), 4u);
  EXPECT_EQ(json["numa_nodes"][3]["memory_bytes"], 1ull << 30);
  EXPECT_EQ(json["cores"][9]["numa_node"], 2);
  EXPECT_EQ(json["core_distances"].size(), 16u);
  EXPECT_EQ(json["core_distances"][0][8], topology.distance(0, 8));
  EXPECT_EQ(json["numa_distances"][1][2], 20);
  EXPECT_EQ(nlohmann::json::parse(json.dump()), json);
}

}  // namespace
}  // namespace nerve
