// naive_threads.hpp — the "naive" baseline of the data-parallel workloads: what a program does
// without a runtime. Every call starts T std::threads (the calling thread being one of them), gives
// each an equal contiguous part of [0, n) and joins them. Thread creation is inside the timed region
// on purpose: that is the cost the naive approach pays on every parallel step.
#pragma once

#include <algorithm>
#include <cstddef>
#include <thread>
#include <vector>

namespace nerve::bench {

// static_split() runs body(begin, end) over T equal parts of [0, n); part 0 on the calling thread.
template <class Body>
void static_split(std::size_t n, unsigned threads, const Body& body) {
  threads = std::max(1u, threads);
  const std::size_t part = (n + threads - 1) / threads;
  std::vector<std::thread> pool;
  pool.reserve(threads - 1);
  for (unsigned t = 1; t < threads; ++t) {
    const std::size_t begin = std::min(n, t * part);
    const std::size_t end = std::min(n, begin + part);
    pool.emplace_back([&body, begin, end] { body(begin, end); });
  }
  body(0, std::min(n, part));
  for (std::thread& thread : pool) thread.join();
}

}  // namespace nerve::bench
