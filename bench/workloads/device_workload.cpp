#include "device_workload.hpp"

#include <algorithm>
#include <barrier>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <span>
#include <thread>
#include <vector>

#include <sys/mman.h>
#include <unistd.h>

#include <fmt/format.h>

#if NERVE_HAVE_OPENCL
#include "backend/opencl/platform.hpp"
#endif

#include "measure.hpp"
#include "naive_threads.hpp"
#include "runtimes.hpp"

namespace nerve::bench {

std::unique_ptr<nerve::Context> open_device_context(const WorkloadOptions& options, std::string& why) {
  nerve::Settings settings = nerve_settings(options);
  // gpu.devices chosen anywhere (--config's file, the environment, the API) is the run's choice: only
  // left at its default is it made `opencl` here.
  bool chosen = false;
  try {
    chosen = nerve::Config::load(settings).origin("gpu.devices").source != nerve::ConfigSource::default_value;
  } catch (const nerve::ConfigError&) {  // the context below reports it
  }
  if (!chosen) settings.set("gpu.devices", "opencl");
  std::unique_ptr<nerve::Context> context;
  try {
    context = std::make_unique<nerve::Context>(settings);
  } catch (const nerve::ConfigError& error) {
    why = std::string("no OpenCL device: ") + error.what();
    return nullptr;
  }
  if (context->devices().size() < 2) {
    why = "no OpenCL device";
    return nullptr;
  }
  return context;
}

std::string needs_opencl_device(const nerve::Settings& settings) {
  // The same discovery the workloads make, under the run's settings.
  WorkloadOptions options;
  options.threads = 1;
  options.settings = settings;
  options.settings.set("perf.trace", "");  // a look, not a run: the run's first context keeps the trace file
  std::string why;
  return open_device_context(options, why) != nullptr ? std::string() : why;
}

namespace {

constexpr int copy_rounds = 6;  // the first warms the driver's paths and the pages; best of all

double gbps(std::size_t bytes, double ns) { return static_cast<double>(bytes) / ns; }

// best_gbps(): the best rate of `copy()` over copy_rounds rounds.
template <class Copy>
double best_gbps(std::size_t bytes, Copy copy) {
  double best = 0;
  for (int round = 0; round < copy_rounds; ++round) {
    Stopwatch watch;
    copy();
    best = std::max(best, gbps(bytes, watch.elapsed_ns()));
  }
  return best;
}

CopyRate host_memcpy_rate(std::size_t bytes, bool huge_pages, const std::string& why) {
  HostArrays host(2, (bytes + sizeof(float) - 1) / sizeof(float), huge_pages);
  std::memset(host[0], 1, bytes);
  std::memset(host[1], 0, bytes);
  const double rate = best_gbps(bytes, [&] { std::memcpy(host[1], host[0], bytes); });
  return {rate, rate,
          fmt::format("host memcpy of {} MiB, best of {} ({}: no device copy measured)", bytes >> 20,
                      copy_rounds, why),
          false};
}

#if NERVE_HAVE_OPENCL
// OpenclCopy measures blocking copies between host memory and one OpenCL device, on the cl_context
// nerve's backend uses for it (one per platform, shared by every nerve context).
class OpenclCopy {
 public:
  OpenclCopy(const detail::opencl::PlatformDevice& device, std::size_t bytes) : bytes_(bytes) {
    try {
      open(device);
    } catch (...) {  // what was made before the failure goes: the destructor will not run
      close();
      throw;
    }
  }
  ~OpenclCopy() { close(); }
  OpenclCopy(const OpenclCopy&) = delete;
  OpenclCopy& operator=(const OpenclCopy&) = delete;

