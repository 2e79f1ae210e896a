// w6_heterogeneous.cpp — W6's device cases, one variant per scheduler policy (eager,
// locality_aware_stealing, heft), each in a context with the CPU workers and the OpenCL device:
//   tiled Cholesky   the W6 tile graph over Kernels with two implementations each: the BLAS tile
//                    calls (CPU workers) and plain OpenCL C (the device); the policy places them
//   mixed graph      an unbalanced mix of independent calls of two kernels that prefer different
//                    devices: a BLAS GEMM tile (much faster on the CPU workers than naive OpenCL C)
//                    and an element-wise transcendental map (the OpenCL device runs it on every core,
//                    vectorised; the CPU body is one scalar loop)
// Figures: GFLOP/s (Cholesky, n³/3) or calls per second (mixed graph), with bytes moved and the calls
// the device ran as secondary figures. heft's tasks carry HEFT's upward rank as priority (Cholesky) and
// its models learn during a calibration run before the first sample (not timed). Every sample is
// verified after the timed part: the Cholesky factor by the random probe, and on each variant's first
// sample by the full residual ‖A − LLᵀ‖/‖A‖ of the case's own matrix (n = 1024; 512 quick); the mixed
// graph's every output element against values computed on the host (each GEMM call has its own random
// inputs, each wave call its own rotation of the input). --inject-fault corrupts one element of a
// result after the timed part, and these same checks must catch it.
// run_w6_cholesky() appends these when an OpenCL device is there.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "nerve/nerve.hpp"
#include "nerve/opencl.hpp"

#include "blas_support.hpp"
#include "device_workload.hpp"
#include "measure.hpp"
#include "opencl_cholesky_tiles.hpp"
#include "runtimes.hpp"
#include "tile_kernels.hpp"
#include "workload.hpp"

namespace nerve::bench {
namespace {

// The tile operations in OpenCL C (examples/common/opencl_cholesky_tiles.hpp, shared with
// tests/backend/cholesky_test.cpp), plus the mixed graph's elementwise map.
const std::string tile_source = std::string(nerve::examples::opencl_cholesky_tiles) + R"(
  __kernel void wave(__global const float* x, __global float* y) {
    const size_t i = get_global_id(0);
    float v = x[i];
    for (int r = 0; r < 16; ++r) v = sin(v) * exp(-v * v) + 0.5f;
    y[i] = v;
  })";

float wave_of(float v) {
  for (int r = 0; r < 16; ++r) v = std::sin(v) * std::exp(-v * v) + 0.5f;
  return v;
}

nerve::opencl::Options sized(std::function<std::size_t(const nerve::KernelArgs&)> global_size) {
  nerve::opencl::Options options;
  options.global_size = std::move(global_size);
  return options;
}

struct TileKernels {
  nerve::Kernel potrf{"w6.potrf"}, trsm{"w6.trsm"}, syrk{"w6.syrk"}, gemm{"w6.gemm"}, wave{"w6.wave"};
  explicit TileKernels(std::size_t nb) {
    const auto elements = [nb](const nerve::KernelArgs&) { return nb * nb; };
    potrf.cpu(
        [](const nerve::KernelArgs& args) { tile::potrf(args.value<int>(0), args.span<double>(0).data()); });
    trsm.cpu([](const nerve::KernelArgs& args) {
      tile::trsm(args.value<int>(0), args.span<const double>(0).data(), args.span<double>(1).data());
    });
    syrk.cpu([](const nerve::KernelArgs& args) {
      tile::syrk(args.value<int>(0), args.span<const double>(0).data(), args.span<double>(1).data());
    });
    gemm.cpu([](const nerve::KernelArgs& args) {
      tile::gemm_nt(args.value<int>(0), args.span<const double>(0).data(), args.span<const double>(1).data(),
                    args.span<double>(2).data());
    });
    wave.cpu([](const nerve::KernelArgs& args) {
      const auto x = args.span<const float>(0);
      const auto y = args.span<float>(1);
      for (std::size_t i = 0; i < x.size(); ++i) y[i] = wave_of(x[i]);
    });
    nerve::opencl::attach(potrf, tile_source, "potrf",
                          sized([](const nerve::KernelArgs&) { return std::size_t{1}; }));
    nerve::opencl::attach(trsm, tile_source, "trsm", sized([nb](const nerve::KernelArgs&) { return nb; }));
    nerve::opencl::attach(syrk, tile_source, "syrk", sized(elements));
    nerve::opencl::attach(gemm, tile_source, "gemm", sized(elements));
    nerve::opencl::attach(wave, tile_source, "wave");
  }
};

constexpr nerve::SchedulerPolicy all_policies[] = {nerve::SchedulerPolicy::eager,
                                                   nerve::SchedulerPolicy::locality_aware_stealing,
                                                   nerve::SchedulerPolicy::heft};

// One policy's context (CPU workers + the OpenCL device) and its data.
struct DeviceRun {
  std::unique_ptr<nerve::Context> context;
  bool heft = false;
  bool calibrated = false;
  bool residual_checked = false;  // the full residual ran (on the first sample)
  std::uint64_t bytes_before = 0, device_tasks_before = 0;

