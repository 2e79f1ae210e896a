// cgroup CPU quotas, read from fake cgroup directories.
#include <algorithm>

#include <gtest/gtest.h>

#include "topology/affinity.hpp"
#include "topology_test_support.hpp"

namespace nerve::topology {
namespace {

using nerve::testing::TemporaryDirectory;

std::optional<unsigned> v2_limit(const std::string& cpu_max) {
  const TemporaryDirectory directory;
  directory.write("cpu.max", cpu_max);
  return cgroup_cpu_limit(directory.path());
}

std::optional<unsigned> v1_limit(const std::string& quota, const std::string& period) {
  const TemporaryDirectory directory;
  directory.write("cpu.cfs_quota_us", quota);
  directory.write("cpu.cfs_period_us", period);
  return cgroup_cpu_limit(directory.path());
}

unsigned affinity_cpus() { return static_cast<unsigned>(current_thread_cpus().size()); }

TEST(CgroupCpuLimit, V2Quotas) {
  EXPECT_EQ(v2_limit("max 100000\n"), std::nullopt);
  EXPECT_EQ(v2_limit("150000 100000\n"), 2u);
  EXPECT_EQ(v2_limit("50000 100000\n"), 1u);
  EXPECT_EQ(v2_limit("400000 100000"), 4u);
  EXPECT_EQ(v2_limit("1 100000\n"), 1u);
}

TEST(CgroupCpuLimit, V1Quotas) {
  EXPECT_EQ(v1_limit("-1\n", "100000\n"), std::nullopt);
  EXPECT_EQ(v1_limit("250000\n", "100000\n"), 3u);
  EXPECT_EQ(v1_limit("100000\n", "100000\n"), 1u);
  EXPECT_EQ(v1_limit("20000\n", "100000\n"), 1u);
}

// Regression (fuzzing): the rounding up added the period to the quota first, a signed overflow for a
// quota near 2^63: UBSan reported it, and a release build read such a quota as 702313054 CPUs, or 0.
TEST(CgroupCpuLimit, HugeQuotaIsTheLargestLimitNotAnOverflow) {
  EXPECT_EQ(v2_limit("9223372036854775807 100000\n"), 1u << 20);
  EXPECT_EQ(v1_limit("9223372036854775807\n", "2\n"), 1u << 20);
  EXPECT_EQ(v2_limit("9223372036854775807 9223372036854775807\n"), 1u);
}

TEST(CgroupCpuLimit, GarbageOrMissingFilesMeanNoLimit) {
  EXPECT_EQ(v2_limit(""), std::nullopt);
  EXPECT_EQ(v2_limit("banana"), std::nullopt);
  EXPECT_EQ(v2_limit("150000"), std::nullopt);
  EXPECT_EQ(v2_limit("15x000 100000"), std::nullopt);
  EXPECT_EQ(v2_limit("150000 0"), std::nullopt);
  EXPECT_EQ(v2_limit("0 100000"), std::nullopt);
  EXPECT_EQ(v2_limit("-5 100000"), std::nullopt);
  EXPECT_EQ(v2_limit("99999999999999999999999 100000"), std::nullopt);
  EXPECT_EQ(v1_limit("abc", "100000"), std::nullopt);
  EXPECT_EQ(v1_limit("100000", ""), std::nullopt);
  const TemporaryDirectory empty;
  EXPECT_EQ(cgroup_cpu_limit(empty.path()), std::nullopt);
  EXPECT_EQ(cgroup_cpu_limit(empty.path() / "does-not-exist"), std::nullopt);
}

TEST(AvailableCpuCount, CappedByTheQuota) {
  const TemporaryDirectory directory;
  directory.write("cpu.max", "50000 100000\n");
  EXPECT_EQ(available_cpu_count(directory.path()), 1u);
  directory.write("cpu.max", "150000 100000\n");
  EXPECT_EQ(available_cpu_count(directory.path()), std::min(affinity_cpus(), 2u));
  directory.write("cpu.max", "max 100000\n");
  EXPECT_EQ(available_cpu_count(directory.path()), affinity_cpus());
  directory.write("cpu.max", "garbage");
  EXPECT_EQ(available_cpu_count(directory.path()), affinity_cpus());
}

TEST(AvailableCpuCount, ThisProcessHasAtLeastOne) {
  const unsigned count = available_cpu_count();
  EXPECT_GE(count, 1u);
  EXPECT_LE(count, affinity_cpus());
}

}  // namespace
}  // namespace nerve::topology
