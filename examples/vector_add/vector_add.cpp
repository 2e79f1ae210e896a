// vector_add.cpp — the design documents' vector add, naive versus nerve, on the CPU workers and, when
// the machine has an OpenCL device, on the CPU workers and that device together.
//
// C = A + B over n floats, two (or three) ways:
//   naive: the seed's static split — n elements cut into T equal parts (T = hardware threads), one
//          std::thread per part, join. What run_naive_cuda does with GPUs.
//   nerve: one task per chunk of `chunk` elements over slices of the buffers (read a, read b, write
//          c); dependencies are inferred per slice, so the chunks are independent and run in
//          parallel wherever workers are free.
//   nerve CPU + OpenCL (when an OpenCL device is there, gpu.devices): one Kernel with a CPU body and an
//          OpenCL C implementation; every other chunk runs on the device, the rest on the CPU workers;
//          the runtime copies the device's slices in and its results back.
// Inputs are initialised (and every page first-touched) before timing; each variant runs once to
// warm up, then --repeat times; the median is reported, as GB/s at 12 bytes per element (two loads,
// one store). Both results are checked exactly; a wrong element makes the exit code 1.
//
// Usage: vector_add [--n N] [--chunk C] [--repeat R]   (defaults: 2^26, 2^20, 5; R at most 1000)
// A chunk larger than n is n (one task): no chunk arithmetic can then wrap.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iterator>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "nerve/nerve.hpp"
#include "nerve/opencl.hpp"

#include "arguments.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::size_t n = std::size_t{1} << 26;
  std::size_t chunk = std::size_t{1} << 20;
  int repeat = 5;
};

constexpr unsigned long long max_repeat = 1000;

[[noreturn]] void usage(const char* program, const std::string& problem) {
  if (problem.empty()) {  // --help
    std::printf("usage: %s [--n N] [--chunk C] [--repeat R (at most %llu)]\n", program, max_repeat);
    std::exit(0);
  }
  std::fprintf(stderr, "%s: %s\nusage: %s [--n N] [--chunk C] [--repeat R (at most %llu)]\n", program,
               problem.c_str(), program, max_repeat);
  std::exit(2);
}

Options parse_options(int argc, char** argv) {
  Options options;
  // Each option, its largest value and where its value goes: one list, so a new option cannot be known
  // to one check only.
  struct Known {
    std::string_view name;
    unsigned long long most;
    std::function<void(unsigned long long)> set;
  };
  constexpr auto unbounded = std::numeric_limits<unsigned long long>::max();
  const Known known[] = {{"--n", unbounded, [&](unsigned long long number) { options.n = number; }},
                         {"--chunk", unbounded, [&](unsigned long long number) { options.chunk = number; }},
                         {"--repeat", max_repeat,
                          [&](unsigned long long number) { options.repeat = static_cast<int>(number); }}};
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (nerve_examples::is_help(arg)) usage(argv[0], "");
    const std::string_view name = arg.substr(0, arg.find('='));
    const auto option = std::find_if(std::begin(known), std::end(known),
                                     [&](const Known& entry) { return entry.name == name; });
    if (option == std::end(known)) usage(argv[0], "unknown option " + std::string(name));
    std::string value;
    if (const auto equals = arg.find('='); equals != std::string_view::npos) {
      value = std::string(arg.substr(equals + 1));
      arg = arg.substr(0, equals);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      usage(argv[0], "missing value for " + std::string(arg));
    }
    const auto parsed = nerve_examples::parse_count(value);
    if (!parsed || *parsed == 0)
      usage(argv[0], std::string(arg) + " needs a positive integer, not '" + value + "'");
    if (*parsed > option->most)  // refused, not quietly run with less
      usage(argv[0], std::string(arg) + " is at most " + std::to_string(option->most) + ", not " + value);
    option->set(*parsed);
  }
  // A chunk beyond n is one task of n elements. Capped here, the chunk arithmetic below cannot wrap
  // (n + chunk - 1, the OpenCL variant's rounding up to 1024 floats): n floats fit in memory.
  options.chunk = std::min(options.chunk, options.n);
  return options;
}

float input_a(std::size_t i) { return static_cast<float>(i % 4096) + 1.0f; }
float input_b(std::size_t i) { return static_cast<float>(2 * (i % 1024)) + 0.5f; }

