// cholesky_mpi — tiled Cholesky and GEMM over MPI ranks on a 2D block-cyclic grid.
//
//   nerve-run -np 4 cholesky_mpi [--n 2048] [--tile 256] [--gemm] [--check]
//   (or: NERVE_DISTRIBUTED_COMMUNICATION_BACKEND=mpi mpirun -np 4 cholesky_mpi ...)
//
// Every rank runs this same program (the sequential task flow): it creates every tile as a
// distributed buffer owned per the 2D block-cyclic grid and submits every task; nerve runs each task
// on the rank owning the tile it writes and moves the tiles it reads. --check collects the result on
// rank 0 and compares it with the same tiled algorithm run in one process. Run alone, it is one rank
// (communication_backend: none, the default); under mpirun it needs distributed.communication_backend:
// mpi, which nerve-run sets — without it every rank stops with nerve's message saying so (exit 2).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include <sys/resource.h>

#include "nerve/distributed.hpp"
#include "nerve/nerve.hpp"

#include "arguments.hpp"
#include "result_checks.hpp"
#include "tiles.hpp"

extern "C" void openblas_set_num_threads(int threads);

namespace dist = nerve::distributed;
using Tile = dist::DistributedBuffer<double>;

namespace {

struct Options {
  std::size_t n = 2048;
  std::size_t tile = 256;
  bool gemm = false;
  bool check = false;
};

[[noreturn]] void usage(const std::string& problem) {
  nerve_examples::usage_exit(
      "cholesky_mpi",
      "usage: cholesky_mpi [--n N] [--tile B] [--gemm] [--check]\n"
      "  N: 1 to 1048576 (default 2048), a multiple of B; B: 1 to 16383 (default 256)\n",
      problem);
}

Options parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (nerve_examples::is_help(arg)) usage("");
    if (arg == "--gemm") {
      options.gemm = true;
    } else if (arg == "--check") {
      options.check = true;
    } else if (arg == "--n" || arg == "--tile") {
      if (i + 1 == argc) usage("missing value for " + arg);
      const std::string value = argv[++i];
      (arg == "--n" ? options.n : options.tile) =
          nerve_examples::count_option(arg, value, arg == "--n" ? example::max_n : example::max_tile, usage);
    } else {
      usage("unknown option " + arg);
    }
  }
  if (options.n % options.tile != 0) usage("--n must be a multiple of --tile");
  return options;
}

// Totals of every rank's statistics, on rank 0 (moved through the runtime itself).
struct Totals {
  std::uint64_t bytes = 0, payloads = 0, messages = 0, cpu_us = 0;
};

// What a run measured: its wall time and every rank's totals, taken before --check collects the
// result on rank 0, so that the traffic reported is the factorisation's (docs/DISTRIBUTED.md's volume
// model) with and without --check.
struct Measured {
  double seconds = 0;
  Totals totals;
};

// cpu_microseconds() is the CPU time this process has used (all its threads).
std::uint64_t cpu_microseconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto us = [](const timeval& t) { return static_cast<std::uint64_t>(t.tv_sec) * 1000000 + t.tv_usec; };
  return us(usage.ru_utime) + us(usage.ru_stime);
}

Totals gather_totals(dist::Runtime& world, std::uint64_t cpu_us) {
  const dist::DistributedStats stats = world.stats();
  std::vector<dist::DistributedBuffer<std::uint64_t>> counters;
  for (int r = 0; r < world.size(); ++r) {
    counters.push_back(world.buffer<std::uint64_t>(4, r));
    world.submit(
        [stats, cpu_us](std::span<std::uint64_t> out) {
          out[0] = stats.bytes_sent;
          out[1] = stats.payloads_sent;
          out[2] = stats.messages_sent;
          out[3] = cpu_us;
        },
        dist::write(counters.back()));
  }
  Totals totals;
  std::mutex totals_mutex;
  for (const auto& counter : counters) {
    world.submit(
        dist::TaskOptions{.rank = 0},
        [&totals, &totals_mutex](std::span<const std::uint64_t> in) {
          // These tasks read different buffers, so they may run at once: the sum needs a lock.
          std::lock_guard lock(totals_mutex);
          totals.bytes += in[0];
          totals.payloads += in[1];
          totals.messages += in[2];
          totals.cpu_us += in[3];
        },
        dist::read(counter));
  }
  world.wait_all();
  return totals;
}

// collect() copies tiles to a full column-major matrix on rank 0.
void collect(dist::Runtime& world, const std::vector<Tile>& tiles, std::size_t nt, std::size_t b,
             std::vector<double>& full, bool lower_only) {
  const std::size_t n = nt * b;
  for (std::size_t i = 0; i < nt; ++i) {
    for (std::size_t j = 0; j < (lower_only ? i + 1 : nt); ++j) {
      world.submit(
          dist::TaskOptions{.name = "collect", .rank = 0},
          [&full, i, j, b, n](std::span<const double> t) {
            for (std::size_t c = 0; c < b; ++c) std::copy_n(&t[c * b], b, &full[(j * b + c) * n + i * b]);
          },
          dist::read(tiles[i * nt + j]));
    }
  }
  world.wait_all();
}

