// sim_plugin.cpp — a backend plugin for tests: simulated devices with separate (host) memory, an
// asynchronous copy-and-run thread each, running Kernels' CPU bodies. Built three times:
//   libnerve-backend-sim.so       the working plugin (two devices, "sim0" and "sim1")
//   libnerve-backend-oldabi.so    NERVE_SIM_ABI_VERSION set to another ABI version
//   libnerve-backend-nosymbol.so  NERVE_SIM_NO_ENTRY: no nerve_backend_entry symbol
// It uses nothing of libnerve but the plugin ABI's headers (backend_plugin.hpp).
//
// The environment variable SIM_PLUGIN_FAIL, read at each call (the library is loaded once per
// process), makes it fail the ways a plugin can: "describe" (Backend::describe throws), "open_throw"
// or "open_null" (Backend::open of the second device, sim1, throws or returns nullptr, after sim0 was
// opened), "launch_throw" (Device::launch throws instead of calling done); "slow_open" is no failure:
// Backend::open takes 300 ms, as a device whose driver initialises slowly. "copy_fail":
// copy_to_device reports a failure; "copy_back_fail": copy_to_host does; "create": Entry::create() throws
// (nerve calls it again at the next context until it succeeds: the tests use a copy of their own,
// libnerve-backend-simretry.so). Read at device_count: SIM_PLUGIN_COUNT is how many devices it has (2
// by default; 0: a backend that found none). Read at describe: SIM_PLUGIN_NUMA set, device i says it is
// attached to NUMA node i; SIM_PLUGIN_KIND (test, opencl, cuda, cpu, or out-of-range: 7) is the kind its
// devices declare (test by default), SIM_PLUGIN_NOT_ADDRESSABLE that their memory is not host-addressable;
// SIM_PLUGIN_MEMORY is their memory_bytes (64 MiB by default; 0: unknown). Read at open: SIM_PLUGIN_CAPACITY
// bounds what a device's allocate() gives (none by default), and SIM_PLUGIN_COPY_DELAY_US makes each
// asynchronous copy take that long.
//
// A launch runs the kernel's sim::Implementation (sim_implementation.hpp) when it has one, else its
// CPU body. sim_plugin_peak_copies() says how many asynchronous copies were in flight at once, at
// most, on one device (since the last reset).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>

#include "nerve/backend_plugin.hpp"

#include "sim_implementation.hpp"

namespace {

std::atomic<std::size_t> peak_copies{0};

std::size_t from_environment(const char* name, std::size_t otherwise) {
  const char* text = std::getenv(name);
  return text != nullptr ? static_cast<std::size_t>(std::strtoull(text, nullptr, 10)) : otherwise;
}

bool failing(const char* mode) {
  const char* fail = std::getenv("SIM_PLUGIN_FAIL");
  return fail != nullptr && std::strcmp(fail, mode) == 0;
}

// SimDevice: everything runs in order on one thread, like one stream of a GPU.
class SimDevice final : public nerve::plugin::Device {
 public:
  SimDevice()
      : capacity_(from_environment("SIM_PLUGIN_CAPACITY", SIZE_MAX)),
        copy_delay_(from_environment("SIM_PLUGIN_COPY_DELAY_US", 0)),
        thread_([this] { run(); }) {}
  ~SimDevice() override { drain(); }

  void* allocate(std::size_t bytes) override {
    std::size_t used = used_.load();
    do {
      if (bytes > capacity_ - used) return nullptr;
    } while (!used_.compare_exchange_weak(used, used + bytes));
    return std::malloc(bytes);
  }
  void deallocate(void* data, std::size_t bytes) noexcept override {
    std::free(data);
    used_.fetch_sub(bytes);
  }

