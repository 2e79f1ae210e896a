// w8_allocations — workload W8 (small allocations, /work/shared/WORKLOADS.md), standalone until the
// workload library (bench/workloads, branch `bench`) is on main; then it becomes
// bench/workloads/w8_allocations.cpp with the same variants.
//
// Alloc+free pairs of 64 B and 4 KiB, on 1 thread and on all threads, from nerve's host pool — as
// the runtime calls it (memory::HostPool, fast path inlined) and through the public
// nerve::MemoryPool (one library call per operation) — against glibc malloc, jemalloc and tcmalloc,
// the last two opened with dlopen
// in this same process, so all four run on the same machine state. Variants are measured in
// interleaved rounds (round r runs every variant once), the first round is a warm-up, and the
// figure is the median per-thread time of one pair. Every pair's pointer is checked (non-null,
// 16-byte aligned, written), and the pools must end with nothing in use. Goals, for the runtime's
// pool: ≤ 10 ns per pair and ≤ 0.5× the fastest of the three allocators, in the same run.
//
// jemalloc can only be dlopen'ed with static TLS reserved at start-up: without
// GLIBC_TUNABLES=glibc.rtld.optional_static_tls=16384 the program re-executes itself with it.
//
// Usage: w8_allocations [--quick] [--repetitions N] [--threads N]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <dlfcn.h>
#include <unistd.h>

#include "nerve/config.hpp"
#include "nerve/memory.hpp"
#include "nerve/topology.hpp"

#include "memory/pool/host_node_allocator.hpp"
#include "memory/pool/host_pool.hpp"

namespace {

using Allocate = void* (*)(std::size_t);
using Free = void (*)(void*);

struct Allocator {
  std::string name;
  Allocate raw_allocate = nullptr;
  Free raw_free = nullptr;
};

// escape() keeps the compiler from proving a pointer unused (and eliding malloc/free pairs).
inline void escape(void* pointer) { asm volatile("" : : "g"(pointer) : "memory"); }

struct Sample {
  double ns_per_pair = 0;
  bool ok = true;
};

// run_pairs() times `pairs` alloc+free pairs of `bytes` on each of `threads` threads started
// together; returns the wall time per pair per thread.
template <class Pair>
Sample run_pairs(unsigned threads, std::uint64_t pairs, Pair&& pair) {
  std::atomic<unsigned> ready{0};
  std::atomic<bool> go{false};
  std::atomic<bool> ok{true};
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < threads; ++t) {
    workers.emplace_back([&] {
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      bool good = true;
      for (std::uint64_t i = 0; i < pairs; ++i) good &= pair();
      if (!good) ok.store(false);
    });
  }
  while (ready.load() < threads) std::this_thread::yield();
  const auto start = std::chrono::steady_clock::now();
  go.store(true, std::memory_order_release);
  for (auto& worker : workers) worker.join();
  const double ns =
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
  return {ns / static_cast<double>(pairs), ok.load()};
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

void* open_library(const char* file) {
  void* handle = dlopen(file, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) std::fprintf(stderr, "w8: %s not available: %s\n", file, dlerror());
  return handle;
}

}  // namespace

