// parallel.deterministic_mode: parallel_reduce with grain 0 gives the same bits for 1, 2 and 4
// workers (and on every run); off, the split follows the worker count.
#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <utility>

#include "support/runtime_fixture.hpp"

namespace nerve::testing {
namespace {

std::vector<float> awkward_values() {
  // Magnitudes from 1e-3 to 1e5: float addition is far from associative on these.
  std::mt19937 random(7);
  std::uniform_real_distribution<float> mantissa(1.0f, 10.0f);
  std::uniform_int_distribution<int> exponent(-3, 5);
  std::vector<float> values(200'003);
  for (float& v : values) v = mantissa(random) * std::pow(10.0f, static_cast<float>(exponent(random)));
  return values;
}

std::uint32_t sum_bits(unsigned workers, bool deterministic, const std::vector<float>& values) {
  Settings settings = make_settings(workers);
  settings.set("parallel.deterministic_mode", deterministic ? "true" : "false");
  Context context(settings);
  const float sum = parallel_reduce(
      context, 0, values.size(), 0, 0.0f,
      [&](std::size_t begin, std::size_t end) {
        float partial = 0;
        for (std::size_t i = begin; i < end; ++i) partial += values[i];
        return partial;
      },
      [](float a, float b) { return a + b; });
  return std::bit_cast<std::uint32_t>(sum);
}

TEST(DeterministicMode, ReduceIsBitIdenticalAcrossOneTwoAndFourWorkers) {
  const std::vector<float> values = awkward_values();
  const std::uint32_t one = sum_bits(1, true, values);
  EXPECT_EQ(sum_bits(2, true, values), one);
  EXPECT_EQ(sum_bits(4, true, values), one);
  EXPECT_EQ(sum_bits(4, true, values), one) << "and on every run";
}

TEST(DeterministicMode, FixesTheAutomaticSplit) {
  for (unsigned workers : {1u, 2u, 4u}) {
    Settings on = make_settings(workers);
    on.set("parallel.deterministic_mode", "true");
    Context deterministic(on);
    EXPECT_EQ(detail::context_auto_pieces(deterministic.impl()), detail::deterministic_pieces);
    Context normal(make_settings(workers));
    EXPECT_EQ(detail::context_auto_pieces(normal.impl()), 4u * workers) << "off: four pieces per worker";
  }
  // Off, the worker count changes the tree, so these sums would differ in their last bits; the
  // split itself (not the bits, which might coincide) is what the mode guarantees.
}

// Grain 0 splits into the pieces it promises, whether or not the count divides evenly: four per
// worker (rounded up to a power of two by the halving), 64 in deterministic mode.
TEST(DeterministicMode, AutomaticGrainGivesThePromisedPiecesForAnyCount) {
  for (const bool deterministic : {false, true}) {
    for (unsigned workers : {1u, 2u, 4u}) {
      Settings settings = make_settings(workers);
      settings.set("parallel.deterministic_mode", deterministic ? "true" : "false");
      Context context(settings);
      const std::size_t expected = deterministic ? 64 : std::bit_ceil(4u * workers);
      for (const std::size_t count :
           {std::size_t{1'000'000}, std::size_t{1'000'001}, std::size_t{1'000'003}, std::size_t{999'999}}) {
        const std::size_t pieces = parallel_reduce(
            context, 0, count, 0, std::size_t{0}, [](std::size_t, std::size_t) { return std::size_t{1}; },
            [](std::size_t a, std::size_t b) { return a + b; });
        EXPECT_EQ(pieces, expected) << count << " items, " << workers << " workers"
                                    << (deterministic ? ", deterministic" : "");
      }
    }
  }
}

// Small and uneven counts in deterministic mode: one piece per item below 64, and from 64 items the
// halving tree of grain ceil(count / 64), 33 to 64 leaves (65 items: 33; 80: 48), on every worker count.
TEST(DeterministicMode, SmallCountsSplitTheSameOnEveryWorkerCount) {
  const std::pair<std::size_t, std::size_t> cases[] = {{1, 1},   {10, 10}, {63, 63},  {64, 64},
                                                       {65, 33}, {80, 48}, {127, 64}, {129, 64}};
  for (unsigned workers : {1u, 2u, 4u}) {
    Settings settings = make_settings(workers);
    settings.set("parallel.deterministic_mode", "true");
    Context context(settings);
    for (const auto& [count, expected] : cases) {
      const std::size_t pieces = parallel_reduce(
          context, 0, count, 0, std::size_t{0}, [](std::size_t, std::size_t) { return std::size_t{1}; },
          [](std::size_t a, std::size_t b) { return a + b; });
      EXPECT_EQ(pieces, expected) << count << " items, " << workers << " workers";
    }
  }
}

}  // namespace
}  // namespace nerve::testing