  double to_device(const void* host) {
    return best_gbps(bytes_, [&] {
      detail::opencl::check(
          clEnqueueWriteBuffer(queue_, device_, CL_TRUE, 0, bytes_, host, 0, nullptr, nullptr),
          "clEnqueueWriteBuffer");
    });
  }
  double from_device(void* host) {
    return best_gbps(bytes_, [&] {
      detail::opencl::check(
          clEnqueueReadBuffer(queue_, device_, CL_TRUE, 0, bytes_, host, 0, nullptr, nullptr),
          "clEnqueueReadBuffer");
    });
  }
  void* pinned_host() const noexcept { return pinned_host_; }

 private:
  void open(const detail::opencl::PlatformDevice& device) {
    using detail::opencl::check;
    cl_context context = detail::opencl::Platforms::instance().context(device);
    cl_int status = CL_SUCCESS;
    queue_ = clCreateCommandQueue(context, device.device, 0, &status);
    check(status, "clCreateCommandQueue");
    device_ = clCreateBuffer(context, CL_MEM_READ_WRITE, bytes_, nullptr, &status);
    check(status, "clCreateBuffer (device)");
    // Pinned host memory the OpenCL way (what nerve's staging pool uses): a host-allocated buffer, mapped.
    pinned_ = clCreateBuffer(context, CL_MEM_READ_WRITE | CL_MEM_ALLOC_HOST_PTR, bytes_, nullptr, &status);
    check(status, "clCreateBuffer (pinned host memory)");
    pinned_host_ = clEnqueueMapBuffer(queue_, pinned_, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, bytes_, 0,
                                      nullptr, nullptr, &status);
    check(status, "clEnqueueMapBuffer (pinned host memory)");
    std::memset(pinned_host_, 1, bytes_);
  }
  void close() noexcept {
    if (pinned_host_ != nullptr) clEnqueueUnmapMemObject(queue_, pinned_, pinned_host_, 0, nullptr, nullptr);
    if (queue_ != nullptr) clFinish(queue_);
    if (pinned_ != nullptr) clReleaseMemObject(pinned_);
    if (device_ != nullptr) clReleaseMemObject(device_);
    if (queue_ != nullptr) clReleaseCommandQueue(queue_);
    pinned_host_ = nullptr;
    pinned_ = device_ = nullptr;
    queue_ = nullptr;
  }

  std::size_t bytes_;
  cl_command_queue queue_ = nullptr;
  cl_mem device_ = nullptr;
  cl_mem pinned_ = nullptr;
  void* pinned_host_ = nullptr;
};

const detail::opencl::PlatformDevice* opencl_device_of(const nerve::DeviceInfo& info) {
  for (const detail::opencl::PlatformDevice& device : detail::opencl::Platforms::instance().devices()) {
    if (device.name == info.name && (info.pci_bus_id.empty() || device.pci_bus_id == info.pci_bus_id))
      return &device;
  }
  return nullptr;
}
#endif

}  // namespace

CopyRate device_copy_rate(nerve::Context& context, int device, std::size_t bytes) {
  const bool huge_pages = huge_pages_like_nerve(context);
  // A copy: devices() returns a fresh vector.
  const nerve::DeviceInfo info = context.devices().at(static_cast<std::size_t>(device));
  if (info.kind != nerve::DeviceKind::opencl)
    return host_memcpy_rate(bytes, huge_pages, fmt::format("'{}' is not an OpenCL device", info.name));
#if NERVE_HAVE_OPENCL
  const detail::opencl::PlatformDevice* found = opencl_device_of(info);
  if (found == nullptr)
    return host_memcpy_rate(bytes, huge_pages,
                            fmt::format("'{}' not among the OpenCL platforms' devices", info.name));
  try {
    OpenclCopy copy(*found, bytes);
    // Pageable host memory like nerve's buffers (same page treatment), and pinned memory; the best
    // of the two is what the device's copies can give.
    HostArrays host(2, (bytes + sizeof(float) - 1) / sizeof(float), huge_pages);
    std::memset(host[0], 1, bytes);
    std::memset(host[1], 0, bytes);
    CopyRate rate;
    rate.to_device_gbps = std::max(copy.to_device(host[0]), copy.to_device(copy.pinned_host()));
    rate.from_device_gbps = std::max(copy.from_device(host[1]), copy.from_device(copy.pinned_host()));
    rate.how = fmt::format(
        "blocking clEnqueueWriteBuffer / clEnqueueReadBuffer of {} MiB on '{}', best of {} "
        "from pageable and pinned host memory",
        bytes >> 20, info.name, copy_rounds);
    rate.device = true;
    return rate;
  } catch (const std::exception& error) {
    return host_memcpy_rate(bytes, huge_pages, fmt::format("the OpenCL copy failed: {}", error.what()));
  }
#else
  return host_memcpy_rate(bytes, huge_pages, "built without OpenCL");
#endif
}

std::string w5_first_wrong(const float* c, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const float expected = w5_input_a(i) + w5_input_b(i);
    if (c[i] != expected) {
      return "C[" + std::to_string(i) + "] = " + std::to_string(c[i]) + ", expected " +
             std::to_string(expected);
    }
  }
  return {};
}

