// mpi_random_dag.cpp — a random distributed task graph checked against the same graph computed in one
// process, and the bytes the ranks sent checked against the minimum the ownership implies.
//
//   mpirun -np 4 mpi_random_dag [--tasks N] [--buffers B] [--elements E] [--seed S] [--pause-us P]
// --pause-us P sleeps P microseconds after each submission (the sync_interval run: payloads are then
// produced while the application thread submits, not while it waits, which flushes at once).
//
// Every rank builds the same graph from the seed: buffers with random owners, tasks that read up to
// three random buffers and write (or read-write) one. Bodies use integer arithmetic, so results are
// exact. The reference runs the same bodies in order on plain vectors and, along the way, counts the
// minimal traffic: a buffer version crosses to a rank once, when a task there first reads it. At the
// end rank 0 reads every buffer (that traffic is counted too) and compares. Exit status 0 = pass.
// The run's configuration comes from NERVE_DISTRIBUTED_* variables (batching, compression).
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "nerve/distributed.hpp"
#include "nerve/nerve.hpp"

namespace dist = nerve::distributed;

namespace {

struct Step {
  std::vector<std::size_t> inputs;
  std::size_t output;
  bool read_write;
  std::uint64_t salt;
};

// With --compressible, values are kept below 256, so payloads compress well (the zstd runs).
bool compressible = false;

void body(std::uint64_t salt, bool read_write, const std::vector<const std::uint64_t*>& inputs,
          std::uint64_t* output, std::size_t elements) {
  for (std::size_t i = 0; i < elements; ++i) {
    std::uint64_t value = read_write ? output[i] * 6364136223846793005ull : salt;
    for (const std::uint64_t* input : inputs) value = value * 31 + input[i];
    output[i] = value + salt + i;
    if (compressible) output[i] &= 0xff;
  }
}

std::size_t argument(int argc, char** argv, const char* name, std::size_t fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return std::strtoull(argv[i + 1], nullptr, 10);
  }
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  const std::size_t task_count = argument(argc, argv, "--tasks", 300);
  const std::size_t buffer_count = argument(argc, argv, "--buffers", 24);
  const std::size_t elements = argument(argc, argv, "--elements", 256);
  const std::uint64_t seed = argument(argc, argv, "--seed", 7);
  const std::size_t pause_us = argument(argc, argv, "--pause-us", 0);
  for (int i = 1; i < argc; ++i) compressible |= std::strcmp(argv[i], "--compressible") == 0;

  nerve::Context context;
  dist::Runtime world(context);
  const int ranks = world.size();

  // The graph, the same on every rank.
  std::mt19937_64 random(seed);
  std::vector<int> owners(buffer_count);
  for (int& owner : owners) owner = static_cast<int>(random() % static_cast<std::uint64_t>(ranks));
  std::vector<Step> steps(task_count);
  for (Step& step : steps) {
    step.output = random() % buffer_count;
    step.read_write = random() % 2 == 0;
    const std::size_t inputs = random() % 4;
    for (std::size_t k = 0; k < inputs; ++k) step.inputs.push_back(random() % buffer_count);
    step.salt = random();
  }

  // The reference, and the minimal traffic: held[b] = ranks with the current version of b.
  std::vector<std::vector<std::uint64_t>> expected(buffer_count, std::vector<std::uint64_t>(elements, 0));
  std::vector<std::set<int>> held(buffer_count);
  for (std::size_t b = 0; b < buffer_count; ++b) held[b] = {owners[b]};
  std::uint64_t minimal_bytes = 0;
  auto read_on = [&](std::size_t b, int rank) {
    if (held[b].insert(rank).second) minimal_bytes += elements * sizeof(std::uint64_t);
  };
  for (const Step& step : steps) {
    const int rank = owners[step.output];
    std::vector<const std::uint64_t*> inputs;
    for (std::size_t b : step.inputs) {
      read_on(b, rank);
      inputs.push_back(expected[b].data());
    }
    std::vector<std::uint64_t> out = expected[step.output];
    body(step.salt, step.read_write, inputs, out.data(), elements);
    expected[step.output] = out;
    held[step.output] = {rank};
  }
  for (std::size_t b = 0; b < buffer_count; ++b) read_on(b, 0);

