// Discovery from the real machine, synthetic descriptions and XML; tree(), JSON, errors.
#include "nerve/topology.hpp"

#include <algorithm>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "nerve/config.hpp"
#include "nerve/error.hpp"

#include "topology/hwloc_xml_check.hpp"
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

// PUs without Core objects are the cores, and the caches above them are found from each PU;
// instruction caches are left out.
TEST(TopologyDiscovery, CachesOverPusWithoutCores) {
  const Topology topology = synthetic_topology("numa:2 l2:2 l1i:1 l1d:1 pu:3");
  expect_consistent(topology);
  ASSERT_EQ(topology.cores().size(), 12u);
  EXPECT_EQ(topology.cores()[4].pu_os_indices, (std::vector<int>{4}));
  std::vector<std::vector<int>> l1, l2;
  for (const Cache& cache : topology.caches()) (cache.level == 1 ? l1 : l2).push_back(cache.cores);
  const std::vector<std::vector<int>> groups{{0, 1, 2}, {3, 4, 5}, {6, 7, 8}, {9, 10, 11}};
  EXPECT_EQ(l1, groups);
  EXPECT_EQ(l2, groups);
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

// xml_error() is the message of the ConfigError that discovering the machine in `xml` throws.
std::string xml_error(const std::string& xml) {
  const TemporaryDirectory directory;
  Config config;
  config.topology.xml = directory.write("machine.xml", xml).string();
  try {
    (void)Topology::discover(config);
  } catch (const ConfigError& error) {
    EXPECT_EQ(error.key(), "topology.xml");
    return error.what();
  }
  ADD_FAILURE() << "discover() accepted the XML";
  return "";
}

// hwloc loads a file that nests objects of one type in each other (a PU in a PU), or has no PUs,
// and counts no cores in it: that was Error(internal) ("a bug in nerve") with neither key nor file.
TEST(TopologyErrors, AnXmlMachineWithoutUsableCoresNamesTheKey) {
  const std::string object = R"(cpuset="0x00000001" complete_cpuset="0x00000001" nodeset="0x00000001" )"
                             R"(complete_nodeset="0x00000001")";
  const auto machine = [&](const std::string& inside) {
    return R"(<?xml version="1.0" encoding="UTF-8"?>
<topology version="2.0">
  <object type="Machine" os_index="0" )" +
           object + R"( allowed_cpuset="0x00000001" allowed_nodeset="0x00000001">
    <object type="NUMANode" os_index="0" )" +
           object + R"( local_memory="1073741824"/>
)" + inside +
           R"(  </object>
</topology>
)";
  };
  const std::string nested = xml_error(machine(R"(    <object type="PU" os_index="0" )" + object + R"(>
      <object type="PU" os_index="0" )" + object +
                                               R"(/>
    </object>
)"));
  EXPECT_NE(nested.find("describes no machine nerve can use: inconsistent topology description: PU objects "
                        "at several depths of the tree (one inside another)"),
            std::string::npos)
      << nested;
  const std::string empty = xml_error(machine(R"(    <object type="Package" os_index="0" )" + object + R"(/>
)"));
  EXPECT_NE(empty.find("no cores (neither Core nor PU objects)"), std::string::npos) << empty;
}

// line_of() is the line (from 1) on which `text` first appears in `xml`.
int line_of(const std::string& xml, const std::string& text) {
  return 1 + static_cast<int>(std::count(xml.begin(), xml.begin() + static_cast<long>(xml.find(text)), '\n'));
}

// edited() is `xml` with the first `from` replaced by `to`.
std::string edited(std::string xml, const std::string& from, const std::string& to) {
  return xml.replace(xml.find(from), from.size(), to);
}

// with_attribute() is `xml` with the attribute `name` of the tag starting with `tag` set to `value`,
// or removed when `value` is nullopt.
std::string with_attribute(std::string xml, const std::string& tag, const std::string& name,
                           const std::optional<std::string>& value) {
  const auto start = xml.find(tag);
  const auto attribute = xml.find(" " + name + "=\"", start);
  EXPECT_LT(attribute, xml.find('>', start)) << tag << " has no " << name;
  const auto end = xml.find('"', attribute + name.size() + 3) + 1;
  xml.replace(attribute, end - attribute, value ? " " + name + "=\"" + *value + "\"" : "");
  return xml;
}

