// backend_plugin.hpp — the ABI of device backends loaded as plugins.
//
// A plugin is a shared library named libnerve-backend-<name>.so in a directory of NERVE_PLUGIN_PATH
// (colon-separated): a regular file, or a symbolic link to one (anything else so named, such as a
// directory, is skipped with a warning; so is an entry of NERVE_PLUGIN_PATH that does not exist or is
// not a directory). When a context is created nerve dlopen()s each such file it has not loaded yet —
// once per process, however many paths reach it (a directory listed twice, "dir" and "dir/", links),
// so its backend is listed once; never unloaded — calls its entry function
//
//   extern "C" const nerve::plugin::Entry* nerve_backend_entry();
//
// and checks Entry::abi_version against nerve::plugin::abi_version. A file that cannot be loaded
// (dlopen's message), has no entry symbol, or was built for another ABI version makes creating the
// context fail with nerve::Error(invalid_config) naming the file; so does a plugin whose create(),
// Backend::device_count(), describe() or open() throws (with its message), whose create() or open()
// returns nullptr, or one of whose devices declares DeviceKind::cpu. The plugin's devices then join
// the built-in backends' (numbered after them; gpu.devices selects among all of them, by index, name
// or the plugin's name), with the same memory-node, copy and launch contract as a built-in device
// (docs/BACKENDS.md): nerve keeps at most gpu.max_pending_transfers of a device's asynchronous copies
// (both directions together) with the plugin at once, and holds later ones back itself, in order,
// blocking no thread — OpenOptions::max_pending_transfers says so, it asks nothing of the plugin.
//
// The ABI is the classes below — pure virtual, so a plugin needs no symbol of nerve and must not
// link libnerve (the process that loads it has nerve already) — plus detail::KernelCall and
// KernelImplementation from kernel.hpp, and std::string. Build a plugin with the same compiler
// family and C++ standard library as nerve, against this version's headers; abi_version changes
// whenever any of these types changes.
//
// Devices: a device declares a DeviceKind — test (the default: neither OpenCL nor CUDA), opencl or
// cuda; never cpu, the CPU workers' alone — and runs what a Kernel attached for that kind with
// Kernel::implement(kind, ...) (Launch::implementation), and — when `runs_cpu_kernels` — a Kernel's
// CPU body on its own memory (which must then be host addressable), as the simulated device of
// tests/backend/plugins does. Implementations belong to a backend, not to a kind: nerve's OpenCL and
// CUDA devices run only those made by nerve::opencl::attach and nerve::cuda::attach, which plugin
// devices never receive (Launch::implementation is nullptr then). So a plugin device of kind opencl
// and a built-in OpenCL device share no call: nerve places each call on a device that runs its
// implementation, and a call sent to one that does not (TaskOptions::device) is
// Error(invalid_argument) at submit. A plugin dynamic_casts Launch::implementation to its own type
// (it may be another plugin's, made for devices of the same kind: nerve cannot tell them apart).
// A Kernel holds one implementation per kind — a later Kernel::implement() or attach for the kind
// replaces the earlier one — so one Kernel cannot carry code for both a plugin's devices and
// another backend's of the same kind (PoCL's and the plugin's opencl devices, say): use a Kernel
// per backend. Plain closures (Context::submit(fn, ...)) run on CPU workers only, and C kernels
// (the C API's launcher form) on the built-in CUDA devices only.
//
// Threads: a Backend is created once per process (Entry::create) and never destroyed before exit.
// A Device is used from any thread; it calls Completion::done exactly once per copy or launch, from
// any thread (holding no lock that its own calls could need: done() may call back into the device).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "nerve/device.hpp"
#include "nerve/kernel.hpp"

namespace nerve::plugin {

inline constexpr std::uint32_t abi_version = 1;
inline constexpr const char* entry_symbol = "nerve_backend_entry";

// Completion: what a copy or a launch reports, once.
class Completion {
 public:
  virtual void done(bool ok, const char* error) noexcept = 0;

