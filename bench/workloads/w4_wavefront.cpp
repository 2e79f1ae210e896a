// w4_wavefront.cpp — W4: a 2D wavefront over a grid of one-element buffers. Task (i, j) reads cells
// (i-1, j) and (i, j-1) and read-writes (i, j); tasks are submitted row-major, so the dependencies
// (up to three accesses per task) form a DAG whose parallelism grows to the anti-diagonal's length.
// It measures dependency inference over many buffers plus the release of up to two successors per
// task. The result is compared bit for bit with a sequential sweep of the same update.
// Baselines: a oneTBB flow graph of continue_nodes with edges from the two neighbours (built and run
// in the timed region) and OpenMP tasks with depend(in: up, left) depend(inout: self).
#include <cstdint>
#include <cstring>
#include <deque>
#include <span>
#include <string>
#include <vector>

#if NERVE_HAVE_TBB
#include <tbb/flow_graph.h>
#endif

#include "nerve/nerve.hpp"

#include "measure.hpp"
#include "runtimes.hpp"
#include "workload.hpp"

namespace nerve::bench {
namespace {

constexpr std::size_t full_side = 256;
constexpr std::size_t quick_side = 128;
const char* const case_name = "2D wavefront";

// The cell update; missing neighbours (row 0, column 0) count as 0. The same inline function in
// every runtime and in the reference, so results must match exactly.
inline double update(double self, double up, double left) { return 0.5 * (up + left) + 0.25 * self + 1.0; }

// Non-zero, patterned initial values.
double initial_value(std::size_t i, std::size_t j) {
  return 0.01 * static_cast<double>((i * 7 + j * 3) % 11 + 1);
}

std::vector<double> initial_grid(std::size_t side) {
  std::vector<double> grid(side * side);
  for (std::size_t i = 0; i < side; ++i)
    for (std::size_t j = 0; j < side; ++j) grid[i * side + j] = initial_value(i, j);
  return grid;
}

std::vector<double> reference_grid(std::size_t side) {
  std::vector<double> grid = initial_grid(side);
  for (std::size_t i = 0; i < side; ++i) {
    for (std::size_t j = 0; j < side; ++j) {
      const double up = i > 0 ? grid[(i - 1) * side + j] : 0.0;
      const double left = j > 0 ? grid[i * side + j - 1] : 0.0;
      grid[i * side + j] = update(grid[i * side + j], up, left);
    }
  }
  return grid;
}

std::string compare(const std::vector<double>& got, const std::vector<double>& expected, std::size_t side) {
  for (std::size_t k = 0; k < expected.size(); ++k) {
    if (std::memcmp(&got[k], &expected[k], sizeof(double)) != 0) {
      return "cell (" + std::to_string(k / side) + ", " + std::to_string(k % side) +
             ") = " + std::to_string(got[k]) + ", expected " + std::to_string(expected[k]);
    }
  }
  return {};
}

struct Setup {
  std::size_t side;
  std::vector<double> reference;
  double tasks() const { return static_cast<double>(side * side); }
};

// --- nerve: one Buffer<double> of one element per cell.
void nerve_reset(const std::vector<nerve::Buffer<double>>& cells, std::size_t side) {
  for (std::size_t k = 0; k < cells.size(); ++k) cells[k].map_write()[0] = initial_value(k / side, k % side);
}

Trial run_nerve(nerve::Context& context, const std::vector<nerve::Buffer<double>>& cells, const Setup& setup,
                bool inject_fault) {
  const std::size_t side = setup.side;
  using In = std::span<const double>;
  using Out = std::span<double>;
  Stopwatch watch;
  for (std::size_t i = 0; i < side; ++i) {
    for (std::size_t j = 0; j < side; ++j) {
      const auto& self = cells[i * side + j];
      if (i > 0 && j > 0) {
        context.spawn([](In up, In left, Out cell) { cell[0] = update(cell[0], up[0], left[0]); },
                      nerve::read(cells[(i - 1) * side + j]), nerve::read(cells[i * side + j - 1]),
                      nerve::read_write(self));
      } else if (i > 0) {
        context.spawn([](In up, Out cell) { cell[0] = update(cell[0], up[0], 0.0); },
                      nerve::read(cells[(i - 1) * side + j]), nerve::read_write(self));
      } else if (j > 0) {
        context.spawn([](In left, Out cell) { cell[0] = update(cell[0], 0.0, left[0]); },
                      nerve::read(cells[j - 1]), nerve::read_write(self));
      } else {
        context.spawn([](Out cell) { cell[0] = update(cell[0], 0.0, 0.0); }, nerve::read_write(self));
      }
    }
  }
  context.wait_all();
  const double ns = watch.elapsed_ns();
  std::vector<double> got(cells.size());
  for (std::size_t k = 0; k < cells.size(); ++k) got[k] = cells[k].map_read()[0];
  if (inject_fault) got[got.size() / 2] += 1.0;  // tests of the check only
  return {ns / setup.tasks(), compare(got, setup.reference, side)};
}

#if NERVE_HAVE_TBB
Trial run_tbb(const Setup& setup) {
  using Node = tbb::flow::continue_node<tbb::flow::continue_msg>;
  const std::size_t side = setup.side;
  std::vector<double> grid = initial_grid(side);
  double* g = grid.data();
  Stopwatch watch;
  tbb::flow::graph graph;
  std::deque<Node> nodes;  // a deque: nodes are neither movable nor copyable
  for (std::size_t i = 0; i < side; ++i) {
    for (std::size_t j = 0; j < side; ++j) {
      nodes.emplace_back(graph, [g, side, i, j](const tbb::flow::continue_msg&) {
        const double up = i > 0 ? g[(i - 1) * side + j] : 0.0;
        const double left = j > 0 ? g[i * side + j - 1] : 0.0;
        g[i * side + j] = update(g[i * side + j], up, left);
      });
      if (i > 0) tbb::flow::make_edge(nodes[(i - 1) * side + j], nodes.back());
      if (j > 0) tbb::flow::make_edge(nodes[i * side + j - 1], nodes.back());
    }
  }
  nodes.front().try_put(tbb::flow::continue_msg());
  graph.wait_for_all();
  const double ns = watch.elapsed_ns();
  return {ns / setup.tasks(), compare(grid, setup.reference, side)};
}
#endif

#if NERVE_HAVE_OPENMP
Trial run_openmp(const Setup& setup, unsigned threads) {
  const std::size_t side = setup.side;
  std::vector<double> grid = initial_grid(side);
  double* g = grid.data();
  Stopwatch watch;
#pragma omp parallel num_threads(threads)
#pragma omp single
  {
    for (std::size_t i = 0; i < side; ++i) {
      for (std::size_t j = 0; j < side; ++j) {
        const std::size_t k = i * side + j;
        if (i > 0 && j > 0) {
#pragma omp task depend(in : g[k - side], g[k - 1]) depend(inout : g[k]) firstprivate(k)
          g[k] = update(g[k], g[k - side], g[k - 1]);
        } else if (i > 0) {
#pragma omp task depend(in : g[k - side]) depend(inout : g[k]) firstprivate(k)
          g[k] = update(g[k], g[k - side], 0.0);
        } else if (j > 0) {
#pragma omp task depend(in : g[k - 1]) depend(inout : g[k]) firstprivate(k)
          g[k] = update(g[k], 0.0, g[k - 1]);
        } else {
#pragma omp task depend(inout : g[k]) firstprivate(k)
          g[k] = update(g[k], 0.0, 0.0);
        }
      }
    }
#pragma omp taskwait
  }
  const double ns = watch.elapsed_ns();
  return {ns / setup.tasks(), compare(grid, setup.reference, side)};
}
#endif

}  // namespace

WorkloadResult run_w4_wavefront(const WorkloadOptions& options) {
  const std::size_t side = options.quick ? quick_side : full_side;
  const Setup setup{side, reference_grid(side)};
  const auto tasks = static_cast<std::uint64_t>(side * side);
  WorkloadResult result{"W4",
                        "2D wavefront",
                        std::to_string(side) + " x " + std::to_string(side) + " one-element buffers",
                        {},
                        {}};
  nerve::Context context(nerve_settings(options));
  TbbLimit tbb_limit(options.threads);
  set_openmp_threads(options.threads);
  const unsigned threads = options.threads;
  (void)threads;
  std::vector<nerve::Buffer<double>> cells;
  cells.reserve(side * side);
  for (std::size_t k = 0; k < side * side; ++k) cells.emplace_back(context, 1);

  std::vector<Variant> variants;
  variants.push_back({case_name,
                      "nerve",
                      "nerve buffers",
                      "ns/task",
                      true,
                      tasks,
                      [&cells, side] { nerve_reset(cells, side); },
                      [&] { return run_nerve(context, cells, setup, options.inject_fault); },
                      {}});
#if NERVE_HAVE_TBB
  variants.push_back({case_name,
                      "oneTBB",
                      "oneTBB flow graph",
                      "ns/task",
                      true,
                      tasks,
                      {},
                      [&setup] { return run_tbb(setup); },
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
                      [&setup, threads] { return run_openmp(setup, threads); },
                      {}});
#endif
  result.measurements = measure_interleaved(variants, options);
  result.goals.push_back(
      {case_name, {"oneTBB flow graph", "OpenMP depend"}, 0.5, "<= 0.5x min(oneTBB flow graph, OpenMP)"});
  return result;
}

}  // namespace nerve::bench