void spawn_w5_inputs(nerve::Context& context, const nerve::Buffer<float>& a, const nerve::Buffer<float>& b,
                     const nerve::Buffer<float>& c, std::size_t first) {
  context.spawn(
      [first](std::span<float> sa, std::span<float> sb, std::span<float> sc) {
        for (std::size_t i = 0; i < sa.size(); ++i) {
          sa[i] = w5_input_a(first + i);
          sb[i] = w5_input_b(first + i);
          sc[i] = w5_poison;
        }
      },
      nerve::write(a), nerve::write(b), nerve::write(c));
}

W5Arrays::W5Arrays(std::size_t n, unsigned threads, bool huge_pages)
    : n_(n), threads_(threads), memory_(3, n, huge_pages) {
  static_split(n_, threads_, [this](std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) {
      a()[i] = w5_input_a(i);
      b()[i] = w5_input_b(i);
      c()[i] = w5_poison;
    }
  });
}

void W5Arrays::poison_c() const {
  static_split(n_, threads_,
               [this](std::size_t begin, std::size_t end) { std::fill(c() + begin, c() + end, w5_poison); });
}

void W5Arrays::add(std::size_t begin, std::size_t end) const {
  float* __restrict out = c();
  const float* __restrict x = a();
  const float* __restrict y = b();
  for (std::size_t i = begin; i < end; ++i) out[i] = x[i] + y[i];
}

Trial W5Arrays::stream_add() const {
  return trial(stream_add_best_ns(a(), b(), c(), n_, threads_, stream_times));
}

