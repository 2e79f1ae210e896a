// NUMA distance matrices: hwloc's synthetic syntax cannot carry one, so these tests add a matrix
// with hwloc_distances_add_*(), export the machine as XML and discover it back.
#include <gtest/gtest.h>

#include "nerve/topology.hpp"

#include "topology_test_support.hpp"

namespace nerve {
namespace {

constexpr const char* two_by_two = "pack:2 numa:2 core:2 pu:1";  // nodes 0,1 on package 0; 2,3 on 1

Topology with_matrix(const std::vector<hwloc_uint64_t>& values, unsigned long kind) {
  const testing::TemporaryDirectory directory;
  const auto path = directory.path() / "machine.xml";
  testing::export_synthetic_xml(two_by_two, path, values, kind);
  return testing::xml_topology(path);
}

TEST(NumaDistanceMatrix, LatencyMatrixIsReadAndScalesCoreDistances) {
  const Topology topology = with_matrix({10, 12, 30, 32,  //
                                         12, 10, 32, 30,  //
                                         30, 32, 10, 12,  //
                                         32, 30, 12, 10},
                                        HWLOC_DISTANCES_KIND_MEANS_LATENCY);
  EXPECT_EQ(topology.numa_distance(0, 1), 12);
  EXPECT_EQ(topology.numa_distance(0, 3), 32);
  EXPECT_EQ(topology.numa_distance(2, 2), 10);
  EXPECT_EQ(topology.distance(0, 1), core_distance::same_numa);
  EXPECT_EQ(topology.distance(0, 2), core_distance::other_numa * 12 / 10);
  EXPECT_EQ(topology.distance(0, 4),
            core_distance::other_numa * 30 / 10 + core_distance::other_package_penalty);
  EXPECT_LT(topology.distance(0, 4), topology.distance(0, 6));
  EXPECT_EQ(topology.cores_by_distance(0), (std::vector<int>{1, 2, 3, 4, 5, 6, 7}));
}

TEST(NumaDistanceMatrix, LatenciesAreNormalisedToTenForLocal) {
  // Latencies in nanoseconds rather than ACPI SLIT units.
  const Topology topology = with_matrix({80, 100, 160, 160,  //
                                         100, 80, 160, 160,  //
                                         160, 160, 80, 100,  //
                                         160, 160, 100, 80},
                                        HWLOC_DISTANCES_KIND_MEANS_LATENCY);
  EXPECT_EQ(topology.numa_distance(0, 0), 10);
  EXPECT_EQ(topology.numa_distance(0, 1), 13);  // 100 / 80 = 1.25 → 12.5 → 13
  EXPECT_EQ(topology.numa_distance(3, 0), 20);
}

// hwloc's values are 64-bit: huge ones saturate at max_numa_distance, never wrap round to "near"
// (3200000000 used to read as 1, 4294967306 as 10), and the farthest node's cores stay last.
TEST(NumaDistanceMatrix, HugeDistancesSaturateInOrder) {
  const Topology topology = with_matrix({10, 20, 3'200'000'000, 32,  //
                                         20, 10, 32, 4'294'967'306,  //
                                         3'200'000'000, 32, 10, 20,  //
                                         32, 4'294'967'306, 20, 10},
                                        HWLOC_DISTANCES_KIND_MEANS_LATENCY);
  EXPECT_EQ(topology.numa_distance(0, 2), core_distance::max_numa_distance);
  EXPECT_EQ(topology.numa_distance(1, 3), core_distance::max_numa_distance);
  EXPECT_EQ(topology.numa_distance(0, 3), 32);
  EXPECT_GT(topology.distance(0, 4), topology.distance(0, 6));
  EXPECT_GT(topology.distance(0, 6), topology.distance(0, 2));
  EXPECT_EQ(topology.cores_by_distance(0), (std::vector<int>{1, 2, 3, 6, 7, 4, 5}));
  const Topology nearly_wrapping = with_matrix({10, 20, 2'147'483'647, 32,  //
                                                20, 10, 32, 20,             //
                                                2'147'483'647, 32, 10, 20,  //
                                                32, 20, 20, 10},
                                               HWLOC_DISTANCES_KIND_MEANS_LATENCY);
  EXPECT_GT(nearly_wrapping.distance(0, 4), nearly_wrapping.distance(0, 6));
}

TEST(NumaDistanceMatrix, AsymmetricMatrixGivesSymmetricCoreDistances) {
  const Topology topology = with_matrix({10, 15, 20, 20,  //
                                         25, 10, 20, 20,  //
                                         20, 20, 10, 20,  //
                                         20, 20, 20, 10},
                                        HWLOC_DISTANCES_KIND_MEANS_LATENCY);
  EXPECT_EQ(topology.numa_distance(0, 1), 15);
  EXPECT_EQ(topology.numa_distance(1, 0), 25);
  EXPECT_EQ(topology.distance(0, 2), 250);
  EXPECT_EQ(topology.distance(2, 0), 250);
}

TEST(NumaDistanceMatrix, SmallRemoteLatencyNeverBeatsOtherNuma) {
  const Topology topology = with_matrix({10, 10, 10, 10,  //
                                         10, 10, 10, 10,  //
                                         10, 10, 10, 10,  //
                                         10, 10, 10, 10},
                                        HWLOC_DISTANCES_KIND_MEANS_LATENCY);
  EXPECT_EQ(topology.distance(0, 2), core_distance::other_numa);
  EXPECT_GT(topology.distance(0, 4), topology.distance(0, 2));  // another package is still farther
}

TEST(NumaDistanceMatrix, BandwidthMatrixIsInvertedWhenNoLatencyMatrixExists) {
  const Topology topology = with_matrix({100, 50, 25, 25,  //
                                         50, 100, 25, 25,  //
                                         25, 25, 100, 50,  //
                                         25, 25, 50, 100},
                                        HWLOC_DISTANCES_KIND_MEANS_BANDWIDTH);
  EXPECT_EQ(topology.numa_distance(0, 0), 10);
  EXPECT_EQ(topology.numa_distance(0, 1), 20);
  EXPECT_EQ(topology.numa_distance(0, 2), 40);
  EXPECT_LT(topology.distance(0, 2), topology.distance(0, 4));
}

TEST(NumaDistanceMatrix, NoMatrixMeansTenAndTwenty) {
  const Topology topology = with_matrix({}, 0);
  EXPECT_EQ(topology.numa_distance(1, 1), 10);
  EXPECT_EQ(topology.numa_distance(1, 2), 20);
}

}  // namespace
}  // namespace nerve