// static_split() runs body(begin, end) on `threads` std::threads over equal parts of [0, n).
template <class Body>
void static_split(std::size_t n, unsigned threads, Body body) {
  std::vector<std::thread> pool;
  const std::size_t part = (n + threads - 1) / threads;
  for (unsigned t = 0; t < threads; ++t) {
    const std::size_t begin = std::min(n, t * part);
    const std::size_t end = std::min(n, begin + part);
    pool.emplace_back([=] { body(begin, end); });
  }
  for (std::thread& thread : pool) thread.join();
}

template <class Run>
double median_seconds(int repeat, Run run) {
  run();  // warm-up
  std::vector<double> seconds;
  for (int r = 0; r < repeat; ++r) {
    const auto start = Clock::now();
    run();
    seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds[seconds.size() / 2];
}

// first_wrong() is the index of the first element of c that is not a[i] + b[i], or n.
std::size_t first_wrong(std::span<const float> c) {
  for (std::size_t i = 0; i < c.size(); ++i) {
    if (c[i] != input_a(i) + input_b(i)) return i;
  }
  return c.size();
}

// fill_in_tasks() initialises a and b and poisons c, one task per chunk, so that each page is first
// touched by a worker (on a NUMA machine: placed on that worker's node).
void fill_in_tasks(nerve::Context& context, const nerve::Buffer<float>& a, const nerve::Buffer<float>& b,
                   const nerve::Buffer<float>& c, std::size_t chunk) {
  for (std::size_t begin = 0; begin < a.size(); begin += chunk) {
    const std::size_t count = std::min(chunk, a.size() - begin);
    context.spawn(
        [begin](std::span<float> sa, std::span<float> sb, std::span<float> sc) {
          for (std::size_t i = 0; i < sa.size(); ++i) {
            sa[i] = input_a(begin + i);
            sb[i] = input_b(begin + i);
            sc[i] = -1.0f;
          }
        },
        nerve::write(a.slice(begin, count)), nerve::write(b.slice(begin, count)),
        nerve::write(c.slice(begin, count)));
  }
  context.wait_all();
}

// add_in_tasks() computes c = a + b with one task per chunk. Each task declares its slices only, so
// the tasks are independent and run in parallel.
void add_in_tasks(nerve::Context& context, const nerve::Buffer<float>& a, const nerve::Buffer<float>& b,
                  const nerve::Buffer<float>& c, std::size_t chunk) {
  for (std::size_t begin = 0; begin < a.size(); begin += chunk) {
    const std::size_t count = std::min(chunk, a.size() - begin);
    context.spawn(
        [](std::span<const float> sa, std::span<const float> sb, std::span<float> sc) {
          for (std::size_t i = 0; i < sc.size(); ++i) sc[i] = sa[i] + sb[i];
        },
        nerve::read(a.slice(begin, count)), nerve::read(b.slice(begin, count)),
        nerve::write(c.slice(begin, count)));
  }
  context.wait_all();
}

constexpr const char* add_source = R"(
  __kernel void add(__global const float* a, __global const float* b, __global float* c) {
    const size_t i = get_global_id(0);
    c[i] = a[i] + b[i];
  })";

// add_kernel(): c = a + b for the CPU workers and for OpenCL devices.
nerve::Kernel add_kernel() {
  nerve::Kernel add("add");
  add.cpu([](const nerve::KernelArgs& args) {
    const auto sa = args.span<const float>(0);
    const auto sb = args.span<const float>(1);
    const auto sc = args.span<float>(2);
    for (std::size_t i = 0; i < sc.size(); ++i) sc[i] = sa[i] + sb[i];
  });
  nerve::opencl::attach(add, add_source, "add");
  return add;
}

// add_on_cpu_and_device() runs every other chunk on device 1 (an OpenCL device), the rest on the CPU
// workers (device 0), then reads c back on the host (the device's chunks are copied back).
void add_on_cpu_and_device(nerve::Context& context, const nerve::Kernel& add, const nerve::Buffer<float>& a,
                           const nerve::Buffer<float>& b, const nerve::Buffer<float>& c, std::size_t chunk) {
  for (std::size_t begin = 0, index = 0; begin < a.size(); begin += chunk, ++index) {
    const std::size_t count = std::min(chunk, a.size() - begin);
    nerve::TaskOptions placement;
    placement.device = static_cast<int>(index % 2);
    context.spawn(placement, add, nerve::read(a.slice(begin, count)), nerve::read(b.slice(begin, count)),
                  nerve::write(c.slice(begin, count)));
  }
  context.wait_all();
  (void)c.map_read();
}

}  // namespace

int run(const Options& options);