// Regression (fuzzing): hwloc 2.9 dereferences a NULL bitmap or fails an assertion on edited exports
// (45 inputs, and more that nerve's own fuzzing of the check found), killing the process, `lstopo -i`
// too. Each is now a ConfigError naming the line, the object and its attribute.
TEST(TopologyErrors, XmlThatCrashesHwlocIsAConfigError) {
  const std::string xml = testing::export_xml("pack:2 numa:2 core:2 pu:2");
  const std::string machine = "<object type=\"Machine\"";
  const std::string node = "<object type=\"NUMANode\" os_index=\"1\"";
  const std::string pu = "<object type=\"PU\" os_index=\"1\"";
  std::string root_outside = with_attribute(xml, machine, "complete_cpuset", "0x00000100");
  root_outside.insert(root_outside.find("<object type=\"Package\""), "<!-- a comment -->");
  const std::string v1 =
      testing::export_xml("pack:2 [numa] [numa] core:2 pu:2", HWLOC_TOPOLOGY_EXPORT_XML_FLAG_V1);
  const std::string v1_node = "<object type=\"NUMANode\"";
  std::string unknown_attribute = v1;
  unknown_attribute.replace(unknown_attribute.find("online_cpuset"), 13, "onXine_cpuset");
  struct Case {
    std::string what, xml;
    int line;
    std::vector<std::string> expected;
  };
  const std::vector<Case> cases = {
      {"cpuset without complete_cpuset",
       with_attribute(xml, pu, "complete_cpuset", std::nullopt),
       line_of(xml, pu),
       {"object 'PU': cpuset without complete_cpuset"}},
      {"nodeset without complete_nodeset",
       with_attribute(xml, machine, "complete_nodeset", std::nullopt),
       line_of(xml, machine),
       {"object 'Machine': nodeset without complete_nodeset"}},
      {"bitmap with a leading comma",
       with_attribute(xml, node, "nodeset", ",0x00000002"),
       line_of(xml, node),
       {"object 'NUMANode': nodeset=',0x00000002' is not an hwloc bitmap"}},
      {"bitmap with a word of 40 bits",
       with_attribute(xml, pu, "cpuset", "0x0000000002"),
       line_of(xml, pu),
       {"object 'PU': cpuset='0x0000000002' is not an hwloc bitmap"}},
      {"root cpuset outside its complete_cpuset",
       root_outside,
       line_of(xml, machine),
       {"object 'Machine': cpuset is not within complete_cpuset"}},
      {"childless root allowing none of its CPUs",
       "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<topology version=\"2.0\">\n  <object type=\"Machine\" "
       "cpuset=\"0x3\" complete_cpuset=\"0x3\" allowed_cpuset=\"0x4\" nodeset=\"0x1\" "
       "complete_nodeset=\"0x1\"/>\n"
       "</topology>\n",
       3,
       {"object 'Machine': allowed_cpuset shares no CPU with cpuset"}},
      {"unknown attribute in a v1 export",
       unknown_attribute,
       line_of(v1, "online_cpuset"),
       {"object 'Machine': unknown attribute 'onXine_cpuset'"}},
      {"v1 NUMA node without cpuset",
       with_attribute(v1, v1_node, "cpuset", std::nullopt),
       line_of(v1, v1_node),
       {"object 'NUMANode': no cpuset"}},
      {"v1 object of a type hwloc reads as NUMANode",
       edited(v1, v1_node, "<object type=\"NU76203008\""),
       line_of(v1, v1_node),
       {"object 'NU76203008': the type is not one hwloc writes"}},
      {"PU index of two billion",
       with_attribute(xml, pu, "os_index", "2000000000"),
       line_of(xml, pu),
       {"object 'PU': os_index='2000000000' is not a number up to 1048575"}},
  };
  for (const Case& test : cases) {
    SCOPED_TRACE(test.what);
    const std::string message = xml_error(test.xml);
    EXPECT_NE(message.find("as an hwloc XML topology: line " + std::to_string(test.line) + ": "),
              std::string::npos)
        << message;
    for (const std::string& part : test.expected) EXPECT_NE(message.find(part), std::string::npos) << message;
  }
}

// An empty file said only "Invalid argument" (hwloc's errno).
TEST(TopologyXml, AnEmptyFileSaysSo) {
  EXPECT_THAT(xml_error(""), ::testing::HasSubstr("as an hwloc XML topology: the file is empty"));
  EXPECT_THAT(xml_error("\n  \n"), ::testing::HasSubstr("the file is empty (blanks only)"));
}

// Every export hwloc writes passes nerve's check and loads: synthetic machines of many shapes (caches,
// dies, groups, memory children, 1024 PUs with sparse bitmaps), in the v2 and the v1 format.
class XmlExportTest : public ::testing::TestWithParam<std::tuple<const char*, unsigned long>> {};

TEST_P(XmlExportTest, PassesTheCheckAndLoads) {
  const auto [description, flags] = GetParam();
  const std::string xml = testing::export_xml(description, flags);
  EXPECT_EQ(topology::find_hwloc_xml_problem(xml), std::nullopt);
  const TemporaryDirectory directory;
  expect_consistent(xml_topology(directory.write("machine.xml", xml)));
}

INSTANTIATE_TEST_SUITE_P(
    TopologyXml, XmlExportTest,
    ::testing::Combine(
        ::testing::Values("pack:2 numa:2 core:4 pu:2", "pack:2 numa:2 l3:1 l2:2 core:2 pu:2", "pu:2",
                          "numa:2 pack:2 core:2 pu:1", "pack:2 core:2 [numa] pu:2",
                          "pack:2 [numa(memory=1GB)] [numa(memory=2GB)] core:2 pu:2",
                          "pack:2 die:2 group:2 core:2 pu:4",
                          "pack:2 numa:2 l3:2 l2:2 l1d:1 l1i:1 core:1 pu:2", "pack:4 core:64 pu:4"),
        ::testing::Values(0ul, static_cast<unsigned long>(HWLOC_TOPOLOGY_EXPORT_XML_FLAG_V1))));

