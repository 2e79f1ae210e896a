// Worker placement on synthetic machines, and thread binding on this one.
#include "topology/affinity.hpp"

#include <algorithm>
#include <string>

#include <gtest/gtest.h>

#include "nerve/config.hpp"
#include "nerve/topology.hpp"

#include "topology_test_support.hpp"

namespace nerve::topology {
namespace {

using nerve::testing::synthetic_topology;

std::vector<int> cores_of(const std::vector<WorkerPlacement>& placements) {
  std::vector<int> cores;
  for (const WorkerPlacement& placement : placements) cores.push_back(placement.core);
  return cores;
}

class PlanWorkers : public ::testing::Test {
 protected:
  // Package 0: nodes 0 (cores 0-3) and 1 (4-7); package 1: nodes 2 (8-11) and 3 (12-15).
  const Topology topology_ = synthetic_topology("pack:2 numa:2 core:4 pu:1");
};

TEST_F(PlanWorkers, CompactFillsCoresInOrder) {
  EXPECT_EQ(cores_of(plan_workers(topology_, 5, ThreadAffinity::compact)), (std::vector<int>{0, 1, 2, 3, 4}));
}

TEST_F(PlanWorkers, ScatterAlternatesPackagesThenNodes) {
  EXPECT_EQ(cores_of(plan_workers(topology_, 8, ThreadAffinity::scatter)),
            (std::vector<int>{0, 8, 4, 12, 1, 9, 5, 13}));
}

TEST_F(PlanWorkers, NoneReportsCompactCores) {
  EXPECT_EQ(cores_of(plan_workers(topology_, 3, ThreadAffinity::none)), (std::vector<int>{0, 1, 2}));
}

TEST_F(PlanWorkers, MoreWorkersThanCoresWrapAround) {
  const auto compact = cores_of(plan_workers(topology_, 18, ThreadAffinity::compact));
  EXPECT_EQ(std::vector<int>(compact.begin() + 14, compact.end()), (std::vector<int>{14, 15, 0, 1}));
  const auto scatter = cores_of(plan_workers(topology_, 18, ThreadAffinity::scatter));
  EXPECT_EQ(scatter, (std::vector<int>{0, 8, 4, 12, 1, 9, 5, 13, 2, 10, 6, 14, 3, 11, 7, 15, 0, 8}));
}

TEST_F(PlanWorkers, PlacementsCarryNodePackageAndPus) {
  const auto placements = plan_workers(topology_, 2, ThreadAffinity::scatter);
  ASSERT_EQ(placements.size(), 2u);
  EXPECT_EQ(placements[1].core, 8);
  EXPECT_EQ(placements[1].numa_node, 2);
  EXPECT_EQ(placements[1].package, 1);
  EXPECT_EQ(placements[1].pu_os_indices, (std::vector<int>{8}));
  EXPECT_TRUE(plan_workers(topology_, 0, ThreadAffinity::compact).empty());
}

TEST_F(PlanWorkers, OnlyAllowedCoresAreUsed) {
  const std::vector<int> allowed{8, 4, 5, 6, 7};
  EXPECT_EQ(cores_of(plan_workers(topology_, 3, ThreadAffinity::compact, allowed)),
            (std::vector<int>{4, 5, 6}));
  EXPECT_EQ(cores_of(plan_workers(topology_, 6, ThreadAffinity::scatter, allowed)),
            (std::vector<int>{4, 8, 5, 6, 7, 4}));
}

TEST_F(PlanWorkers, NoAllowedCoreFallsBackToAll) {
  EXPECT_EQ(cores_of(plan_workers(topology_, 2, ThreadAffinity::compact, {999})), (std::vector<int>{0, 1}));
}

TEST(PlanWorkersSmt, OnlyAllowedHardwareThreadsAreBound) {
  const Topology topology = synthetic_topology("pack:2 core:2 pu:2");
  const auto all = plan_workers(topology, 4, ThreadAffinity::scatter);
  EXPECT_EQ(cores_of(all), (std::vector<int>{0, 2, 1, 3}));
  EXPECT_EQ(all[1].pu_os_indices, (std::vector<int>{4, 5}));
  const auto restricted = plan_workers(topology, 1, ThreadAffinity::compact, {1, 2});
  EXPECT_EQ(restricted[0].pu_os_indices, (std::vector<int>{1}));
}

TEST(DefaultWorkerCount, SyntheticMachineUsesItsCores) {
  EXPECT_EQ(default_worker_count(synthetic_topology("pack:2 numa:2 core:4 pu:2")), 16u);
  EXPECT_EQ(default_worker_count(Topology::discover(Config{})), available_cpu_count());
  EXPECT_EQ(default_worker_count(synthetic_topology("pack:8 core:520 pu:1")), max_worker_count)
      << "auto never goes past parallel.thread_pool_size's bound";
}

// RestoreAffinity puts the calling thread's original CPU mask back, whatever the test did.
class RestoreAffinity {
 public:
  RestoreAffinity() : original_(current_thread_cpus()) {}
  RestoreAffinity(const RestoreAffinity&) = delete;
  RestoreAffinity& operator=(const RestoreAffinity&) = delete;
  ~RestoreAffinity() { EXPECT_TRUE(set_current_thread_cpus(original_)); }
  const std::vector<int>& original() const { return original_; }

