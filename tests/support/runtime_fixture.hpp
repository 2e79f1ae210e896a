// runtime_fixture.hpp — contexts for tests, and the teardown check that nothing leaked.
//
// make_settings() gives hermetic settings (no NERVE_* environment, no accelerator devices:
// gpu.devices = none, so that results do not depend on the machine's OpenCL platforms) for a worker
// count and policy. Backend tests opt in to devices themselves.
// expect_no_leaks() waits (briefly) for the last task records to be recycled, then asserts that no
// task record and no buffer is still alive.
#pragma once

#include <chrono>
#include <string>
#include <thread>
#include <tuple>

#include <gtest/gtest.h>

#include "nerve/nerve.hpp"

#include "runtime/context_impl.hpp"

namespace nerve::testing {

inline Settings make_settings(unsigned workers,
                              SchedulerPolicy policy = SchedulerPolicy::locality_aware_stealing) {
  Settings settings;
  settings.use_environment(false);
  settings.set("parallel.thread_pool_size", std::to_string(workers));
  settings.set("scheduler.policy", policy == SchedulerPolicy::eager  ? "eager"
                                   : policy == SchedulerPolicy::heft ? "heft"
                                                                     : "locality_aware_stealing");
  settings.set("gpu.devices", "none");
  return settings;
}

inline std::int64_t live_records(const Context& context) { return context.impl()->records.live_records(); }

inline std::size_t live_buffers(const Context& context) {
  std::lock_guard lock(context.impl()->buffers_mutex);
  return context.impl()->buffers.size();
}

inline void expect_no_leaks(const Context& context) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while ((live_records(context) != 0 || live_buffers(context) != 0) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(live_records(context), 0) << "task records still alive at teardown";
  EXPECT_EQ(live_buffers(context), 0u) << "buffers still alive at teardown";
}

// Parameters of the concurrency suites: every worker count on every policy.
using RuntimeParam = std::tuple<unsigned, SchedulerPolicy>;

inline std::string runtime_param_name(const ::testing::TestParamInfo<RuntimeParam>& info) {
  const auto [workers, policy] = info.param;
  return std::to_string(workers) + "_workers_" +
         (policy == SchedulerPolicy::eager  ? "eager"
          : policy == SchedulerPolicy::heft ? "heft"
                                            : "locality");
}

#define NERVE_RUNTIME_PARAMS                                                                            \
  ::testing::Combine(                                                                                   \
      ::testing::Values(1u, 2u, 4u, 8u),                                                                \
      ::testing::Values(nerve::SchedulerPolicy::eager, nerve::SchedulerPolicy::locality_aware_stealing, \
                        nerve::SchedulerPolicy::heft))

}  // namespace nerve::testing