TEST(TopologyXml, ThisMachineWithItsDevicesPassesTheCheck) {
  for (const unsigned long flags : {0ul, static_cast<unsigned long>(HWLOC_TOPOLOGY_EXPORT_XML_FLAG_V1)}) {
    const std::string xml = testing::export_xml("", flags);
    EXPECT_EQ(topology::find_hwloc_xml_problem(xml), std::nullopt) << xml;
    const TemporaryDirectory directory;
    expect_consistent(xml_topology(directory.write("machine.xml", xml)));
  }
}

// What would let libxml2 read the file otherwise than the check did, or make hwloc recurse or
// allocate without bound, is refused too.
TEST(TopologyXml, CheckRefusesWhatItCannotReadAsHwlocDoes) {
  const std::string xml = testing::export_xml("pu:2");
  const std::string tag = "<object type=\"PU\" os_index=\"1\"";
  std::string utf16;
  for (const char c : std::string("<?xml version=\"1.0\"?>")) utf16 += {c, '\0'};
  std::string deep = "<topology>";
  for (int i = 0; i < 300; ++i) deep += "<info>";
  std::string many_attributes = "<topology><info";
  for (int i = 0; i < 200000; ++i) many_attributes += " a" + std::to_string(i) + "=\"1\"";
  many_attributes += "/></topology>";
  std::string wide_bitmap = "0x1";
  for (int i = 0; i < 40000; ++i) wide_bitmap += ",0x0";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {utf16, "line 1: NUL byte"},
      {"<?xml version=\"1.0\" encoding=\"UTF-7\"?><topology/>", "line 1: encoding 'UTF-7'"},
      {"Lo\xA7\x94\x93", "line 1: text before the first tag"},
      {"<!DOCTYPE topology [<!ENTITY set \"0x1\">]><topology/>", "DOCTYPE with an internal subset"},
      {edited(xml, tag, tag + " os_index=\"1\""), "attribute os_index given twice"},
      {edited(xml, "<object type=\"PU\"", "<object"), "<object>: no type"},
      {"<topology><info name=\"a\"></object></topology>", "</object> closes <info> from line 1"},
      {"<topology>\n<!-- never closed", "line 2: a comment is never closed"},
      {deep, "elements nested more than 256 deep"},
      {with_attribute(xml, tag, "cpuset", wide_bitmap), "names indices above 1048575"},
  };
  for (const auto& [text, expected] : cases) {
    const auto problem = topology::find_hwloc_xml_problem(text);
    ASSERT_TRUE(problem.has_value()) << expected;
    EXPECT_NE(problem->find(expected), std::string::npos) << *problem;
  }
  // 200000 attributes are read in linear time (a quadratic duplicate search would take minutes).
  EXPECT_EQ(topology::find_hwloc_xml_problem(many_attributes), std::nullopt);
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

// A NUMA node spanning packages (BIOS node interleaving) is shown under each, its memory once; a
// cache above the NUMA level is shown under each node it serves, saying so. (The tree showed the
// node's 1024 MiB under both packages, reading as 2 GiB, and the one L3 as one per node.)
TEST(TopologyTree, WhatSpansItsParentSaysSoAndCountsOnce) {
  const std::string across = synthetic_topology("pack:2 core:2 pu:1").tree();
  EXPECT_NE(across.find("Package 0 + NUMA node 0 (P#0, 1024 MiB, spans packages 0, 1)"), std::string::npos)
      << across;
  EXPECT_NE(across.find("Package 1 + NUMA node 0 (P#0, continued from Package 0)"), std::string::npos)
      << across;
  std::size_t mentions = 0;
  for (auto at = across.find("1024 MiB"); at != std::string::npos; at = across.find("1024 MiB", at + 1))
    ++mentions;
  EXPECT_EQ(mentions, 2u) << "the machine's total and the node's, once\n" << across;
  const std::string shared = synthetic_topology("pack:1 l3:1 numa:2 l2:2 core:2 pu:2").tree();
  EXPECT_NE(shared.find("NUMA node 0 (P#0, 1024 MiB) + L3 #0 (16 MiB, shared with NUMA node 1)"),
            std::string::npos)
      << shared;
  EXPECT_NE(shared.find("NUMA node 1 (P#1, 1024 MiB) + L3 #0 (16 MiB, shared with NUMA node 0)"),
            std::string::npos)
      << shared;
  const std::string own = synthetic_topology("pack:2 numa:2 l3:1 core:2 pu:1").tree();
  EXPECT_EQ(own.find("shared with"), std::string::npos) << "each L3 serves one NUMA node\n" << own;
  EXPECT_EQ(own.find("spans"), std::string::npos) << own;
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
