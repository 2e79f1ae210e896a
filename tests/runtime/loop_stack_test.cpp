// Loops at the edge of the stack a task may use: its own binary, compiled with -O1, whose larger
// frames (the loops are templates, instantiated here) put a loop's refused wait where it crashed.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>

#include <alloca.h>
#include <pthread.h>

#include <gtest/gtest.h>

#include "nerve/nerve.hpp"

#include "support/runtime_fixture.hpp"

namespace nerve::testing {
namespace {

// parallel_reduce and parallel_for called by a task whose stack is nearly used up, just above and
// just inside the part nerve keeps back (256 KiB): each either works or is Error(out_of_memory), and
// waits for the pieces it spawned before it throws. A loop whose own wait was refused there (as the
// submission that failed) returned with pieces still running on its frame: 3 runs in 4 crashed.
__attribute__((noinline)) void loops_at_stack_depth(Context& context, std::uintptr_t until,
                                                    std::atomic<int>& worked, std::atomic<int>& refused) {
  const auto here = reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0));
  if (here > until + 64) {
    volatile char* used = static_cast<char*>(alloca(here - until - 32));
    used[0] = 0;
    asm volatile("" : : "r"(used) : "memory");
  }
  try {
    const long sum = parallel_reduce(
        context, 0, 64, 1, 0L,
        [](std::size_t begin, std::size_t end) { return static_cast<long>(end - begin); },
        [](long a, long b) { return a + b; });
    std::atomic<int> visited{0};
    parallel_for(context, 0, 64, 1, [&visited](std::size_t) { visited.fetch_add(1); });
    EXPECT_EQ(sum, 64);
    EXPECT_EQ(visited.load(), 64);
    worked.fetch_add(1);
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::out_of_memory) << error.what();
    refused.fetch_add(1);
  }
}

TEST(NestedWaits, LoopsWithTheStackNearlyUsedUpWorkOrRefuseAndNeverCrash) {
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "the sanitizers' frames use the stack their own way";
#endif
  Context context(make_settings(2));
  std::atomic<int> worked{0}, refused{0};
  for (int margin = -1024; margin <= 8192; margin += 8) {
    const Task task = context.submit([&context, &worked, &refused, margin] {
      if (context.current_worker() == 0) return;  // the application thread's bounds are not its own
      pthread_attr_t attributes;
      pthread_getattr_np(pthread_self(), &attributes);
      void* lowest = nullptr;
      std::size_t size = 0;
      pthread_attr_getstack(&attributes, &lowest, &size);
      pthread_attr_destroy(&attributes);
      const std::uintptr_t kept_back = std::min<std::uintptr_t>(256 * 1024, size / 4);
      loops_at_stack_depth(context, reinterpret_cast<std::uintptr_t>(lowest) + kept_back + 4096 + margin,
                           worked, refused);
    });
    while (!task.wait_for(std::chrono::seconds(1))) {  // runs nothing itself: a worker runs the task
    }
  }
  EXPECT_GT(worked.load() + refused.load(), 0) << "no task ran on a worker";
}

}  // namespace
}  // namespace nerve::testing
