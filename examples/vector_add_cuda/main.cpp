// vector_add_cuda — the seed's multi-GPU vector add (seeds/000 §4), naive CUDA versus nerve style.
//
// C = A + B over n floats on every CUDA device of the machine:
//   naive: run_naive_cuda (naive_cuda.cu): the seed's static split, one slab per GPU, its own
//          cudaSetDevice / cudaMalloc / streams / copies / synchronisation.
//   nerve: run_nerve_style (nerve_style.cu): tasks of --chunk elements over buffer slices; nerve places
//          them on the CUDA devices (and the CPU workers with --with-cpu) and moves the data.
// Inputs are initialised before timing; both variants run once to warm up (the nerve one then keeps
// its inputs on the devices, as a program reusing its data would: pass --cold to re-upload them every
// run), then --repeat times; the median is reported, as GB/s at 12 bytes per element. Both results are
// checked exactly; a wrong element makes the exit code 1. Without a CUDA device it prints
// "no CUDA device, skipped" and exits 0.
//
// Usage: vector_add_cuda [--n N] [--chunk C] [--repeat R] [--with-cpu] [--cold]
//                        (defaults: 2^26, 2^22, 5; R at most 1000; a chunk larger than n is n)
// A malformed or zero number is a usage error (exit 2), reported before looking for a device.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "nerve/nerve.hpp"

#include "arguments.hpp"
#include "kernels.hpp"
#include "vector_add_cuda.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::size_t n = std::size_t{1} << 26;
  std::size_t chunk = std::size_t{1} << 22;
  int repeat = 5;
  bool with_cpu = false;
  bool cold = false;
};

constexpr unsigned long long max_repeat = 1000;

[[noreturn]] void usage(const char* program, const std::string& problem) {
  constexpr const char* text =
      "usage: %s [--n N] [--chunk C] [--repeat R (at most %llu)] [--with-cpu] [--cold]\n";
  if (problem.empty()) {  // --help
    std::printf(text, program, max_repeat);
    std::exit(0);
  }
  std::fprintf(stderr, "%s: %s\n", program, problem.c_str());
  std::fprintf(stderr, text, program, max_repeat);
  std::exit(2);
}

// parse_options() checks every number (digits only, no zero, no sign: examples/common/arguments.hpp)
// before main() looks for a CUDA device, so that a machine without one reports a bad command line too.
Options parse_options(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (nerve_examples::is_help(arg)) usage(argv[0], "");
    if (arg == "--with-cpu") {
      options.with_cpu = true;
    } else if (arg == "--cold") {
      options.cold = true;
    } else if (arg == "--n" || arg == "--chunk" || arg == "--repeat") {
      if (i + 1 == argc) usage(argv[0], "missing value for " + arg);
      const std::string value = argv[++i];
      const auto number = nerve_examples::parse_count(value);
      if (!number || *number == 0) usage(argv[0], arg + " needs a positive integer, not '" + value + "'");
      if (arg == "--n") {
        options.n = *number;
      } else if (arg == "--chunk") {
        options.chunk = *number;
      } else if (*number > max_repeat) {
        usage(argv[0], "--repeat is at most " + std::to_string(max_repeat) + ", not " + value);
      } else {
        options.repeat = static_cast<int>(*number);
      }
    } else {
      usage(argv[0], "unknown option " + arg);
    }
  }
  // A chunk beyond n is one task of n elements; capped, the chunk loop's start + chunk cannot wrap.
  options.chunk = std::min(options.chunk, options.n);
  return options;
}

template <class F>
double median_seconds(int repeat, F&& run) {
  std::vector<double> times;
  for (int r = 0; r < repeat; ++r) {
    const auto start = Clock::now();
    run();
    times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

std::size_t count_wrong(const std::vector<float>& a, const std::vector<float>& b,
                        const std::vector<float>& c) {
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < c.size(); ++i) wrong += c[i] != a[i] + b[i] ? 1 : 0;
  return wrong;
}

}  // namespace

int run(const Options& options, int gpus);

int main(int argc, char** argv) {
  const Options options = parse_options(argc, argv);
  const char* why = "";
  const int gpus = example::cuda_device_count(&why);
  if (gpus == 0) {
    std::printf("vector_add_cuda: no CUDA device, skipped (%s)\n", why);
    return 0;
  }
  try {
    return run(options, gpus);
  } catch (const std::exception& error) {  // e.g. --n larger than the memory: std::bad_alloc
    std::fprintf(stderr, "%s: --n %zu: %s\n", argv[0], options.n, error.what());
    return 1;
  }
}

int run(const Options& options, int gpus) {
  const std::size_t n = options.n;
  std::vector<float> a(n), b(n), c(n, 0.0f);
  for (std::size_t i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i % 1000) * 0.5f;
    b[i] = static_cast<float>(i % 777) * 0.25f;
  }
  const double gigabytes = 12.0 * static_cast<double>(n) / 1e9;

  example::run_naive_cuda(n, gpus, a.data(), b.data(), c.data());  // warm-up
  const double naive =
      median_seconds(options.repeat, [&] { example::run_naive_cuda(n, gpus, a.data(), b.data(), c.data()); });
  const std::size_t naive_wrong = count_wrong(a, b, c);

  nerve::Settings settings;
  settings.set("gpu.devices", "cuda");
  nerve::Context context(settings);
  std::size_t nerve_wrong = 0;
  double nerve_time = 0;
  {
    nerve::Buffer<float> da(context, std::span<const float>(a)), db(context, std::span<const float>(b));
    nerve::Buffer<float> dc(context, n);
    const auto run = [&] {
      if (options.cold) {  // new buffers: the inputs travel from the host again
        nerve::Buffer<float> fa(context, std::span<const float>(a)), fb(context, std::span<const float>(b));
        example::run_nerve_style(context, fa, fb, dc, options.chunk, options.with_cpu);
      } else {
        example::run_nerve_style(context, da, db, dc, options.chunk, options.with_cpu);
      }
      // The result back in host memory, as the naive variant has it (in place: to_vector() would
      // also time a copy into a fresh 1 GiB vector).
      (void)dc.map_read();
    };
    run();  // warm-up: pools, streams, and (without --cold) the inputs on the devices
    nerve_time = median_seconds(options.repeat, run);
    nerve_wrong = count_wrong(a, b, dc.to_vector());
  }
  std::printf("vector_add_cuda: n = %zu floats on %d GPU(s), chunk %zu%s%s\n", n, gpus, options.chunk,
              options.with_cpu ? ", CPU workers too" : "", options.cold ? ", cold inputs" : "");
  std::printf("  naive CUDA   %9.3f ms  %8.2f GB/s  %s\n", naive * 1e3, gigabytes / naive,
              naive_wrong == 0 ? "ok" : "WRONG");
  std::printf("  nerve style  %9.3f ms  %8.2f GB/s  %s\n", nerve_time * 1e3, gigabytes / nerve_time,
              nerve_wrong == 0 ? "ok" : "WRONG");
  return naive_wrong == 0 && nerve_wrong == 0 ? 0 : 1;
}