int main(int argc, char** argv) {
  const Options options = parse_options(argc, argv);
  try {
    return run(options);
  } catch (const std::exception& error) {  // e.g. --n larger than the memory: std::bad_alloc
    std::fprintf(stderr, "%s: --n %zu: %s\n", argv[0], options.n, error.what());
    return 1;
  }
}

int run(const Options& options) {
  const std::size_t n = options.n;
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  const double gigabytes = 12.0 * static_cast<double>(n) / 1e9;

  // --- naive: plain arrays, first touched by the threads that will use them.
  std::unique_ptr<float[]> a(new float[n]), b(new float[n]), c(new float[n]);
  static_split(n, threads, [&](std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) {
      a[i] = input_a(i);
      b[i] = input_b(i);
      c[i] = -1.0f;
    }
  });
  const double naive = median_seconds(options.repeat, [&] {
    static_split(n, threads, [&](std::size_t begin, std::size_t end) {
      for (std::size_t i = begin; i < end; ++i) c[i] = a[i] + b[i];
    });
  });
  const std::size_t naive_wrong = first_wrong(std::span<const float>(c.get(), n));
  a.reset();
  b.reset();
  c.reset();

  // --- nerve: buffers first touched by the tasks (chunk by chunk, on whichever worker runs them).
  nerve::Context context;
  nerve::Buffer<float> buffer_a(context, n), buffer_b(context, n), buffer_c(context, n);
  fill_in_tasks(context, buffer_a, buffer_b, buffer_c, options.chunk);
  const double tasks = median_seconds(
      options.repeat, [&] { add_in_tasks(context, buffer_a, buffer_b, buffer_c, options.chunk); });
  const std::size_t nerve_wrong = first_wrong(buffer_c.map_read().span());

  std::printf(
      "vector add: n = %zu floats (%.0f MB per array), chunk = %zu, %d runs (median after a warm-up)\n", n,
      4.0 * static_cast<double>(n) / 1e6, options.chunk, options.repeat);
  const std::string naive_label = "naive (" + std::to_string(threads) + " std::threads, static split)";
  const std::string nerve_label = "nerve (" + std::to_string(context.worker_count()) + " workers, " +
                                  std::to_string((n + options.chunk - 1) / options.chunk) + " tasks)";
  std::printf("  %-40s %9.3f ms %8.2f GB/s\n", naive_label.c_str(), naive * 1e3, gigabytes / naive);
  std::printf("  %-40s %9.3f ms %8.2f GB/s\n", nerve_label.c_str(), tasks * 1e3, gigabytes / tasks);
  std::printf("  nerve/naive throughput ratio: %.2f\n", naive / tasks);

  std::size_t mixed_wrong = n;
  if (context.devices().size() > 1) {
    const nerve::Kernel add = add_kernel();
    // OpenCL starts a sub-buffer (a slice on the device) only at aligned offsets (up to 4 KiB on
    // some devices, docs/BACKENDS.md): the device's chunks start at multiples of 1024 floats.
    constexpr std::size_t device_granule = 1024;
    const std::size_t mixed_chunk = (options.chunk + device_granule - 1) / device_granule * device_granule;
    if (mixed_chunk != options.chunk)
      std::printf("  (CPU + OpenCL: chunk rounded up to %zu, a multiple of 4 KiB)\n", mixed_chunk);
    fill_in_tasks(context, buffer_a, buffer_b, buffer_c, mixed_chunk);
    const double mixed = median_seconds(options.repeat, [&] {
      add_on_cpu_and_device(context, add, buffer_a, buffer_b, buffer_c, mixed_chunk);
    });
    mixed_wrong = first_wrong(buffer_c.map_read().span());
    const std::string label = "nerve CPU workers + '" + context.devices()[1].name.substr(0, 18) + "'";
    std::printf("  %-40s %9.3f ms %8.2f GB/s\n", label.c_str(), mixed * 1e3, gigabytes / mixed);
  } else {
    std::printf("  (no OpenCL device: the CPU + OpenCL variant is not run)\n");
  }

  bool ok = true;
  if (naive_wrong != n) {
    std::fprintf(stderr, "naive: c[%zu] is wrong\n", naive_wrong);
    ok = false;
  }
  if (nerve_wrong != n) {
    std::fprintf(stderr, "nerve: c[%zu] is wrong\n", nerve_wrong);
    ok = false;
  }
  if (mixed_wrong != n) {
    std::fprintf(stderr, "nerve CPU + OpenCL: c[%zu] is wrong\n", mixed_wrong);
    ok = false;
  }
  if (!ok) return 1;
  std::printf("  every result verified\n");
  return 0;
}