HostArrays::HostArrays(std::size_t count, std::size_t n, bool huge_pages) {
  const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  // The region starts on a 2 MiB boundary (an x86-64 huge page; harmless elsewhere), so that the
  // arrays' huge-page coverage does not depend on where mmap put it.
  constexpr std::size_t huge = std::size_t{2} << 20;
  const std::size_t bytes = (n * sizeof(float) + page - 1) / page * page;
  std::size_t padding = 0;
  for (std::size_t k = 0; k < count; ++k) padding += (k + 1) * page;
  region_bytes_ = count * bytes + padding + huge;
  region_ = mmap(nullptr, region_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (region_ == MAP_FAILED) {
    region_ = nullptr;
    throw std::bad_alloc();
  }
  // Before the first touch, as the host pool advises its blocks, so that the first faults map huge pages.
  if (huge_pages) huge_ = madvise(region_, region_bytes_, MADV_HUGEPAGE) == 0;
  const auto start = reinterpret_cast<std::uintptr_t>(region_);
  std::uintptr_t next = (start + huge - 1) & ~(huge - 1);
  for (std::size_t k = 0; k < count; ++k) {
    next += (k + 1) * page;  // array k starts k + 1 pages after the previous one ends: staggered
    arrays_.push_back(reinterpret_cast<float*>(next));
    next += bytes;
  }
}

HostArrays::~HostArrays() {
  if (region_ != nullptr) munmap(region_, region_bytes_);
}

bool huge_pages_like_nerve(const nerve::Context& context) {
  for (const nerve::MemoryPoolStats& pool : context.stats().memory.host_pools) {
    if (pool.huge_page_bytes > 0) return true;
  }
  return false;
}

double stream_add_best_ns(const float* a, const float* b, float* c, std::size_t n, unsigned threads,
                          int times) {
  threads = std::max(1u, threads);
  double best = std::numeric_limits<double>::infinity();
  Stopwatch watch;
#if NERVE_HAVE_OPENMP
  const long count = static_cast<long>(n);
  float* __restrict cc = c;
  const float* __restrict aa = a;
  const float* __restrict bb = b;
#pragma omp parallel num_threads(threads)
  {
    for (int run = 0; run < times; ++run) {
      // Every thread of the team is up before the clock starts: a run times the loop, not the wake-up.
#pragma omp barrier
#pragma omp master
      watch.restart();
#pragma omp barrier
#pragma omp for schedule(static)
      for (long j = 0; j < count; ++j) cc[j] = aa[j] + bb[j];
        // The loop's closing barrier has passed: every part is done.
#pragma omp master
      best = std::min(best, watch.elapsed_ns());
    }
  }
#else
  // stream.c's static schedule on T threads started once, with the same barriers around each run.
  std::barrier sync(static_cast<std::ptrdiff_t>(threads));
  const std::size_t part = (n + threads - 1) / threads;
  auto body = [&](unsigned t) {
    const std::size_t begin = std::min(n, t * part);
    const std::size_t end = std::min(n, begin + part);
    for (int run = 0; run < times; ++run) {
      sync.arrive_and_wait();
      if (t == 0) watch.restart();
      sync.arrive_and_wait();
      for (std::size_t j = begin; j < end; ++j) c[j] = a[j] + b[j];
      sync.arrive_and_wait();
      if (t == 0) best = std::min(best, watch.elapsed_ns());
    }
  };
  std::vector<std::thread> team;
  for (unsigned t = 1; t < threads; ++t) team.emplace_back(body, t);
  body(0);
  for (std::thread& thread : team) thread.join();
#endif
  return best;
}

std::string stream_size_rule(const nerve::Context& context, std::size_t bytes) {
  std::uint64_t largest = 0;
  for (const nerve::Cache& cache : context.topology().caches()) largest = std::max(largest, cache.size_bytes);
  if (largest == 0)
    return fmt::format("arrays of {} MiB; the cache size is unknown, STREAM's size rule unchecked",
                       bytes >> 20);
  if (bytes >= 4 * largest) return {};
  return fmt::format(
      "arrays of {} MiB: below STREAM's size rule (each array >= 4 x the {} MiB last-level cache = {} MiB), "
      "partly served from the cache, so the % of STREAM add is not a memory-bandwidth figure",
      bytes >> 20, largest >> 20, (4 * largest) >> 20);
}

void note_share_of_stream(std::vector<Measurement>& measurements, const std::string& reference,
                          const std::string& label, const std::string& size_rule) {
  const auto found = std::find_if(measurements.begin(), measurements.end(),
                                  [&](const Measurement& m) { return m.variant == reference; });
  if (found == measurements.end() || !found->verified) return;
  const double best =
      found->samples.empty() ? 0 : *std::max_element(found->samples.begin(), found->samples.end());
  found->note = fmt::format(
      "reference: this median, {:.1f} GB/s (each sample the best of {} runs of the loop, as stream.c; "
      "best sample {:.1f} GB/s)",
      found->value, stream_times, best);
  if (!size_rule.empty()) found->note += "; " + size_rule;
  note_share_of(measurements, reference, label);
}

}  // namespace nerve::bench