 protected:
  ~Completion() = default;
};

struct DeviceDescription {
  std::string name;                    // e.g. "sim0"; gpu.devices matches names by substring
  DeviceKind kind = DeviceKind::test;  // which Kernel implementations it is given: test, opencl or cuda
  bool runs_cpu_kernels = false;       // it runs Kernels' CPU bodies (refused without host_addressable)
  bool host_addressable = false;       // a CPU may dereference its memory's pointers
  bool unified_memory = false;
  // memory_bytes: its memory node's limit. 0: unknown — nerve sets no limit of its own, allocate()
  // returning nullptr is what makes nerve evict and then report out_of_memory, and nerve-info says
  // "unknown memory".
  std::uint64_t memory_bytes = 0;
  unsigned compute_units = 1;
  int numa_node = -1;  // nerve's NUMA node index when known (one the topology lacks: unknown, warned)
};

// What to run for one task: its call (accesses resolved in the device's memory, values) and the
// Kernel's implementation for the device's kind (nullptr when it has none). run_cpu(kernel, call)
// runs the Kernel's CPU body (when has_cpu_body); it throws what the body throws.
struct Launch {
  const detail::KernelCall* call = nullptr;
  const KernelImplementation* implementation = nullptr;
  bool has_cpu_body = false;
  void (*run_cpu)(const void* kernel, const detail::KernelCall& call) = nullptr;
  const void* kernel = nullptr;
};

struct OpenOptions {
  int index = 1;                        // the device's index in the context
  unsigned stream_count = 4;            // gpu.stream_count
  unsigned max_pending_transfers = 32;  // gpu.max_pending_transfers: nerve keeps its copies within it
};

class Device {
 public:
  virtual ~Device() = default;
  // allocate(): device memory for a replica; nullptr when it does not fit (nerve then evicts other
  // replicas or reports out_of_memory). Never called with 0 bytes.
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void deallocate(void* data, std::size_t bytes) noexcept = 0;
  // Asynchronous copies between host memory and this device; `done` once the bytes have landed,
  // on its own (context shutdown waits for every copy's `done` before it calls drain(), since one
  // copy's completion may start another). Host memory stays valid and unchanged until then. A copy that
  // throws has not started: it must not call `done` then, and the copy fails with what it threw (so does the
  // task that needed it).
  virtual void copy_to_device(const void* host, void* device, std::size_t bytes, Completion& done) = 0;
  virtual void copy_to_host(const void* device, void* host, std::size_t bytes, Completion& done) = 0;
  // Synchronous copies, which must not wait for the asynchronous ones' completions (nerve calls
  // them with locks held that those completions may need).
  virtual void copy_to_host_sync(const void* device, void* host, std::size_t bytes) = 0;
  virtual void copy_to_device_sync(const void* host, void* device, std::size_t bytes) = 0;
  // launch(): run `launch` asynchronously; `done` once it has finished (ok = false with a message
  // fails the task). Must not block for the kernel. A launch() that throws has not started: it must
  // not call `done` then, and the task fails as with done(false, what it threw): Error(task_failed)
  // naming the kernel, the task and the device.
  virtual void launch(const Launch& launch, Completion& done) = 0;
  // drain(): every copy and launch finished, the device's threads stopped (context shutdown).
  // Idempotent: it is called again before the device is destroyed.
  virtual void drain() noexcept = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::size_t device_count() = 0;
  virtual DeviceDescription describe(std::size_t index) = 0;
  virtual std::unique_ptr<Device> open(std::size_t index, const OpenOptions& options) = 0;
};

struct Entry {
  std::uint32_t abi_version = 0;  // first member, so that nerve can read it from any version
  const char* name = nullptr;     // the backend's name, e.g. "sim"
  // create(): called once per process until it succeeds — one that throws or returns nullptr fails
  // that context's creation, and the next context calls it again; the backend it returns lives
  // until exit.
  Backend* (*create)() = nullptr;
};

}  // namespace nerve::plugin

extern "C" {
using nerve_backend_entry_function = const nerve::plugin::Entry* (*)();
}
