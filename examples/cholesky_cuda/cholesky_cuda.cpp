// cholesky_cuda — a heterogeneous tiled Cholesky factorisation: every tile kernel has a CPU
// implementation (OpenBLAS/LAPACK, examples/cholesky_mpi/tiles.hpp) and a CUDA one (cuSOLVER potrf,
// cuBLAS trsm/syrk/gemm, cuda_tiles.hpp); nerve places each task on the CPU workers or a GPU and moves
// the tiles. The matrix is the distributed example's (symmetric positive definite by construction).
//
//   cholesky_cuda [--n N] [--tile B] [--gpu-only] [--baseline] [--check] [--policy P]
//                 (defaults 8192, 1024, heft)
//
// Prints the factorisation's time and GFLOP/s (n^3/3 flops), from tiles in host memory to the factor
// back in host memory; --baseline adds cuSOLVER potrf of the whole matrix on GPU 0 alone (compute
// only, and with the upload); --check compares sampled entries of L·Lᵀ with A. --gpu-only gives the
// kernels no CPU implementation. --policy P (default heft) places the trailing updates with
// scheduler.policy P, and the run reports how many of them went to the CPU workers and the bytes
// copied to and from the GPUs. Without a CUDA device: "no CUDA device, skipped", exit 0.
//
// How the work is placed (the GPU is ~500x faster per tile than a CPU worker):
//   - scheduler.policy heft (with CPU implementations): each kernel call goes where its predicted
//     finish is earliest, from history models of each kernel on each device. An untimed warm-up
//     before the measurement runs every kernel on every device, one call at a time, so the models
//     are calibrated (>= 10 samples; models persist in perf.model_dir) and the libraries, per-stream
//     handles, staging memory and device memory are set up before the clock starts.
//   - The critical path — potrf, the panel's trsm, the diagonal tiles' syrk, and the updates of the
//     next two columns (lookahead) — is pinned to the GPU and given priority (> 0): high-priority streams
//     (scheduler.gpu_stream_priorities), so it does not queue behind bulk updates. Only the trailing
//     gemm updates are left to heft, which gives one to the CPU workers only when it predicts an
//     earlier finish there than behind the GPU's backlog.
//   - OpenBLAS runs single-threaded in each CPU task: nerve's workers are the parallelism.
//   - Each tile is copied back to host memory (a host task reading it) as soon as it is final, so
//     the write-back overlaps the rest of the factorisation instead of following it tile by tile.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "nerve/cuda.hpp"
#include "nerve/nerve.hpp"

#include "../cholesky_mpi/tiles.hpp"
#include "arguments.hpp"
#include "cuda_tiles.hpp"
#include "result_checks.hpp"

extern "C" void openblas_set_num_threads(int threads);

namespace {

constexpr int warmup_rounds = 11;     // > 10: a history model is calibrated after 10 samples
constexpr std::size_t lookahead = 2;  // columns after the panel whose updates stay on the GPU

struct Options {
  std::size_t n = 8192;
  std::size_t tile = 1024;
  bool gpu_only = false;
  bool baseline = false;
  bool check = false;
  std::string policy = "heft";  // scheduler.policy for the trailing updates' placement
};

[[noreturn]] void usage(const std::string& problem) {
  nerve_examples::usage_exit(
      "cholesky_cuda",
      "usage: cholesky_cuda [--n N] [--tile B] [--gpu-only] [--baseline] [--check] "
      "[--policy heft|eager|locality_aware_stealing]\n"
      "  N: 1 to 1048576 (default 8192), a multiple of B; B: 1 to 16383 (default 1024)\n",
      problem);
}

// parse() checks every argument (numbers: digits only, examples/common/arguments.hpp) before main()
// looks for a CUDA device, so that a machine without one reports a bad command line too.
Options parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (nerve_examples::is_help(arg)) usage("");
    if (arg == "--gpu-only") {
      options.gpu_only = true;
    } else if (arg == "--baseline") {
      options.baseline = true;
    } else if (arg == "--check") {
      options.check = true;
    } else if (arg == "--n" || arg == "--tile" || arg == "--policy") {
      if (i + 1 == argc) usage("missing value for " + arg);
      const std::string value = argv[++i];
      if (arg == "--policy") {
        options.policy = value;
        continue;
      }
      (arg == "--n" ? options.n : options.tile) =
          nerve_examples::count_option(arg, value, arg == "--n" ? example::max_n : example::max_tile, usage);
    } else {
      usage("unknown option " + arg);
    }
  }
  if (options.policy != "heft" && options.policy != "eager" && options.policy != "locality_aware_stealing")
    usage("--policy must be heft, eager or locality_aware_stealing");
  if (options.n % options.tile != 0) usage("--n must be a multiple of --tile");
  return options;
}

