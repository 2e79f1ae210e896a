// cholesky_cuda — a heterogeneous tiled Cholesky factorisation: every tile kernel has a CPU
// implementation (OpenBLAS/LAPACK, examples/cholesky_mpi/tiles.hpp) and a CUDA one (cuSOLVER potrf,
// cuBLAS trsm/syrk/gemm, cuda_tiles.hpp); nerve places each task on the CPU workers or a GPU and moves
// the tiles. The matrix is the distributed example's (symmetric positive definite by construction).
//
//   cholesky_cuda [--n N] [--tile B] [--gpu-only] [--baseline] [--check]   (defaults 8192, 1024)
//
// Prints the factorisation's time and GFLOP/s (n^3/3 flops), from tiles in host memory to the factor
// back in host memory; --baseline adds cuSOLVER potrf of the whole matrix on GPU 0 alone (compute
// only, and with the upload); --check compares sampled entries of L·Lᵀ with A. --gpu-only gives the
// kernels no CPU implementation. Without a CUDA device: "no CUDA device, skipped", exit 0.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "nerve/cuda.hpp"
#include "nerve/nerve.hpp"

#include "../cholesky_mpi/tiles.hpp"
#include "cuda_tiles.hpp"

namespace {

struct Options {
  std::size_t n = 8192;
  std::size_t tile = 1024;
  bool gpu_only = false;
  bool baseline = false;
  bool check = false;
};

Options parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--n" && i + 1 < argc) {
      options.n = std::stoull(argv[++i]);
    } else if (arg == "--tile" && i + 1 < argc) {
      options.tile = std::stoull(argv[++i]);
    } else if (arg == "--gpu-only") {
      options.gpu_only = true;
    } else if (arg == "--baseline") {
      options.baseline = true;
    } else if (arg == "--check") {
      options.check = true;
    } else {
      std::fprintf(stderr, "usage: cholesky_cuda [--n N] [--tile B] [--gpu-only] [--baseline] [--check]\n");
      std::exit(2);
    }
  }
  if (options.tile == 0 || options.n % options.tile != 0) {
    std::fprintf(stderr, "cholesky_cuda: --n must be a multiple of --tile\n");
    std::exit(2);
  }
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

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse(argc, argv);
  const char* why = "";
  const int gpus = example::gpu::device_count(&why);
  if (gpus == 0) {
    std::printf("cholesky_cuda: no CUDA device, skipped (%s)\n", why);
    return 0;
  }
  const std::size_t n = options.n, b = options.tile, nt = n / b;
  const int bi = static_cast<int>(b);
  const double gflop = static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / 3.0 / 1e9;
  int status = 0;
  {
    nerve::Settings settings;
    settings.set("gpu.devices", "cuda");
    nerve::Context context(settings);
    const Kernels kernels(bi, !options.gpu_only);
    // Lower-triangle tiles, column-major, each its own buffer (tile (i, j) at i * nt + j).
    std::vector<nerve::Buffer<double>> tiles(nt * nt);
    std::vector<double> scratch(b * b);
    for (std::size_t j = 0; j < nt; ++j) {
      for (std::size_t i = j; i < nt; ++i) {
        example::fill_tile(scratch, i, j, b, n);
        tiles[i * nt + j] = nerve::Buffer<double>(context, std::span<const double>(scratch));
      }
    }
    const auto start = std::chrono::steady_clock::now();
    for (std::size_t k = 0; k < nt; ++k) {
      auto& kk = tiles[k * nt + k];
      context.spawn(kernels.potrf, nerve::read_write(kk));
      for (std::size_t i = k + 1; i < nt; ++i)
        context.spawn(kernels.trsm, nerve::read_write(tiles[i * nt + k]), nerve::read(kk));
      for (std::size_t i = k + 1; i < nt; ++i) {
        context.spawn(kernels.syrk, nerve::read_write(tiles[i * nt + i]), nerve::read(tiles[i * nt + k]));
        for (std::size_t j = k + 1; j < i; ++j) {
          context.spawn(kernels.gemm, nerve::read_write(tiles[i * nt + j]), nerve::read(tiles[i * nt + k]),
                        nerve::read(tiles[j * nt + k]));
        }
      }
    }
    context.wait_all();
    // The factor back in host memory: part of the time, as it is for a program that uses it there.
    std::vector<std::vector<double>> factor(nt * nt);
    for (std::size_t j = 0; j < nt; ++j)
      for (std::size_t i = j; i < nt; ++i) factor[i * nt + j] = tiles[i * nt + j].to_vector();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const int failed = example::gpu::failures();
    std::printf("cholesky_cuda: n = %zu, tile %zu, %d GPU(s)%s\n", n, b, gpus,
                options.gpu_only ? " only" : " + CPU workers");
    std::printf("  nerve heterogeneous   %9.3f s  %9.1f GFLOP/s%s\n", seconds, gflop / seconds,
                failed != 0 ? "  (a tile was not positive definite)" : "");
    if (failed != 0) status = 1;
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
        worst = std::max(worst, std::abs(sum - example::entry(row, col, n)) / static_cast<double>(n));
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