  void copy_to_device(const void* host, void* device, std::size_t bytes,
                      nerve::plugin::Completion& done) override {
    begin_copy();
    post([=, this, &done] {
      end_copy();
      if (failing("copy_fail")) {
        done.done(false, "sim: copy failed on purpose");
        return;
      }
      std::memcpy(device, host, bytes);
      done.done(true, nullptr);
    });
  }
  void copy_to_host(const void* device, void* host, std::size_t bytes,
                    nerve::plugin::Completion& done) override {
    begin_copy();
    post([=, this, &done] {
      end_copy();
      if (failing("copy_back_fail")) {
        done.done(false, "sim: copy back failed on purpose");
        return;
      }
      std::memcpy(host, device, bytes);
      done.done(true, nullptr);
    });
  }
  void copy_to_host_sync(const void* device, void* host, std::size_t bytes) override {
    std::memcpy(host, device, bytes);
  }
  void copy_to_device_sync(const void* host, void* device, std::size_t bytes) override {
    std::memcpy(device, host, bytes);
  }
  void launch(const nerve::plugin::Launch& launch, nerve::plugin::Completion& done) override {
    if (failing("launch_throw")) throw std::runtime_error("sim: launch() failed on purpose");
    const auto* own = dynamic_cast<const sim::Implementation*>(launch.implementation);
    if (own == nullptr && !launch.has_cpu_body) {
      done.done(false, "the sim device runs sim implementations and CPU bodies only");
      return;
    }
    const nerve::plugin::Launch copy = launch;
    post([copy, own, &done] {
      try {
        if (own != nullptr) {
          own->run(*copy.call);
        } else {
          copy.run_cpu(copy.kernel, *copy.call);
        }
      } catch (const std::exception& error) {
        done.done(false, error.what());
        return;
      }
      done.done(true, nullptr);
    });
  }
  void drain() noexcept override {
    {
      std::lock_guard lock(mutex_);
      if (stopping_) return;
      stopping_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }

 private:
  // A copy is in flight from its call until the device thread takes it up, after the delay.
  void begin_copy() {
    const std::size_t now = ++copies_in_flight_;
    std::size_t peak = peak_copies.load();
    while (now > peak && !peak_copies.compare_exchange_weak(peak, now)) {
    }
  }
  void end_copy() {
    if (copy_delay_ != 0) std::this_thread::sleep_for(std::chrono::microseconds(copy_delay_));
    --copies_in_flight_;
  }

  void post(std::function<void()> work) {
    {
      std::lock_guard lock(mutex_);
      work_.push_back(std::move(work));
    }
    wake_.notify_one();
  }
  void run() {
    std::unique_lock lock(mutex_);
    while (true) {
      wake_.wait(lock, [&] { return stopping_ || !work_.empty(); });
      if (work_.empty()) return;  // stopping, and everything done
      auto work = std::move(work_.front());
      work_.pop_front();
      lock.unlock();
      work();
      lock.lock();
    }
  }

  const std::size_t capacity_;
  const std::size_t copy_delay_;  // microseconds
  std::atomic<std::size_t> used_{0};
  std::atomic<std::size_t> copies_in_flight_{0};
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> work_;
  bool stopping_ = false;
  std::thread thread_;  // last: it runs as soon as it is made
};

nerve::DeviceKind kind_from_environment() {
  const char* kind = std::getenv("SIM_PLUGIN_KIND");
  if (kind == nullptr) return nerve::DeviceKind::test;
  if (std::strcmp(kind, "opencl") == 0) return nerve::DeviceKind::opencl;
  if (std::strcmp(kind, "cuda") == 0) return nerve::DeviceKind::cuda;
  if (std::strcmp(kind, "cpu") == 0) return nerve::DeviceKind::cpu;
  if (std::strcmp(kind, "out-of-range") == 0) return static_cast<nerve::DeviceKind>(7);
  return nerve::DeviceKind::test;
}

class SimBackend final : public nerve::plugin::Backend {
 public:
  std::size_t device_count() override { return from_environment("SIM_PLUGIN_COUNT", 2); }
  nerve::plugin::DeviceDescription describe(std::size_t index) override {
    if (failing("describe")) throw std::runtime_error("sim: describe() failed on purpose");
    nerve::plugin::DeviceDescription description;
    description.name = "sim" + std::to_string(index);
    description.kind = kind_from_environment();
    description.runs_cpu_kernels = true;
    // SIM_PLUGIN_NOT_ADDRESSABLE: it says its memory is not host-addressable, yet runs CPU bodies.
    description.host_addressable = std::getenv("SIM_PLUGIN_NOT_ADDRESSABLE") == nullptr;
    description.memory_bytes = from_environment("SIM_PLUGIN_MEMORY", std::size_t{64} << 20);
    description.compute_units = 1;
    if (std::getenv("SIM_PLUGIN_NUMA") != nullptr) description.numa_node = static_cast<int>(index);
    return description;
  }
  std::unique_ptr<nerve::plugin::Device> open(std::size_t index,
                                              const nerve::plugin::OpenOptions& /*options*/) override {
    if (index == 1 && failing("open_throw")) throw std::runtime_error("sim: open() failed on purpose");
    if (index == 1 && failing("open_null")) return nullptr;
    if (failing("slow_open")) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    return std::make_unique<SimDevice>();
  }
};

#ifndef NERVE_SIM_ABI_VERSION
#define NERVE_SIM_ABI_VERSION nerve::plugin::abi_version
#endif

nerve::plugin::Backend* create() {
  if (failing("create")) throw std::runtime_error("sim: create() failed on purpose");
  return new SimBackend();  // lives until exit (the ABI's rule)
}

}  // namespace

// sim_plugin_peak_copies(): the most asynchronous copies one device had in flight at once since the
// last call with `reset`; the tests find it with dlsym.
extern "C" __attribute__((visibility("default"))) std::size_t sim_plugin_peak_copies(bool reset) {
  return reset ? peak_copies.exchange(0) : peak_copies.load();
}

#ifndef NERVE_SIM_NO_ENTRY
extern "C" __attribute__((visibility("default"))) const nerve::plugin::Entry* nerve_backend_entry() {
  static const nerve::plugin::Entry entry{NERVE_SIM_ABI_VERSION, "sim", &create};
  return &entry;
}
#else
extern "C" __attribute__((visibility("default"))) int nerve_backend_something_else() { return 0; }
#endif
