// w8_allocations.cpp — W8: alloc+free pairs of 64 B and 4 KiB, on one thread and on all T threads
// at once, from nerve's host pool against glibc malloc, jemalloc and tcmalloc in the same process
// (allocator_baselines.hpp). Each thread runs `pairs` pairs; the figure is the wall time of a
// sample divided by `pairs`: nanoseconds per pair, per thread.
// Two nerve variants: "nerve pool" is memory::HostPool as the runtime uses it (its fast path inlined
// into the caller); "nerve MemoryPool" is the public nerve::MemoryPool (one library call per
// operation). Every pair checks its pointer (non-null, 16-byte aligned) and writes it; after every
// sample nerve's pools must have nothing in use.
// Goals (per case): each nerve variant <= 0.5x the fastest of the three allocators (each called with
// the size where it takes one: allocator_baselines.hpp), and the nerve pool <= 10 ns per pair
// (reported in its note).
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "nerve/config.hpp"
#include "nerve/memory.hpp"
#include "nerve/topology.hpp"

#include "allocator_baselines.hpp"
#include "measure.hpp"
#include "memory/pool/host_node_allocator.hpp"
#include "memory/pool/host_pool.hpp"
#include "workload.hpp"

namespace nerve::bench {
namespace {

constexpr std::uint64_t full_pairs = 2'000'000;
constexpr std::uint64_t quick_pairs = 200'000;
constexpr double goal_ns = 10.0;

// escape() keeps the compiler from proving a pointer unused and eliding the pair.
inline void escape(void* pointer) { asm volatile("" : : "g"(pointer) : "memory"); }

// time_pairs() runs `pairs` calls of pair() on each of `threads` threads released together; the
// value is ns per pair per thread, and a failure when any pair saw a bad pointer.
template <class Pair>
Trial time_pairs(unsigned threads, std::uint64_t pairs, const Pair& pair) {
  std::atomic<unsigned> ready{0};
  std::atomic<bool> go{false};
  std::atomic<std::uint64_t> bad{0};
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < threads; ++t) {
    workers.emplace_back([&] {
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      std::uint64_t failures = 0;
      for (std::uint64_t i = 0; i < pairs; ++i) failures += pair() ? 0 : 1;
      bad.fetch_add(failures);
    });
  }
  while (ready.load() < threads) std::this_thread::yield();
  Stopwatch watch;
  go.store(true, std::memory_order_release);
  for (auto& worker : workers) worker.join();
  const double ns = watch.elapsed_ns();
  return {ns / static_cast<double>(pairs),
          bad.load() == 0 ? std::string()
                          : std::to_string(bad.load()) + " pairs got a null or misaligned pointer"};
}

// touch() checks and writes a fresh allocation: what every variant does with it.
inline bool touch(void* pointer) {
  const bool good = pointer != nullptr && reinterpret_cast<std::uintptr_t>(pointer) % 16 == 0;
  if (good) static_cast<volatile char*>(pointer)[0] = 1;
  escape(pointer);
  return good;
}

// with_pool_check() appends "pool not empty" to a trial whose pool kept memory in use.
Trial with_pool_check(Trial trial, const MemoryPoolStats& stats) {
  if (stats.bytes_in_use != 0 && trial.failure.empty()) {
    trial.failure =
        std::to_string(stats.bytes_in_use) + " bytes still in use in nerve's pool after the sample";
  }
  return trial;
}

std::string case_name(std::size_t bytes, unsigned threads) {
  return std::string(bytes == 64 ? "64 B" : "4 KiB") + " pairs, " + std::to_string(threads) +
         (threads == 1 ? " thread" : " threads");
}

}  // namespace

WorkloadResult run_w8_allocations(const WorkloadOptions& options) {
  const std::uint64_t pairs = options.quick ? quick_pairs : full_pairs;
  WorkloadResult result{"W8",
                        "small allocations",
                        format_count(pairs) +
                            " alloc+free pairs per thread per sample, 64 B and 4 KiB, 1 and " +
                            std::to_string(options.threads) + " threads",
                        {},
                        {}};
  const Config config = Config::load(options.settings);
  const Topology topology = Topology::discover(config);
  // The runtime's pool, and the same through the public API.
  auto runtime_pool =
      std::make_unique<memory::HostPool>(std::make_unique<memory::HostNodeAllocator>(config, topology, 0),
                                         memory::PoolOptions::from_config(config));
  auto public_pool = std::make_unique<MemoryPool>(config, topology);
  std::string missing;
  const std::vector<BaselineAllocator>& baselines = baseline_allocators(&missing);
  if (!missing.empty()) std::fprintf(stderr, "W8: allocators left out: %s\n", missing.c_str());

  std::vector<unsigned> thread_counts{1};
  if (options.threads > 1) thread_counts.push_back(options.threads);
  std::vector<Variant> variants;
  std::vector<std::string> baseline_names;
  for (const BaselineAllocator& baseline : baselines) baseline_names.push_back(baseline.name);
  for (const std::size_t bytes : {std::size_t{64}, std::size_t{4096}}) {
    for (const unsigned threads : thread_counts) {
      const std::string name = case_name(bytes, threads);
      memory::HostPool* pool = runtime_pool.get();
      MemoryPool* api = public_pool.get();
      variants.push_back({name,
                          "nerve",
                          "nerve pool",
                          "ns/pair",
                          true,
                          pairs,
                          {},
                          [=, inject_fault = options.inject_fault] {
                            const Trial trial = time_pairs(threads, pairs, [pool, bytes] {
                              void* p = pool->allocate(bytes);
                              const bool good = touch(p);
                              pool->deallocate(p, bytes);
                              return good;
                            });
                            // inject_fault (tests of the check only): a block left in use.
                            void* kept = inject_fault ? pool->allocate(bytes) : nullptr;
                            Trial checked = with_pool_check(trial, pool->stats());
                            if (kept != nullptr) pool->deallocate(kept, bytes);
                            return checked;
                          },
                          [](const Measurement& m) {
                            return std::string("goal <= 10 ns/pair: ") +
                                   (m.value <= goal_ns ? "met" : "not met");
                          }});
      variants.push_back({name,
                          "nerve",
                          "nerve MemoryPool",
                          "ns/pair",
                          true,
                          pairs,
                          {},
                          [=] {
                            return with_pool_check(time_pairs(threads, pairs,
                                                              [api, bytes] {
                                                                void* p = api->allocate(bytes);
                                                                const bool good = touch(p);
                                                                api->deallocate(p, bytes);
                                                                return good;
                                                              }),
                                                   api->stats());
                          },
                          {}});
      for (const BaselineAllocator& baseline : baselines) {
        const BaselineAllocator allocator = baseline;
        variants.push_back({name,
                            allocator.name,
                            allocator.name,
                            "ns/pair",
                            true,
                            pairs,
                            {},
                            [=] {
                              return time_pairs(threads, pairs, [allocator, bytes] {
                                void* p = allocator.allocate(bytes);
                                const bool good = touch(p);
                                allocator.free(p, bytes);
                                return good;
                              });
                            },
                            {}});
      }
      // Both nerve variants are judged: the runtime's own pool, and the public pool a program gets.
      for (const char* variant : {"nerve pool", "nerve MemoryPool"}) {
        result.goals.push_back(
            {name, baseline_names, 0.5,
             std::string(variant) + " <= 0.5x the fastest of glibc malloc, jemalloc, tcmalloc", variant});
      }
    }
  }
  result.measurements = measure_interleaved(variants, options);
  return result;
}

}  // namespace nerve::bench