  void begin() {
    const nerve::ContextStats stats = context->stats();
    bytes_before = stats.bytes_transferred;
    device_tasks_before = stats.devices.at(1).tasks;
  }
  std::vector<std::pair<std::string, double>> end() const {
    const nerve::ContextStats stats = context->stats();
    return {{"bytes moved", static_cast<double>(stats.bytes_transferred - bytes_before)},
            {"calls on device", static_cast<double>(stats.devices.at(1).tasks - device_tasks_before)}};
  }
};

std::unique_ptr<DeviceRun> open_run(const WorkloadOptions& options, nerve::SchedulerPolicy policy) {
  WorkloadOptions with_policy = options;
  with_policy.settings.set("scheduler.policy", policy_name(policy));
  std::string why;
  auto run = std::make_unique<DeviceRun>();
  run->context = open_device_context(with_policy, why);
  if (run->context == nullptr) return nullptr;
  run->heft = policy == nerve::SchedulerPolicy::heft;
  return run;
}

int rank(bool ranked, std::size_t nt, std::size_t k, std::size_t m = 0, std::size_t n = 0) {
  return ranked ? static_cast<int>(4 * nt - 2 * k - m - n) + 1 : nerve::Priority::normal;
}

void factor(nerve::Context& context, const TileKernels& kernels, const TileLayout& layout,
            const nerve::Buffer<double>& matrix, bool ranked) {
  const int nb = static_cast<int>(layout.nb);
  const std::size_t nt = layout.nt;
  auto tile = [&](std::size_t i, std::size_t j) {
    return matrix.slice(layout.offset(i, j), layout.tile_elements());
  };
  auto options = [](const char* name, int priority) {
    nerve::TaskOptions task = named(name);
    task.priority = priority;
    return task;
  };
  for (std::size_t k = 0; k < nt; ++k) {
    context.spawn(options("POTRF", rank(ranked, nt, k)), kernels.potrf, nerve::read_write(tile(k, k)),
                  nerve::value(nb));
    for (std::size_t i = k + 1; i < nt; ++i)
      context.spawn(options("TRSM", rank(ranked, nt, k, i)), kernels.trsm, nerve::read(tile(k, k)),
                    nerve::read_write(tile(i, k)), nerve::value(nb));
    for (std::size_t i = k + 1; i < nt; ++i) {
      context.spawn(options("SYRK", rank(ranked, nt, k, i, i)), kernels.syrk, nerve::read(tile(i, k)),
                    nerve::read_write(tile(i, i)), nerve::value(nb));
      for (std::size_t j = k + 1; j < i; ++j)
        context.spawn(options("GEMM", rank(ranked, nt, k, i, j)), kernels.gemm, nerve::read(tile(i, k)),
                      nerve::read(tile(j, k)), nerve::read_write(tile(i, j)), nerve::value(nb));
    }
  }
  context.wait_all();
}

std::string describe_error(const char* what, double error) {
  if (error < 1e-12) return {};
  char text[128];
  std::snprintf(text, sizeof text, "%s %.3g exceeds 1e-12", what, error);
  return text;
}

double gflops(std::size_t n, double ns) { return static_cast<double>(n) * n * n / 3.0 / ns; }

void add_cholesky(std::vector<Measurement>& out, const WorkloadOptions& options, std::size_t n,
                  std::size_t nb) {
  const TileLayout layout(n, nb);
  const std::vector<double> input = spd_matrix(n, 6);
  std::vector<double> input_tiles(n * n), work(n * n);
  to_tiles(layout, input, input_tiles);
  const TileKernels kernels(nb);
  const std::string name = "n=" + std::to_string(n) + " nb=" + std::to_string(nb) + ", CPU workers + OpenCL";
  std::vector<std::unique_ptr<DeviceRun>> runs;
  std::vector<std::unique_ptr<nerve::Buffer<double>>> matrices;
  std::vector<Variant> variants;
  const std::uint64_t t = n / nb;  // tiles a side: t POTRF, t(t-1)/2 TRSM and SYRK, t(t-1)(t-2)/6 GEMM
  const std::uint64_t tasks = t + t * (t - 1) + t * (t - 1) * (t - 2) / 6;
  for (const nerve::SchedulerPolicy policy : all_policies) {
    auto run = open_run(options, policy);
    if (run == nullptr) return;
    matrices.push_back(std::make_unique<nerve::Buffer<double>>(*run->context, n * n));
    // Pointers, not references, into the lambdas: the loop's locals end with each iteration.
    DeviceRun* const device = run.get();
    nerve::Buffer<double>* const matrix = matrices.back().get();
    runs.push_back(std::move(run));
    auto reset = [matrix, &input_tiles] {
      auto mapped = matrix->map_write();
      std::copy(input_tiles.begin(), input_tiles.end(), mapped.begin());
    };
    variants.push_back({name,
                        "nerve",
                        std::string("nerve tile kernels (") + policy_name(policy) + ")",
                        "GFLOP/s",
                        false,
                        tasks,
                        reset,
                        [&, device, matrix, reset]() -> Trial {
                          if (device->heft && !std::exchange(device->calibrated, true)) {
                            // heft's models learn here (each tile kernel ≥ 10 calls on each device), untimed.
                            for (int i = 0; i < 3; ++i) {
                              factor(*device->context, kernels, layout, *matrix, true);
                              reset();
                            }
                          }
                          device->begin();
                          Stopwatch watch;
                          try {
                            factor(*device->context, kernels, layout, *matrix, device->heft);
                          } catch (const std::exception& error) {
                            return {0, error.what()};
                          }
                          const double ns = watch.elapsed_ns();
                          auto extra = device->end();
                          {
                            auto mapped = matrix->map_read();
                            from_tiles(layout, mapped.span(), work);
                          }
                          // One lower-triangle element off (row n/2 + 1, column n/2): both checks see it.
                          if (options.inject_fault) work[n * (n / 2) + n / 2 + 1] += 1e-3;
                          std::string failure;
                          if (!std::exchange(device->residual_checked, true))
                            failure = describe_error("residual", cholesky_residual(n, input, work));
                          if (failure.empty())
                            failure = describe_error("probe error", cholesky_probe_error(n, input, work));
                          return {gflops(n, ns), failure, extra};
                        },
                        {}});
  }
  auto measured = measure_interleaved(variants, options);
  out.insert(out.end(), measured.begin(), measured.end());
}

void add_mixed_graph(std::vector<Measurement>& out, const WorkloadOptions& options, std::size_t nb,
                     std::size_t calls) {
  const TileKernels kernels(nb);
  const std::size_t wave_elements = std::size_t{1} << 16;
  std::vector<float> wave_input(wave_elements), wave_expected(wave_elements);
  for (std::size_t i = 0; i < wave_elements; ++i) {
    wave_input[i] = static_cast<float>(i % 1000) / 1000.0f;
    wave_expected[i] = wave_of(wave_input[i]);
  }
  // Call i's wave input is the pattern rotated by `shift(i)` elements, so that a result written to
  // another call's output (or shifted within one) does not match; the expected values rotate alike.
  const auto shift = [](std::size_t call) { return call * 997 % wave_elements; };  // a constant
  // Call i's GEMM multiplies its own random tiles (entries in (-0.5, 0.5)); the expected
  // c = -a bᵀ is computed here on the host with the BLAS tile kernel.
  const std::size_t tile_elements = nb * nb;
  std::vector<std::vector<double>> gemm_a(calls), gemm_b(calls), gemm_expected(calls);
  for (std::size_t i = 0; i < calls; ++i) {
    gemm_a[i].resize(tile_elements);
    gemm_b[i].resize(tile_elements);
    for (std::size_t e = 0; e < tile_elements; ++e) {
      gemm_a[i][e] = uniform(400 + 2 * i, e) - 0.5;
      gemm_b[i][e] = uniform(401 + 2 * i, e) - 0.5;
    }
    gemm_expected[i].assign(tile_elements, 0.0);
    tile::gemm_nt(static_cast<int>(nb), gemm_a[i].data(), gemm_b[i].data(), gemm_expected[i].data());
  }
  const std::string name = "mixed graph: " + std::to_string(calls) + " GEMM nb=" + std::to_string(nb) +
                           " + " + std::to_string(calls) + " wave 2^16, CPU workers + OpenCL";
  struct Data {
    std::vector<nerve::Buffer<double>> a, b, c;
    std::vector<nerve::Buffer<float>> x, y;
  };
  std::vector<std::unique_ptr<DeviceRun>> runs;
  std::vector<std::unique_ptr<Data>> data;
  std::vector<Variant> variants;
  for (const nerve::SchedulerPolicy policy : all_policies) {
    auto run = open_run(options, policy);
    if (run == nullptr) return;
    data.push_back(std::make_unique<Data>());
    Data* const d = data.back().get();
    std::vector<float> rotated(wave_elements);
    for (std::size_t i = 0; i < calls; ++i) {
      d->a.emplace_back(*run->context, gemm_a[i]);
      d->b.emplace_back(*run->context, gemm_b[i]);
      d->c.emplace_back(*run->context, tile_elements);
      std::rotate_copy(wave_input.begin(), wave_input.begin() + static_cast<std::ptrdiff_t>(shift(i)),
                       wave_input.end(), rotated.begin());
      d->x.emplace_back(*run->context, rotated);
      d->y.emplace_back(*run->context, wave_elements);
    }
    DeviceRun* const device = run.get();
    runs.push_back(std::move(run));
    // c starts at 0 (the GEMM accumulates into it); y is poisoned, so an output never written fails.
    auto reset = [d] {
      for (auto& c : d->c) {
        auto mapped = c.map_write();
        std::fill(mapped.begin(), mapped.end(), 0.0);
      }
      for (auto& y : d->y) {
        auto mapped = y.map_write();
        std::fill(mapped.begin(), mapped.end(), NAN);
      }
    };
    auto graph = [d, device, &kernels, calls, nb] {
      for (std::size_t i = 0; i < calls; ++i) {
        device->context->spawn(kernels.gemm, nerve::read(d->a[i]), nerve::read(d->b[i]),
                               nerve::read_write(d->c[i]), nerve::value(static_cast<int>(nb)));
        device->context->spawn(kernels.wave, nerve::read(d->x[i]), nerve::write(d->y[i]));
      }
      device->context->wait_all();
    };
    // check(): every element of every call's outputs, after the timed part.
    auto check = [&, d, calls]() -> std::string {
      for (std::size_t i = 0; i < calls; ++i) {
        const auto c = d->c[i].map_read();
        for (std::size_t e = 0; e < tile_elements; ++e) {
          // NaN-safe: a NaN fails the comparison and is reported.
          if (!(std::abs(c[e] - gemm_expected[i][e]) <= 1e-12)) {
            return "GEMM call " + std::to_string(i) + ": element " + std::to_string(e) + " is " +
                   std::to_string(c[e]) + ", expected " + std::to_string(gemm_expected[i][e]);
          }
        }
        const auto y = d->y[i].map_read();
        for (std::size_t e = 0; e < wave_elements; ++e) {
          const float expected = wave_expected[(e + shift(i)) % wave_elements];
          if (!(std::abs(y[e] - expected) <= 1e-4f)) {
            return "wave call " + std::to_string(i) + ": element " + std::to_string(e) + " is " +
                   std::to_string(y[e]) + ", expected " + std::to_string(expected);
          }
        }
      }
      return {};
    };
    variants.push_back({name,
                        "nerve",
                        std::string("nerve mixed graph (") + policy_name(policy) + ")",
                        "calls/s",
                        false,
                        2 * calls,
                        reset,
                        [&, d, device, graph, reset, check]() -> Trial {
                          if (device->heft && !std::exchange(device->calibrated, true)) {
                            for (int i = 0; i < 3; ++i) {  // heft's models learn (untimed)
                              graph();
                              reset();
                            }
                          }
                          device->begin();
                          Stopwatch watch;
                          graph();
                          const double seconds = watch.elapsed_ns() / 1e9;
                          auto extra = device->end();
                          if (options.inject_fault) {  // one element of the last GEMM's result
                            auto c = d->c[calls - 1].map_read_write();
                            c[tile_elements / 2] += 1e-3;
                          }
                          return {static_cast<double>(2 * calls) / seconds, check(), extra};
                        },
                        {}});
  }
  auto measured = measure_interleaved(variants, options);
  out.insert(out.end(), measured.begin(), measured.end());
}

}  // namespace

std::vector<Measurement> run_w6_devices(const WorkloadOptions& options) {
  std::vector<Measurement> out;
  if (!needs_opencl_device(options.settings).empty()) return out;
  BlasThreads single(1);
  add_cholesky(out, options, options.quick ? 512 : 1024, 128);
  add_mixed_graph(out, options, 128, options.quick ? 8 : 16);
  return out;
}

}  // namespace nerve::bench
