// Stress: random task graphs over many buffers, with random read / write / read-write accesses on
// whole buffers and on slices, must leave exactly the memory that running the same tasks one by one
// in submission order leaves. 20 seeds × 100,000 tasks over 128 buffers, spread over worker counts
// and policies; then, with failures injected, the statuses the documented cancellation rule gives.
// NERVE_STRESS_TASKS overrides the task count (sanitizer builds use fewer).
#include "support/random_dag.hpp"

#include <algorithm>
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

// With failures injected (3 %): every task ends as the documented rule says (cancelled when it reads
// data whose last writer failed or was cancelled, whatever else it declares; failed when its body
// threw; else succeeded), wait_all() reports the first failure once, and every element whose last
// writer succeeded holds the sequential reference's value.
class RandomDagFailuresTest : public ::testing::TestWithParam<std::uint64_t> {};

TEST_P(RandomDagFailuresTest, StatusesAndDataMatchTheSequentialRule) {
  const std::uint64_t seed = GetParam();
  const unsigned worker_options[] = {1, 2, 4};
  const unsigned workers = worker_options[seed % 3];
  const SchedulerPolicy policies[] = {SchedulerPolicy::locality_aware_stealing, SchedulerPolicy::eager,
                                      SchedulerPolicy::heft};
  const SchedulerPolicy policy = policies[(seed / 3) % 3];
  const PlanShape shape{.tasks = std::min<std::size_t>(task_count(), 4000),
                        .buffers = 16,
                        .elements = 16,
                        .failures_per_1000 = 30};
  const auto plan = make_plan(seed * 7919, shape);
  auto expected = initial_memory(shape);
  std::vector<std::vector<bool>> poisoned(shape.buffers, std::vector<bool>(shape.elements, false));
  const std::vector<TaskStatus> statuses = run_reference_with_failures(plan, expected, poisoned);
  const auto failures =
      static_cast<std::size_t>(std::count(statuses.begin(), statuses.end(), TaskStatus::failed));
  ASSERT_GT(failures, 0u);

  Context context(make_settings(workers, policy));
  {
    std::vector<Buffer<std::uint64_t>> buffers;
    for (const auto& initial : initial_memory(shape))
      buffers.emplace_back(context, std::span<const std::uint64_t>(initial));
    std::vector<Task> handles;
    submit_plan(context, plan, buffers, &handles);
    std::size_t reported = 0;
    for (bool done = false; !done && reported <= failures;) {
      try {
        context.wait_all();
        done = true;
      } catch (const std::runtime_error& error) {
        EXPECT_STREQ(error.what(), "injected failure");
        ++reported;
      }
    }
    EXPECT_EQ(reported, 1u) << "wait_all() reports the first failure, once (seed " << seed << ")";
    for (std::size_t t = 0; t < plan.size(); ++t) {
      ASSERT_EQ(handles[t].status(), statuses[t]) << "task " << t << " (seed " << seed << ", " << workers
                                                  << " workers, policy " << static_cast<int>(policy) << ")";
    }
    for (std::size_t b = 0; b < shape.buffers; ++b) {
      for (std::size_t i = 0; i < shape.elements; ++i) {
        if (poisoned[b][i]) {
          EXPECT_THROW((void)buffers[b].slice(i, 1).to_vector(), TaskCancelled)
              << "buffer " << b << "[" << i << "]";
        } else {
          ASSERT_EQ(buffers[b].slice(i, 1).to_vector()[0], expected[b][i])
              << "buffer " << b << "[" << i << "] (seed " << seed << ")";
        }
      }
    }
  }
  context.wait_all();
  expect_no_leaks(context);
}

INSTANTIATE_TEST_SUITE_P(Seeds, RandomDagFailuresTest, ::testing::Range<std::uint64_t>(1, 10));

}  // namespace
}  // namespace nerve::testing
