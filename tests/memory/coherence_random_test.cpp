// Coherence under random task graphs across the host and two separate-memory devices: the final
// memory equals the sequential reference, and the bytes copied equal the minimum that the access
// pattern and the placement require (an MSI simulation) — no copy is ever duplicated.
#include "coherence_support.hpp"
#include "support/random_dag.hpp"

namespace nerve::testing {
namespace {

class CoherenceRandomTest : public ::testing::TestWithParam<std::uint64_t> {};

TEST_P(CoherenceRandomTest, MatchesReferenceWithMinimumTransfers) {
  const std::uint64_t seed = GetParam();
  const PlanShape shape{.tasks = 3000, .buffers = 24, .elements = 40, .devices = 2};
  const auto plan = make_plan(seed, shape);
  auto expected = initial_memory(shape);
  const std::uint64_t minimum = minimum_bytes(plan, shape);

  auto context = context_with_devices(1 + static_cast<unsigned>(seed % 4), 2);
  {
    std::vector<Buffer<std::uint64_t>> buffers;
    for (const auto& initial : expected)
      buffers.emplace_back(*context, std::span<const std::uint64_t>(initial));
    run_reference(plan, expected);
    submit_plan(*context, plan, buffers);
    context->wait_all();
    EXPECT_EQ(context->stats().bytes_transferred, minimum) << "seed " << seed;
    for (std::size_t b = 0; b < shape.buffers; ++b) {
      ASSERT_EQ(buffers[b].to_vector(), expected[b]) << "buffer " << b << " differs (seed " << seed << ")";
    }
  }
  expect_no_leaks(*context);
}

// HOST_CACHED and STICKY buffers on devices whose copies take different times: the copy-backs each
// device write starts are ordered by nothing but the runtime, and a slow one must never land over
// newer bytes. Data only (copy-backs are extra transfers by design).
TEST_P(CoherenceRandomTest, HostCachedCopyBacksFromDevicesOfUnequalSpeedMatchReference) {
  const std::uint64_t seed = GetParam();
  const PlanShape shape{.tasks = 600, .buffers = 12, .elements = 40, .devices = 2};
  const auto plan = make_plan(seed, shape);
  auto expected = initial_memory(shape);
  auto context = std::make_unique<Context>(make_settings(1 + static_cast<unsigned>(seed % 3)));
  detail::TestDeviceOptions slow;
  slow.copy_latency = std::chrono::microseconds(200 + 100 * (seed % 5));
  context->impl()->add_test_device(seed % 2 == 0 ? slow : detail::TestDeviceOptions{});
  context->impl()->add_test_device(seed % 2 == 0 ? detail::TestDeviceOptions{} : slow);
  {
    std::vector<Buffer<std::uint64_t>> buffers;
    for (std::size_t b = 0; b < shape.buffers; ++b) {
      const BufferOptions options{.sticky = b % 4 == 1, .host_cached = b % 3 != 2};
      buffers.emplace_back(*context, std::span<const std::uint64_t>(expected[b]), options);
    }
    run_reference(plan, expected);
    submit_plan(*context, plan, buffers);
    context->wait_all();
    for (std::size_t b = 0; b < shape.buffers; ++b) {
      ASSERT_EQ(buffers[b].to_vector(), expected[b]) << "buffer " << b << " differs (seed " << seed << ")";
    }
  }
  expect_no_leaks(*context);
}

INSTANTIATE_TEST_SUITE_P(Seeds, CoherenceRandomTest, ::testing::Range<std::uint64_t>(1, 11));

}  // namespace
}  // namespace nerve::testing