  // The distributed run: zero-initialise each buffer on its owner, then the steps.
  std::vector<dist::DistributedBuffer<std::uint64_t>> buffers;
  for (std::size_t b = 0; b < buffer_count; ++b) {
    buffers.push_back(world.buffer<std::uint64_t>(elements, owners[b]));
    world.submit(
        dist::TaskOptions{.name = "init"},
        [](std::span<std::uint64_t> out) { std::fill(out.begin(), out.end(), 0); },
        dist::write(buffers.back()));
  }
  // Initialisation writes: the reference's versions start after them; they move nothing.
  for (const Step& step : steps) {
    const auto& out = buffers[step.output];
    auto run = [&](auto&&... in) {
      const std::uint64_t salt = step.salt;
      const bool read_write = step.read_write;
      auto fn = [salt, read_write, elements](std::span<std::uint64_t> output, auto... inputs) {
        body(salt, read_write, {inputs.data()...}, output.data(), elements);
      };
      if (read_write) {
        world.submit(dist::TaskOptions{.name = "step"}, fn, dist::read_write(out), dist::read(in)...);
      } else {
        world.submit(dist::TaskOptions{.name = "step"}, fn, dist::write(out), dist::read(in)...);
      }
    };
    const auto& in = step.inputs;
    switch (in.size()) {
      case 0: run(); break;
      case 1: run(buffers[in[0]]); break;
      case 2: run(buffers[in[0]], buffers[in[1]]); break;
      default: run(buffers[in[0]], buffers[in[1]], buffers[in[2]]); break;
    }
    if (pause_us != 0) std::this_thread::sleep_for(std::chrono::microseconds(pause_us));
  }
  // Rank 0 checks every buffer.
  std::vector<int> mismatches(buffer_count, 0);
  for (std::size_t b = 0; b < buffer_count; ++b) {
    world.submit(
        dist::TaskOptions{.name = "check", .rank = 0},
        [&mismatches, &expected, b](std::span<const std::uint64_t> data) {
          mismatches[b] = !std::equal(data.begin(), data.end(), expected[b].begin());
        },
        dist::read(buffers[b]));
  }
  world.wait_all();
  const dist::DistributedStats stats = world.stats();

  // Gather every rank's bytes on rank 0, through the runtime itself (after reading the stats).
  std::vector<dist::DistributedBuffer<std::uint64_t>> counters;
  for (int r = 0; r < ranks; ++r) {
    counters.push_back(world.buffer<std::uint64_t>(5, r));
    world.submit(
        [&stats](std::span<std::uint64_t> out) {
          out[0] = stats.bytes_sent;
          out[1] = stats.payloads_sent;
          out[2] = stats.messages_sent;
          out[3] = stats.compressed_payloads;
          out[4] = stats.batch_flushes_by_interval;
        },
        dist::write(counters.back()));
  }
  std::uint64_t totals[5] = {0, 0, 0, 0, 0};
  std::mutex totals_mutex;
  for (int r = 0; r < ranks; ++r) {
    world.submit(
        dist::TaskOptions{.rank = 0},
        [&totals, &totals_mutex](std::span<const std::uint64_t> in) {
          // These tasks read different buffers, so they may run at once: the sum needs a lock.
          std::lock_guard lock(totals_mutex);
          for (int k = 0; k < 5; ++k) totals[k] += in[static_cast<std::size_t>(k)];
        },
        dist::read(counters[static_cast<std::size_t>(r)]));
  }
  world.wait_all();
  world.dump_perf_stats("mpi_random_dag.rank{rank}.json");
  world.dump_trace("mpi_random_dag.trace.json");
  if (world.rank() != 0) return 0;

  int failures = 0;
  for (std::size_t b = 0; b < buffer_count; ++b) failures += mismatches[b];
  std::printf(
      "ranks %d, tasks %zu, buffers %zu: %d mismatching buffers; bytes sent %llu (minimum %llu), payloads "
      "%llu, "
      "messages %llu, compressed %llu\n",
      ranks, task_count, buffer_count, failures, static_cast<unsigned long long>(totals[0]),
      static_cast<unsigned long long>(minimal_bytes), static_cast<unsigned long long>(totals[1]),
      static_cast<unsigned long long>(totals[2]), static_cast<unsigned long long>(totals[3]));
  bool ok = failures == 0 && totals[0] == minimal_bytes;
  if (const char* expect = std::getenv("EXPECT_BATCHED"); expect != nullptr && totals[2] >= totals[1]) {
    std::printf("FAIL: batching expected fewer messages than payloads\n");
    ok = false;
  }
  if (const char* expect = std::getenv("EXPECT_COMPRESSED"); expect != nullptr && totals[3] == 0) {
    std::printf("FAIL: compression expected compressed payloads\n");
    ok = false;
  }
  // EXPECT_INTERVAL_FLUSHES=1: some batches left because sync_interval passed; =0: none did (an
  // interval longer than the run: were the key ignored, the default 1 ms would flush some).
  if (const char* expect = std::getenv("EXPECT_INTERVAL_FLUSHES"); expect != nullptr) {
    if (std::string(expect) == "0" && totals[4] != 0) {
      std::printf("FAIL: no batch was expected to leave because of distributed.sync_interval\n");
      ok = false;
    } else if (std::string(expect) != "0" && totals[4] == 0) {
      std::printf("FAIL: batches were expected to leave because distributed.sync_interval passed\n");
      ok = false;
    }
  }
  // The merged timeline has a track group (process) per rank, with that rank's tasks in it.
  std::ifstream trace_file("mpi_random_dag.trace.json");
  const std::string trace((std::istreambuf_iterator<char>(trace_file)), std::istreambuf_iterator<char>());
  for (int r = 0; r < ranks; ++r) {
    const std::string track = "\"args\":{\"name\":\"rank " + std::to_string(r) + "\"}";
    const std::string event = "\"ph\":\"X\",\"pid\":" + std::to_string(r) + ",";
    if (trace.find(track) == std::string::npos || trace.find(event) == std::string::npos) {
      std::printf("FAIL: the merged trace has no track with events for rank %d\n", r);
      ok = false;
    }
  }
  std::printf("batches flushed by sync_interval: %llu\n", static_cast<unsigned long long>(totals[4]));
  std::printf("%s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