Measured cholesky(dist::Runtime& world, const Options& options, std::vector<double>* result) {
  const std::size_t b = options.tile, nt = options.n / b, n = options.n;
  const int bi = static_cast<int>(b);
  const dist::Grid grid = dist::Grid::for_ranks(world.size());
  std::vector<Tile> tiles(nt * nt);
  for (std::size_t i = 0; i < nt; ++i) {
    for (std::size_t j = 0; j <= i; ++j) {
      tiles[i * nt + j] = world.buffer<double>(b * b, grid.owner(i, j));
      world.submit(
          dist::TaskOptions{.name = "init"},
          [i, j, b, n](std::span<double> t) { example::fill_tile(t, i, j, b, n); },
          dist::write(tiles[i * nt + j]));
    }
  }
  world.barrier();
  const auto start = std::chrono::steady_clock::now();
  const std::uint64_t cpu_start = cpu_microseconds();
  auto at = [&](std::size_t i, std::size_t j) -> const Tile& { return tiles[i * nt + j]; };
  for (std::size_t k = 0; k < nt; ++k) {
    world.submit(
        dist::TaskOptions{.name = "potrf"}, [bi](std::span<double> a) { example::potrf(a, bi); },
        dist::read_write(at(k, k)));
    for (std::size_t i = k + 1; i < nt; ++i) {
      world.submit(
          dist::TaskOptions{.name = "trsm"},
          [bi](std::span<double> a, std::span<const double> l) { example::trsm(a, l, bi); },
          dist::read_write(at(i, k)), dist::read(at(k, k)));
    }
    for (std::size_t i = k + 1; i < nt; ++i) {
      world.submit(
          dist::TaskOptions{.name = "syrk"},
          [bi](std::span<double> a, std::span<const double> l) { example::syrk(a, l, bi); },
          dist::read_write(at(i, i)), dist::read(at(i, k)));
      for (std::size_t j = k + 1; j < i; ++j) {
        world.submit(
            dist::TaskOptions{.name = "gemm"},
            [bi](std::span<double> a, std::span<const double> x, std::span<const double> y) {
              example::gemm_nt(a, x, y, bi);
            },
            dist::read_write(at(i, j)), dist::read(at(i, k)), dist::read(at(j, k)));
      }
    }
  }
  world.wait_all();
  Measured measured;
  measured.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  measured.totals = gather_totals(world, cpu_microseconds() - cpu_start);
  if (result != nullptr) {
    result->assign(n * n, 0.0);
    collect(world, tiles, nt, b, *result, true);
  }
  return measured;
}

// The same tiled algorithm in this process, on a full matrix (the reference).
std::vector<double> cholesky_reference(const Options& options) {
  const std::size_t b = options.tile, nt = options.n / b, n = options.n;
  const int bi = static_cast<int>(b);
  std::vector<std::vector<double>> tiles(nt * nt, std::vector<double>(b * b));
  for (std::size_t i = 0; i < nt; ++i) {
    for (std::size_t j = 0; j <= i; ++j) example::fill_tile(tiles[i * nt + j], i, j, b, n);
  }
  for (std::size_t k = 0; k < nt; ++k) {
    example::potrf(tiles[k * nt + k], bi);
    for (std::size_t i = k + 1; i < nt; ++i) example::trsm(tiles[i * nt + k], tiles[k * nt + k], bi);
    for (std::size_t i = k + 1; i < nt; ++i) {
      example::syrk(tiles[i * nt + i], tiles[i * nt + k], bi);
      for (std::size_t j = k + 1; j < i; ++j)
        example::gemm_nt(tiles[i * nt + j], tiles[i * nt + k], tiles[j * nt + k], bi);
    }
  }
  std::vector<double> full(n * n, 0.0);
  for (std::size_t i = 0; i < nt; ++i) {
    for (std::size_t j = 0; j <= i; ++j) {
      for (std::size_t c = 0; c < b; ++c)
        std::copy_n(&tiles[i * nt + j][c * b], b, &full[(j * b + c) * n + i * b]);
    }
  }
  return full;
}