 private:
  std::vector<int> original_;
};

TEST(BindCurrentThread, BindsToTheFirstCoreOfThisMachine) {
  const RestoreAffinity restore;
  ASSERT_FALSE(restore.original().empty());
  const Topology topology = Topology::discover(Config{});
  const auto placements = plan_workers(topology, 1, ThreadAffinity::compact);
  ASSERT_EQ(placements.size(), 1u);
  ASSERT_TRUE(bind_current_thread(placements[0], topology));
  EXPECT_EQ(current_thread_cpus(), placements[0].pu_os_indices);
  for (int pu : placements[0].pu_os_indices) EXPECT_TRUE(std::ranges::binary_search(restore.original(), pu));
}

TEST(BindCurrentThread, SyntheticTopologyIsNotBound) {
  const RestoreAffinity restore;
  const Topology topology = synthetic_topology("pack:2 core:2 pu:1");
  EXPECT_FALSE(bind_current_thread(plan_workers(topology, 1, ThreadAffinity::compact)[0], topology));
  EXPECT_EQ(current_thread_cpus(), restore.original());
}

TEST(BindCurrentThread, RefusalReturnsFalseAndWarnsOnce) {
  const RestoreAffinity restore;
  const Topology topology = Topology::discover(Config{});
  const WorkerPlacement impossible{.core = 0, .numa_node = 0, .package = 0, .pu_os_indices = {100000}};
  std::atomic_flag warned;
  ::testing::internal::CaptureStderr();
  EXPECT_FALSE(bind_current_thread(impossible, topology, warned));
  EXPECT_FALSE(bind_current_thread(impossible, topology, warned));
  const std::string logged = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(warned.test());
  EXPECT_EQ(logged.find("warn: cannot bind"), logged.rfind("warn: cannot bind")) << logged;
  EXPECT_NE(logged.find("warn: cannot bind"), std::string::npos) << logged;
  EXPECT_FALSE(bind_current_thread(WorkerPlacement{}, topology));
  EXPECT_EQ(current_thread_cpus(), restore.original());
}

TEST(CurrentThreadCpus, AreSortedAndNotEmpty) {
  const std::vector<int> cpus = current_thread_cpus();
  ASSERT_FALSE(cpus.empty());
  EXPECT_TRUE(std::ranges::is_sorted(cpus));
  EXPECT_FALSE(set_current_thread_cpus({}));
}

}  // namespace
}  // namespace nerve::topology
