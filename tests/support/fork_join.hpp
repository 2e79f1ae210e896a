// fork_join.hpp — recursive fork-join through TaskGroup, for tests of nested submission.
#pragma once

#include "nerve/nerve.hpp"

namespace nerve::testing {

// fib(n) with one group per call: one child spawned, the other computed by the caller.
inline long fork_join_fib(Context& context, int n) {
  if (n < 2) return n;
  long left = 0;
  long right = 0;
  TaskGroup group(context);
  group.spawn([&] { left = fork_join_fib(context, n - 1); });
  right = fork_join_fib(context, n - 2);
  group.wait();
  return left + right;
}

}  // namespace nerve::testing
