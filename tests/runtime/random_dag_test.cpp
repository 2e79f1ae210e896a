// Stress: random task graphs over many buffers, with random read / write / read-write accesses on
// whole buffers and on slices, must leave exactly the memory that running the same tasks one by one
// in submission order leaves. 20 seeds × 100,000 tasks over 128 buffers, spread over worker counts
// and policies. NERVE_STRESS_TASKS overrides the task count (sanitizer builds use fewer).
#include "support/random_dag.hpp"

#include <cstdlib>

#include "support/runtime_fixture.hpp"

namespace nerve::testing {
namespace {

std::size_t task_count() {
  if (const char* text = std::getenv("NERVE_STRESS_TASKS")) return static_cast<std::size_t>(std::atoll(text));
  return 100000;
}

class RandomDagTest : public ::testing::TestWithParam<std::uint64_t> {};

TEST_P(RandomDagTest, MatchesSequentialExecution) {
  const std::uint64_t seed = GetParam();
  const unsigned worker_options[] = {1, 2, 4, 8};
  const unsigned workers = worker_options[seed % 4];
  const auto policy = (seed / 4) % 2 == 0 ? SchedulerPolicy::locality_aware_stealing : SchedulerPolicy::eager;
  const PlanShape shape{.tasks = task_count(), .buffers = 128, .elements = 48};
  const auto plan = make_plan(seed, shape);
  auto expected = initial_memory(shape);

  Context context(make_settings(workers, policy));
  {
    std::vector<Buffer<std::uint64_t>> buffers;
    for (const auto& initial : expected)
      buffers.emplace_back(context, std::span<const std::uint64_t>(initial));
    run_reference(plan, expected);
    submit_plan(context, plan, buffers);
    context.wait_all();
    for (std::size_t b = 0; b < shape.buffers; ++b) {
      ASSERT_EQ(buffers[b].to_vector(), expected[b])
          << "buffer " << b << " differs (seed " << seed << ", " << workers << " workers)";
    }
  }
  expect_no_leaks(context);
}

INSTANTIATE_TEST_SUITE_P(Seeds, RandomDagTest, ::testing::Range<std::uint64_t>(1, 21));

}  // namespace
}  // namespace nerve::testing