int main(int argc, char** argv) {
  if (const char* tunables = std::getenv("GLIBC_TUNABLES");
      tunables == nullptr || std::strstr(tunables, "optional_static_tls") == nullptr) {
    setenv("GLIBC_TUNABLES", "glibc.rtld.optional_static_tls=16384", 1);
    execv("/proc/self/exe", argv);  // only returns on failure: go on without jemalloc then
  }
  bool quick = false;
  int repetitions = 7;
  unsigned all_threads = std::max(1u, std::thread::hardware_concurrency());
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--quick") {
      quick = true;
      repetitions = 3;
    } else if (arg == "--repetitions" && i + 1 < argc) {
      repetitions = std::max(1, std::atoi(argv[++i]));
    } else if (arg == "--threads" && i + 1 < argc) {
      all_threads = static_cast<unsigned>(std::max(1, std::atoi(argv[++i])));
    } else {
      std::fprintf(stderr, "usage: w8_allocations [--quick] [--repetitions N] [--threads N]\n");
      return 2;
    }
  }
  const std::uint64_t pairs = quick ? 200'000 : 2'000'000;

  const nerve::Config config = nerve::Config::load(nerve::Settings());
  const nerve::Topology topology = nerve::Topology::discover(config);
  nerve::MemoryPool pool(config, topology);
  nerve::memory::HostPool runtime_pool(
      std::make_unique<nerve::memory::HostNodeAllocator>(config, topology, 0),
      nerve::memory::PoolOptions::from_config(config));

  std::vector<Allocator> baselines;
  baselines.push_back({"glibc malloc", &std::malloc, &std::free});
  for (const char* file : {"libjemalloc.so.2", "libtcmalloc_minimal.so.4"}) {
    if (void* handle = open_library(file)) {
      auto allocate = reinterpret_cast<Allocate>(dlsym(handle, "malloc"));
      auto release = reinterpret_cast<Free>(dlsym(handle, "free"));
      if (allocate != nullptr && release != nullptr) {
        baselines.push_back({std::strstr(file, "jemalloc") ? "jemalloc" : "tcmalloc", allocate, release});
      }
    }
  }

  std::printf(
      "W8 small allocations: %llu alloc+free pairs per thread per sample, median of %d samples "
      "(after 1 warm-up), ns per pair per thread\n",
      static_cast<unsigned long long>(pairs), repetitions);
  std::printf("nerve: %s\n\n", pool.stats().node.c_str());
  std::printf("nerve pool: memory::HostPool as the runtime calls it; nerve public: nerve::MemoryPool\n\n");
  std::printf("%-7s %-8s %-14s %9s %9s %9s  %s\n", "size", "threads", "allocator", "median", "min", "max",
              "nerve / fastest baseline");
  bool all_verified = true;
  bool all_goals = true;
  for (std::size_t bytes : {std::size_t{64}, std::size_t{4096}}) {
    std::vector<unsigned> thread_counts{1};
    if (all_threads > 1) thread_counts.push_back(all_threads);
    for (unsigned threads : thread_counts) {
      // Variants 0 and 1 are nerve's; the others are the baselines.
      const std::size_t variants = 2 + baselines.size();
      std::vector<std::vector<double>> samples(variants);
      bool verified = true;
      auto name_of = [&](std::size_t v) -> std::string {
        if (v == 0) return "nerve pool";
        if (v == 1) return "nerve public";
        return baselines[v - 2].name;
      };
      for (int round = 0; round <= repetitions; ++round) {
        for (std::size_t v = 0; v < variants; ++v) {
          Sample sample;
          if (v == 0) {
            sample = run_pairs(threads, pairs, [&] {
              void* p = runtime_pool.allocate(bytes);
              const bool good = p != nullptr && reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
              static_cast<volatile char*>(p)[0] = 1;
              escape(p);
              runtime_pool.deallocate(p, bytes);
              return good;
            });
          } else if (v == 1) {
            sample = run_pairs(threads, pairs, [&] {
              void* p = pool.allocate(bytes);
              const bool good = p != nullptr && reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
              static_cast<volatile char*>(p)[0] = 1;
              escape(p);
              pool.deallocate(p, bytes);
              return good;
            });
          } else {
            const Allocator& allocator = baselines[v - 2];
            sample = run_pairs(threads, pairs, [&] {
              void* p = allocator.raw_allocate(bytes);
              const bool good = p != nullptr && reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
              static_cast<volatile char*>(p)[0] = 1;
              escape(p);
              allocator.raw_free(p);
              return good;
            });
          }
          verified &= sample.ok;
          if (round > 0) samples[v].push_back(sample.ns_per_pair);
        }
      }
      double fastest = 0;
      for (std::size_t v = 2; v < variants; ++v) {
        const double m = median(samples[v]);
        if (fastest == 0 || m < fastest) fastest = m;
      }
      for (std::size_t v = 0; v < variants; ++v) {
        const double m = median(samples[v]);
        const auto [lo, hi] = std::minmax_element(samples[v].begin(), samples[v].end());
        std::printf("%-7s %-8u %-14s %9.2f %9.2f %9.2f", bytes == 64 ? "64 B" : "4 KiB", threads,
                    name_of(v).c_str(), m, *lo, *hi);
        if (v < 2 && fastest > 0) {
          const double ratio = m / fastest;
          const bool met = m <= 10.0 && ratio <= 0.5;
          if (v == 0) all_goals &= met;
          std::printf("  %.2fx  goal <=10 ns and <=0.5x: %s", ratio, met ? "met" : "NOT met");
        }
        std::printf("\n");
      }
      all_verified &= verified;
    }
  }
  const nerve::MemoryPoolStats stats = runtime_pool.stats();
  for (const nerve::MemoryPoolStats& end : {stats, pool.stats()}) {
    if (end.bytes_in_use != 0) {
      std::printf("FAILED: a pool has %zu bytes in use after the run\n", end.bytes_in_use);
      all_verified = false;
    }
  }
  std::printf("\nnerve pool (runtime): %llu allocations, %.4f%% from thread caches\n",
              static_cast<unsigned long long>(stats.allocations),
              100.0 * static_cast<double>(stats.from_thread_cache) / static_cast<double>(stats.allocations));
  std::printf("verified: %s; goals: %s\n", all_verified ? "yes" : "NO",
              all_goals ? "all met" : "not all met");
  return all_verified ? 0 : 1;
}