// Distributed C = A B on the grid: C(i,j) += A(i,k) B(k,j) on the owner of C(i,j).
Measured gemm(dist::Runtime& world, const Options& options, std::vector<double>* result) {
  const std::size_t b = options.tile, nt = options.n / b, n = options.n;
  const int bi = static_cast<int>(b);
  const dist::Grid grid = dist::Grid::for_ranks(world.size());
  std::vector<Tile> a(nt * nt), bm(nt * nt), c(nt * nt);
  for (std::size_t i = 0; i < nt; ++i) {
    for (std::size_t j = 0; j < nt; ++j) {
      const int owner = grid.owner(i, j);
      a[i * nt + j] = world.buffer<double>(b * b, owner);
      bm[i * nt + j] = world.buffer<double>(b * b, owner);
      c[i * nt + j] = world.buffer<double>(b * b, owner);
      world.submit(
          [i, j, b, n](std::span<double> x, std::span<double> y, std::span<double> z) {
            example::fill_tile(x, i, j, b, n);
            example::fill_tile(y, j, i, b, n);
            std::fill(z.begin(), z.end(), 0.0);
          },
          dist::write(a[i * nt + j]), dist::write(bm[i * nt + j]), dist::write(c[i * nt + j]));
    }
  }
  world.barrier();
  const auto start = std::chrono::steady_clock::now();
  const std::uint64_t cpu_start = cpu_microseconds();
  for (std::size_t k = 0; k < nt; ++k) {
    for (std::size_t i = 0; i < nt; ++i) {
      for (std::size_t j = 0; j < nt; ++j) {
        world.submit(
            dist::TaskOptions{.name = "gemm"},
            [bi](std::span<double> z, std::span<const double> x, std::span<const double> y) {
              example::gemm_nn(z, x, y, bi);
            },
            dist::read_write(c[i * nt + j]), dist::read(a[i * nt + k]), dist::read(bm[k * nt + j]));
      }
    }
  }
  world.wait_all();
  Measured measured;
  measured.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  measured.totals = gather_totals(world, cpu_microseconds() - cpu_start);
  if (result != nullptr) {
    result->assign(n * n, 0.0);
    collect(world, c, nt, b, *result, false);
  }
  return measured;
}

std::vector<double> gemm_reference(const Options& options) {
  const std::size_t b = options.tile, nt = options.n / b, n = options.n;
  const int bi = static_cast<int>(b);
  std::vector<double> full(n * n, 0.0);
  std::vector<double> x(b * b), y(b * b), z(b * b);
  for (std::size_t i = 0; i < nt; ++i) {
    for (std::size_t j = 0; j < nt; ++j) {
      std::fill(z.begin(), z.end(), 0.0);
      for (std::size_t k = 0; k < nt; ++k) {
        example::fill_tile(x, i, k, b, n);
        example::fill_tile(y, j, k, b, n);  // B(k, j) is generated from tile (j, k)
        example::gemm_nn(z, x, y, bi);
      }
      for (std::size_t col = 0; col < b; ++col) std::copy_n(&z[col * b], b, &full[(j * b + col) * n + i * b]);
    }
  }
  return full;
}

}  // namespace

int run(const Options& options) {
  nerve::Context context;
  dist::Runtime world(context);
  std::vector<double> result;
  const auto [seconds, totals] = options.gemm ? gemm(world, options, options.check ? &result : nullptr)
                                              : cholesky(world, options, options.check ? &result : nullptr);
  if (world.rank() != 0) return 0;
  const double n = static_cast<double>(options.n);
  const double flops = options.gemm ? 2.0 * n * n * n : n * n * n / 3.0;
  // CPU time matters on a shared machine: there, wall time depends on the share the OS scheduler gives
  // each process (one per rank), so GFLOP per CPU-second is the fairer comparison between layouts.
  const double cpu_seconds = static_cast<double>(totals.cpu_us) / 1e6;
  std::printf(
      "%s n=%zu tile=%zu ranks=%d workers/rank=%u: %.3f s, %.2f GFLOP/s, cpu %.2f s (%.2f GFLOP per "
      "cpu-second), sent %.1f MiB in %llu payloads (%llu messages)\n",
      options.gemm ? "gemm" : "cholesky", options.n, options.tile, world.size(), context.worker_count(),
      seconds, flops / seconds / 1e9, cpu_seconds, flops / cpu_seconds / 1e9,
      static_cast<double>(totals.bytes) / (1 << 20), static_cast<unsigned long long>(totals.payloads),
      static_cast<unsigned long long>(totals.messages));
  if (!options.check) return 0;
  const std::vector<double> reference = options.gemm ? gemm_reference(options) : cholesky_reference(options);
  double worst = 0.0;  // a NaN or infinite element makes it +infinity: FAIL
  for (std::size_t i = 0; i < reference.size(); ++i) {
    worst = nerve_examples::larger_difference(
        worst, std::abs(reference[i] - result[i]) / std::max(1.0, std::abs(reference[i])));
  }
  const bool ok = worst <= 1e-12;
  std::printf("check against one process: largest relative difference %.3g: %s\n", worst,
              ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}

int main(int argc, char** argv) {
  const Options options = parse(argc, argv);
  openblas_set_num_threads(1);  // nerve's workers are the parallelism
  try {
    return run(options);
  } catch (const nerve::Error& error) {  // e.g. a world of several ranks without the MPI backend
    std::fprintf(stderr, "cholesky_mpi: %s\n", error.what());
    return 2;
  } catch (const std::exception& error) {  // e.g. more tiles or a larger --check matrix than memory
    std::fprintf(stderr, "cholesky_mpi: --n %zu --tile %zu: %s\n", options.n, options.tile, error.what());
    return 1;
  }
}