double* device_data(const nerve::KernelArgs& args, std::size_t i) {
  return static_cast<double*>(args.data(i));
}

struct Kernels {
  nerve::Kernel potrf{"potrf"}, trsm{"trsm"}, syrk{"syrk"}, gemm{"gemm"};

  Kernels(int b, bool with_cpu) {
    using nerve::KernelArgs;
    nerve::cuda::attach(potrf, [b](const KernelArgs& args, int device, void* stream) {
      example::gpu::potrf(device_data(args, 0), b, device, stream);
    });
    nerve::cuda::attach(trsm, [b](const KernelArgs& args, int device, void* stream) {
      example::gpu::trsm(device_data(args, 0), device_data(args, 1), b, device, stream);
    });
    nerve::cuda::attach(syrk, [b](const KernelArgs& args, int device, void* stream) {
      example::gpu::syrk(device_data(args, 0), device_data(args, 1), b, device, stream);
    });
    nerve::cuda::attach(gemm, [b](const KernelArgs& args, int device, void* stream) {
      example::gpu::gemm_nt(device_data(args, 0), device_data(args, 1), device_data(args, 2), b, device,
                            stream);
    });
    if (!with_cpu) return;
    potrf.cpu([b](const KernelArgs& args) { example::potrf(args.span<double>(0), b); });
    trsm.cpu(
        [b](const KernelArgs& args) { example::trsm(args.span<double>(0), args.span<const double>(1), b); });
    syrk.cpu(
        [b](const KernelArgs& args) { example::syrk(args.span<double>(0), args.span<const double>(1), b); });
    gemm.cpu([b](const KernelArgs& args) {
      example::gemm_nt(args.span<double>(0), args.span<const double>(1), args.span<const double>(2), b);
    });
  }
};

// warm_up(): each kernel `warmup_rounds` times on `device` (nerve's index: 0 = the CPU workers), one
// call at a time so that each history-model sample is the call's own run time, on scratch tiles;
// `priority` alternates so that both kinds of CUDA streams see launches (their handles are made).
void warm_up(nerve::Context& context, const Kernels& kernels, int device, std::size_t b, std::size_t n) {
  std::vector<double> scratch(b * b);
  example::fill_tile(scratch, 1, 0, b, n);
  nerve::Buffer<double> x(context, std::span<const double>(scratch)),
      y(context, std::span<const double>(scratch)), z(context, std::span<const double>(scratch));
  example::fill_tile(scratch, 0, 0, b, n);
  nerve::Buffer<double> d(context, std::span<const double>(scratch));
  for (int round = 0; round < warmup_rounds; ++round) {
    nerve::TaskOptions options;
    options.device = device;
    options.priority = round % 2 == 0 ? nerve::Priority::normal : nerve::Priority::high;
    if (round > 0) {  // a fresh positive definite tile for potrf (a write mapping moves nothing)
      auto mapped = d.map_write();
      example::fill_tile(mapped.span(), 0, 0, b, n);
    }
    context.spawn(options, kernels.potrf, nerve::read_write(d));
    context.wait_all();
    context.spawn(options, kernels.trsm, nerve::read_write(x), nerve::read(d));
    context.wait_all();
    context.spawn(options, kernels.syrk, nerve::read_write(y), nerve::read(x));
    context.wait_all();
    context.spawn(options, kernels.gemm, nerve::read_write(z), nerve::read(x), nerve::read(y));
    context.wait_all();
  }
}

}  // namespace

int run(const Options& options, int gpus);

