// The examples' result checks (examples/common/result_checks.hpp) fail a NaN or an infinity: a
// result full of NaNs must not check as exact, as it did with `difference > tolerance` and
// std::max(worst, difference).
#include "result_checks.hpp"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

namespace nerve_examples {
namespace {

constexpr double nan = std::numeric_limits<double>::quiet_NaN();
constexpr double infinity = std::numeric_limits<double>::infinity();

TEST(ExampleResultChecks, LargerDifferenceKeepsTheLarger) {
  EXPECT_EQ(larger_difference(0.0, 1e-13), 1e-13);
  EXPECT_EQ(larger_difference(1e-13, 0.0), 1e-13);
  EXPECT_EQ(larger_difference(2.0, 1.0), 2.0);
}

TEST(ExampleResultChecks, LargerDifferenceCountsANonFiniteDifferenceAsInfinity) {
  EXPECT_EQ(larger_difference(0.0, nan), infinity);
  EXPECT_EQ(larger_difference(0.0, -nan), infinity);
  EXPECT_EQ(larger_difference(0.0, infinity), infinity);
  EXPECT_EQ(larger_difference(0.0f, std::numeric_limits<float>::quiet_NaN()),
            std::numeric_limits<float>::infinity());
  // A running maximum as the examples keep it: one NaN among exact elements fails the check.
  double worst = 0.0;
  for (const double difference : {0.0, nan, 0.0}) worst = larger_difference(worst, difference);
  EXPECT_FALSE(worst <= 1e-12);
}

TEST(ExampleResultChecks, CloseEnoughWithinTheTolerance) {
  EXPECT_TRUE(close_enough(1.0f, 1.0f, 1e-4f));
  EXPECT_TRUE(close_enough(1.00005f, 1.0f, 1e-4f));
  EXPECT_FALSE(close_enough(1.001f, 1.0f, 1e-4f));
  EXPECT_TRUE(close_enough(100.01, 100.0, 1e-4));  // relative: 1e-4 of (1 + 100)
}

TEST(ExampleResultChecks, CloseEnoughFailsNonFiniteValues) {
  const float float_nan = std::numeric_limits<float>::quiet_NaN();
  const float float_infinity = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(close_enough(float_nan, 1.0f, 1e-4f));
  EXPECT_FALSE(close_enough(1.0f, float_nan, 1e-4f));
  EXPECT_FALSE(close_enough(float_infinity, 1.0f, 1e-4f));
  EXPECT_FALSE(close_enough(float_infinity, float_infinity, 1e-4f));
  EXPECT_FALSE(close_enough(nan, nan, 1e-4));
}

}  // namespace
}  // namespace nerve_examples
