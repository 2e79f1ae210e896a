// Allocation failure while a device task's data is prepared: the submission of a task to a separate-
// memory device runs with its N-th heap allocation failing, for every N until it needs no more. Each
// attempt must leave the device usable: the task succeeds, or its submission throws std::bad_alloc,
// or it fails with the error — and then a task that needs the whole device still runs there (no pin
// or half-queued copy left behind; it hung for good), and a copy that failed counts no bytes.
//
// This executable replaces the global operator new (a countdown per thread), so it is a test binary
// of its own: the other suites keep the real allocator.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "coherence_support.hpp"
#include "support/failing_allocations.hpp"

namespace nerve::testing {
namespace {

constexpr std::size_t n = 1024;
constexpr std::size_t bytes = n * sizeof(int);

TEST(CoherenceAllocFailure, ADeviceTaskWhoseDataPreparationFailsLeavesTheDeviceUsable) {
  int injected_failures = 0;
  int failed_copies = 0;
  for (long attempt = 0; attempt < 400; ++attempt) {
    // Room for one replica: the second task can only run once the first one's replica can go.
    auto context = context_with_devices(1, 1, detail::TestDeviceOptions{.memory_limit = bytes});
    const std::vector<int> fives(n, 5);
    Buffer<int> a(*context, std::span<const int>(fives));
    Buffer<int> b(*context, std::span<const int>(fives));
    context->wait_all();
    allocations_before_failure = attempt;
    std::string failure;
    try {
      context->spawn(
          TaskOptions{.device = 1}, [](std::span<int> data) { data[0] += 1; }, read_write(a));
    } catch (const std::bad_alloc&) {
      failure = "submission: std::bad_alloc";
    }
    const bool injected = allocations_before_failure == -1;
    allocations_before_failure = -1;
    try {
      context->wait_all();
    } catch (const std::exception& error) {
      failure = error.what();
    }
    if (failure.find("copying") != std::string::npos) {
      ++failed_copies;
      EXPECT_EQ(bytes_moved(*context, 0, 1), 0u) << "attempt " << attempt << ": a failed copy moved nothing";
    }
    Task whole = context->submit(
        TaskOptions{.device = 1}, [](std::span<int> data) { data[0] += 1; }, read_write(b));
    if (!whole.wait_for(std::chrono::seconds(10))) {
      std::fprintf(stderr, "attempt %ld (%s): a task needing the whole device never ran\n", attempt,
                   failure.c_str());
      std::_Exit(3);  // the context's destruction would wait for it as well
    }
    EXPECT_NO_THROW(whole.wait()) << "attempt " << attempt;
    if (failure.empty()) EXPECT_EQ(a.to_vector()[0], 6) << "attempt " << attempt;  // else its readers fail
    EXPECT_EQ(b.to_vector()[0], 6) << "attempt " << attempt;
    if (!injected) break;
    ++injected_failures;
  }
  EXPECT_GT(injected_failures, 3) << "the preparation allocates: failures were injected";
  EXPECT_GT(failed_copies, 0) << "one failure was the copy's own (its start allocates)";
}

}  // namespace
}  // namespace nerve::testing