int main(int argc, char** argv) {
  const Options options = parse(argc, argv);
  const char* why = "";
  const int gpus = example::gpu::device_count(&why);
  if (gpus == 0) {
    std::printf("cholesky_cuda: no CUDA device, skipped (%s)\n", why);
    return 0;
  }
  try {
    return run(options, gpus);
  } catch (const std::exception& error) {  // e.g. a --baseline matrix larger than the memory
    std::fprintf(stderr, "cholesky_cuda: --n %zu --tile %zu: %s\n", options.n, options.tile, error.what());
    return 1;
  }
}

int run(const Options& options, int gpus) {
  openblas_set_num_threads(1);  // one BLAS thread per CPU task: nerve's workers are the parallelism
  const std::size_t n = options.n, b = options.tile, nt = n / b;
  const int bi = static_cast<int>(b);
  const double gflop = static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / 3.0 / 1e9;
  int status = 0;
  {
    nerve::Settings settings;
    settings.set("gpu.devices", "cuda");
    // Model-based placement between the CPU workers and the GPUs (with --gpu-only there is no choice).
    if (!options.gpu_only) settings.set("scheduler.policy", options.policy);
    // Two high-priority streams per device for the critical path, four for everything else.
    settings.set("gpu.stream_count", "6");
    settings.set("scheduler.gpu_stream_priorities", "2");
    nerve::Context context(settings);
    const Kernels kernels(bi, !options.gpu_only);
    // The libraries, once per device, on this thread, before any launch.
    for (int device = 0; device < gpus; ++device)
      example::gpu::prepare(device, static_cast<int>(nt) + 2 * warmup_rounds + 16);
    std::vector<int> gpu_devices;  // nerve's indices of the CUDA devices
    for (const nerve::DeviceInfo& device : context.devices())
      if (device.kind == nerve::DeviceKind::cuda) gpu_devices.push_back(device.index);
    if (gpu_devices.empty()) {
      std::printf("cholesky_cuda: no CUDA device, skipped (nerve opened none)\n");
      return 0;
    }
    // Untimed: models calibrated, handles, workspaces, staging and device memory set up.
    for (int device : gpu_devices) warm_up(context, kernels, device, b, n);
    if (!options.gpu_only) warm_up(context, kernels, 0, b, n);
    // Lower-triangle tiles, column-major, each its own buffer (tile (i, j) at i * nt + j).
    std::vector<nerve::Buffer<double>> tiles(nt * nt);
    std::vector<double> scratch(b * b);
    for (std::size_t j = 0; j < nt; ++j) {
      for (std::size_t i = j; i < nt; ++i) {
        example::fill_tile(scratch, i, j, b, n);
        tiles[i * nt + j] = nerve::Buffer<double>(context, std::span<const double>(scratch));
      }
    }
    // The critical path (potrf, the panel, syrk, the next `lookahead` columns' updates): on a GPU (with
    // --gpu-only nerve chooses among the GPUs; there is nothing else), first, on the high-priority
    // streams. The trailing updates: anywhere (heft decides), at normal priority.
    const auto critical = [&](std::size_t column) {
      nerve::TaskOptions o;
      o.priority = nerve::Priority::high + static_cast<int>(nt - column);  // earlier columns first
      if (!options.gpu_only) o.device = gpu_devices[column % gpu_devices.size()];
      return o;
    };
    const nerve::TaskOptions trailing;
    const nerve::ContextStats before = context.stats();
    const auto start = std::chrono::steady_clock::now();
    for (std::size_t k = 0; k < nt; ++k) {
      auto& kk = tiles[k * nt + k];
      context.spawn(critical(k), kernels.potrf, nerve::read_write(kk));
      for (std::size_t i = k + 1; i < nt; ++i)
        context.spawn(critical(k), kernels.trsm, nerve::read_write(tiles[i * nt + k]), nerve::read(kk));
      // Column k is final now: its tiles go back to host memory as soon as they are (a host task
      // reading each), overlapping the rest of the factorisation.
      for (std::size_t i = k; i < nt; ++i) context.spawn([] {}, nerve::read(tiles[i * nt + k]));
      for (std::size_t i = k + 1; i < nt; ++i) {
        // syrk feeds potrf of its diagonal tile: always on the critical path.
        context.spawn(critical(k), kernels.syrk, nerve::read_write(tiles[i * nt + i]),
                      nerve::read(tiles[i * nt + k]));
        for (std::size_t j = k + 1; j < i; ++j) {
          context.spawn(j <= k + lookahead ? critical(k) : trailing, kernels.gemm,
                        nerve::read_write(tiles[i * nt + j]), nerve::read(tiles[i * nt + k]),
                        nerve::read(tiles[j * nt + k]));
        }
      }
    }
    context.wait_all();
    // The factor in host memory (already copied back: mapping moves nothing), part of the time, as
    // it is for a program that uses it there.
    std::vector<nerve::Mapped<const double>> factor(nt * nt);
    for (std::size_t j = 0; j < nt; ++j)
      for (std::size_t i = j; i < nt; ++i) factor[i * nt + j] = tiles[i * nt + j].map_read();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const nerve::ContextStats after = context.stats();
    const int failed = example::gpu::failures();
    std::printf("cholesky_cuda: n = %zu, tile %zu, %d GPU(s)%s\n", n, b, gpus,
                options.gpu_only ? " only" : " + CPU workers");
    std::printf("  nerve heterogeneous   %9.3f s  %9.1f GFLOP/s%s\n", seconds, gflop / seconds,
                failed != 0 ? "  (a tile was not positive definite)" : "");
    if (failed != 0) status = 1;
    if (!options.gpu_only) {
      // Where the trailing updates went (the CPU workers' other tasks are the tiles' write-back
      // readers, one per tile), and what the placement cost in copies.
      const std::size_t tiles_total = nt * (nt + 1) / 2;
      const std::size_t trailing_gemms =
          nt < lookahead + 2 ? 0 : (nt - lookahead - 1) * (nt - lookahead - 2) * (nt - lookahead) / 6;
      const auto on_cpu = static_cast<long long>(after.devices[0].tasks - before.devices[0].tasks) -
                          static_cast<long long>(tiles_total);
      std::uint64_t moved = 0;
      for (std::size_t d = 1; d < after.devices.size(); ++d)
        moved += after.devices[d].bytes_in + after.devices[d].bytes_out - before.devices[d].bytes_in -
                 before.devices[d].bytes_out;
      std::printf("  scheduler.policy %s: %lld of %zu trailing gemms on the CPU workers, %.1f MB moved\n",
                  options.policy.c_str(), on_cpu, trailing_gemms, static_cast<double>(moved) / 1e6);
    }
    if (options.check) {
      // L·Lᵀ at sampled (row, col), row >= col, against A.
      double worst = 0;
      std::uint64_t x = 12345;
      for (int sample = 0; sample < 2000; ++sample) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        std::size_t row = (x >> 20) % n, col = (x >> 40) % n;
        if (row < col) std::swap(row, col);
        double sum = 0;
        for (std::size_t k = 0; k <= col; ++k) {
          const auto& lr = factor[(row / b) * nt + k / b];
          const auto& lc = factor[(col / b) * nt + k / b];
          sum += lr[(k % b) * b + row % b] * lc[(k % b) * b + col % b];
        }
        // A NaN or infinite entry makes `worst` +infinity: WRONG.
        worst = nerve_examples::larger_difference(
            worst, std::abs(sum - example::entry(row, col, n)) / static_cast<double>(n));
      }
      std::printf("  check: largest sampled |L·Lᵀ - A| / n = %.3g %s\n", worst,
                  worst < 1e-10 ? "ok" : "WRONG");
      if (worst >= 1e-10) status = 1;
    }
  }
  if (options.baseline) {
    std::vector<double> full(n * n);
    for (std::size_t c = 0; c < n; ++c)
      for (std::size_t r = 0; r < n; ++r) full[c * n + r] = example::entry(r, c, n);
    double with_upload = 0;
    const double alone = example::gpu::potrf_alone(full.data(), n, &with_upload);
    std::printf("  cuSOLVER potrf, GPU 0 %9.3f s  %9.1f GFLOP/s (with the upload: %.3f s, %.1f GFLOP/s)\n",
                alone, gflop / alone, with_upload, gflop / with_upload);
  }
  example::gpu::release();
  return status;
}
