// w3_chain.cpp — W3: a dependency chain of N tasks over one small buffer, each read-writing it.
// Nothing but the declared access orders the tasks, so each task waits for the previous one and
// the chain runs strictly one task at a time: it measures the critical path of the dependency
// machinery — inferring the edge at submission (included in the time), then releasing the successor
// and getting it running when the predecessor finishes — not parallel throughput.
// Baselines: a oneTBB flow graph of N continue_nodes in a chain (building it is timed too, as nerve's
// inference is), and OpenMP tasks with depend(inout: x).
#include <cstdint>
#include <deque>
#include <span>

#if NERVE_HAVE_TBB
#include <tbb/flow_graph.h>
#endif

#include "nerve/nerve.hpp"

#include "measure.hpp"
#include "runtimes.hpp"
#include "workload.hpp"

namespace nerve::bench {
namespace {

constexpr std::uint64_t full_tasks = 100'000;
constexpr std::uint64_t quick_tasks = 20'000;
constexpr long initial_value = 4'242;  // non-zero input
const char* const case_name = "dependency chain";

// finish() makes the sample from the chain's time and its final value.
Trial finish(double ns, long value, std::uint64_t tasks) {
  return {ns / static_cast<double>(tasks),
          expect_equal("final value", value, initial_value + static_cast<long>(tasks))};
}

Trial run_nerve(nerve::Context& context, const nerve::Buffer<long>& buffer, std::uint64_t tasks,
                bool inject_fault) {
  Stopwatch watch;
  for (std::uint64_t i = 0; i < tasks; ++i) {
    context.spawn([](std::span<long> value) { value[0] += 1; }, nerve::read_write(buffer));
  }
  context.wait_all();
  const double ns = watch.elapsed_ns();
  // Reading the result back (a host mapping) is not part of the chain's time.
  return finish(ns, buffer.to_vector()[0] + (inject_fault ? 1 : 0), tasks);  // tests of the check only
}

#if NERVE_HAVE_TBB
Trial run_tbb(std::uint64_t tasks) {
  using Node = tbb::flow::continue_node<tbb::flow::continue_msg>;
  long value = initial_value;
  Stopwatch watch;
  tbb::flow::graph graph;
  std::deque<Node> nodes;  // a deque: nodes are neither movable nor copyable
  for (std::uint64_t i = 0; i < tasks; ++i) {
    nodes.emplace_back(graph, [&value](const tbb::flow::continue_msg&) { value += 1; });
    if (i != 0) tbb::flow::make_edge(nodes[i - 1], nodes[i]);
  }
  nodes.front().try_put(tbb::flow::continue_msg());
  graph.wait_for_all();
  // Destroying the nodes is left out of the time (the graph is built and run, as the definition says).
  return finish(watch.elapsed_ns(), value, tasks);
}
#endif

#if NERVE_HAVE_OPENMP
Trial run_openmp(std::uint64_t tasks, unsigned threads) {
  long value = initial_value;
  Stopwatch watch;
#pragma omp parallel num_threads(threads)
#pragma omp single
  {
    for (std::uint64_t i = 0; i < tasks; ++i) {
#pragma omp task depend(inout : value) shared(value)
      value += 1;
    }
#pragma omp taskwait
  }
  return finish(watch.elapsed_ns(), value, tasks);
}
#endif

}  // namespace

WorkloadResult run_w3_chain(const WorkloadOptions& options) {
  const std::uint64_t tasks = options.quick ? quick_tasks : full_tasks;
  WorkloadResult result{
      "W3", "dependency chain", "N = " + format_count(tasks) + " read-write tasks on one buffer", {}, {}};
  nerve::Context context(nerve_settings(options));
  TbbLimit tbb_limit(options.threads);
  set_openmp_threads(options.threads);
  const unsigned threads = options.threads;
  (void)threads;
  nerve::Buffer<long> buffer(context, 1);
  auto reset = [&buffer] { buffer.map_write()[0] = initial_value; };

  std::vector<Variant> variants;
  variants.push_back({case_name,
                      "nerve",
                      "nerve read_write",
                      "ns/task",
                      true,
                      tasks,
                      reset,
                      [&] { return run_nerve(context, buffer, tasks, options.inject_fault); },
                      {}});
#if NERVE_HAVE_TBB
  variants.push_back({case_name,
                      "oneTBB",
                      "oneTBB flow graph",
                      "ns/task",
                      true,
                      tasks,
                      {},
                      [tasks] { return run_tbb(tasks); },
                      {}});
#endif
#if NERVE_HAVE_OPENMP
  variants.push_back({case_name,
                      "OpenMP",
                      "OpenMP depend",
                      "ns/task",
                      true,
                      tasks,
                      {},
                      [tasks, threads] { return run_openmp(tasks, threads); },
                      {}});
#endif
  result.measurements = measure_interleaved(variants, options);
  result.goals.push_back(
      {case_name, {"oneTBB flow graph", "OpenMP depend"}, 0.5, "<= 0.5x min(oneTBB flow graph, OpenMP)"});
  return result;
}

}  // namespace nerve::bench
