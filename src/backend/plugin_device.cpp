#include "backend/plugin_device.hpp"

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <utility>

#include <fmt/format.h>

#include "backend/cuda_launcher.hpp"
#include "backend/host_bounce.hpp"
#include "backend/opencl_program.hpp"
#include "backend/transfer_gate.hpp"
#include "task/kernel_task.hpp"
#include "task/task_record.hpp"
#include "util/log.hpp"

namespace nerve::detail {
namespace {

// What the plugin threw, for a message; called while handling it.
std::string thrown_message() {
  try {
    throw;
  } catch (const std::exception& error) {
    return error.what();
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

// A failed launch, whether the plugin reported it (done(false)) or its launch() threw: the task's
// error names the kernel, the task when it has a name of its own, and the device.
std::exception_ptr launch_failure(const TaskRecord& task, const std::string& device, std::string_view why) {
  const std::string& kernel = task.kernel->name;
  const std::string named =
      task.name != nullptr && kernel != task.name ? fmt::format(" (task '{}')", task.name) : std::string();
  return std::make_exception_ptr(
      Error(ErrorCode::task_failed,
            fmt::format("kernel '{}'{} failed on device '{}': {}", kernel, named, device, why)));
}

class PluginMemoryNode;

// One copy between host memory and the plugin's device, kept while it waits for a place under
// gpu.max_pending_transfers.
struct HostCopy {
  PluginMemoryNode* node = nullptr;
  const std::byte* source = nullptr;
  std::byte* destination = nullptr;
  std::size_t bytes = 0;
  bool to_device = false;
  CopyCompletion* completion = nullptr;
};

// A plugin's copy completion: frees the copy's place and forwards to the runtime's. One per copy,
// deleted when done.
struct CopyBridge final : plugin::Completion {
  HostCopy copy;
  explicit CopyBridge(const HostCopy& started) : copy(started) {}
  void done(bool ok, const char* error) noexcept override;
};

// The node's limit: memory_bytes 0 is a size the plugin does not know, not a node that holds
// nothing; the plugin's allocate() then says what fits.
std::size_t memory_limit(const plugin::DeviceDescription& description) noexcept {
  if (description.memory_bytes == 0 || description.memory_bytes > SIZE_MAX) return SIZE_MAX;
  return static_cast<std::size_t>(description.memory_bytes);
}

class PluginMemoryNode final : public MemoryNode {
 public:
  PluginMemoryNode(unsigned index, std::string name, const plugin::DeviceDescription& description,
                   plugin::Device& device, unsigned max_pending_transfers)
      : MemoryNode(index, std::move(name), memory_limit(description), description.host_addressable),
        device_(device),
        gate_(max_pending_transfers) {}

  void drain() noexcept override { device_.drain(); }
  std::uint64_t wait_idle() noexcept override {
    std::unique_lock lock(in_flight_mutex_);
    idle_.wait(lock, [&] { return in_flight_ == 0; });
    return started_;
  }

  void copy_sync(MemoryNode& from, const std::byte* source, MemoryNode& to, std::byte* destination,
                 std::size_t bytes) override {
    if (&from == this && to.host_addressable()) {
      device_.copy_to_host_sync(source, destination, bytes);
    } else if (&to == this && from.host_addressable()) {
      device_.copy_to_device_sync(source, destination, bytes);
    } else {
      copy_through_host(from, source, to, destination, bytes);
    }
  }

  void count_copies(DeviceCounters& counters) const { gate_.count(counters); }

  // finish(): a copy the plugin was given is over: its place goes to the first waiting copy, which
  // starts now, and the runtime hears of the outcome.
  void finish(const HostCopy& copy, bool ok, const std::string& error) noexcept {
    if (std::optional<HostCopy> next = gate_.leave()) start(*next);
    copy.completion->copy_done(ok, error);
    std::lock_guard lock(in_flight_mutex_);  // after the completion, which may start copies elsewhere
    if (--in_flight_ == 0) idle_.notify_all();
  }

 protected:
  std::byte* allocate_storage(std::size_t bytes) override {
    return static_cast<std::byte*>(device_.allocate(bytes));
  }
  void free_storage(std::byte* data, std::size_t bytes) noexcept override { device_.deallocate(data, bytes); }
  void start_copy(MemoryNode& from, const std::byte* source, MemoryNode& to, std::byte* destination,
                  std::size_t bytes, CopyCompletion& completion) override {
    const bool to_device = &to == this && from.host_addressable();
    if (!to_device && !(&from == this && to.host_addressable())) {
      copy_through_host(from, source, to, destination, bytes);  // another backend's device memory
      completion.copy_done(true, {});
      return;
    }
    // The plugin promises a built-in device's copy contract, so nerve bounds its copies in flight
    // itself, whatever the plugin does with OpenOptions::max_pending_transfers.
    const HostCopy copy{this, source, destination, bytes, to_device, &completion};
    {
      std::lock_guard lock(in_flight_mutex_);
      ++in_flight_;
      ++started_;
    }
    bool may_start = false;
    try {
      may_start = gate_.enter(copy);
    } catch (...) {  // no memory to queue it: it never starts, and wait_idle() must not wait for it
      std::lock_guard lock(in_flight_mutex_);
      if (--in_flight_ == 0) idle_.notify_all();
      throw;
    }
    if (may_start) start(copy);  // else the copy that frees a place starts it
  }

 private:
  // start(): hands `copy` (holding a place) to the plugin. A plugin may complete a copy inside the
  // call, and that completion starts the next waiting copy: copies started so run from this loop,
  // not one stack frame deeper each.
  static void start(const HostCopy& copy) noexcept {
    thread_local std::deque<HostCopy>* starting = nullptr;
    if (starting != nullptr) {
      starting->push_back(copy);
      return;
    }
    std::deque<HostCopy> queue{copy};
    starting = &queue;
    while (!queue.empty()) {
      const HostCopy next = queue.front();
      queue.pop_front();
      next.node->issue(next);
    }
    starting = nullptr;
  }

  void issue(const HostCopy& copy) noexcept {
    auto bridge = std::make_unique<CopyBridge>(copy);
    try {
      if (copy.to_device) {
        device_.copy_to_device(copy.source, copy.destination, copy.bytes, *bridge);
      } else {
        device_.copy_to_host(copy.source, copy.destination, copy.bytes, *bridge);
      }
      (void)bridge.release();  // the plugin's until its done(), which deletes it
    } catch (...) {
      // A copy that throws has not started (backend_plugin.hpp): it fails as a reported failure does.
      finish(copy, false,
             fmt::format("its copy_to_{}() threw: {}", copy.to_device ? "device" : "host", thrown_message()));
    }
  }

  plugin::Device& device_;
  TransferGate<HostCopy> gate_;
  // The plugin's copies from start_copy() to the end of their completion (wait_idle()).
  std::mutex in_flight_mutex_;
  std::condition_variable idle_;
  std::size_t in_flight_ = 0;
  std::uint64_t started_ = 0;
};

void CopyBridge::done(bool ok, const char* error) noexcept {
  const HostCopy finished = copy;
  const std::string message = error != nullptr ? error : (ok ? "" : "the plugin's copy failed");
  delete this;
  finished.node->finish(finished, ok, message);
}

// plugin_implementation(): what the kernel attached for `kind` that a plugin can run. nerve's own
// OpenCL programs and CUDA launchers are internal types no plugin can read: they run on the built-in
// backends' devices only, as a plugin's own run on its devices only.
const KernelImplementation* plugin_implementation(const KernelState& kernel, DeviceKind kind) noexcept {
  const KernelImplementation* implementation = kernel.by_kind[static_cast<std::size_t>(kind)].get();
  if (dynamic_cast<const OpenclProgram*>(implementation) != nullptr ||
      dynamic_cast<const CudaLauncher*>(implementation) != nullptr)
    return nullptr;
  return implementation;
}

void run_cpu_body(const void* kernel, const KernelCall& call) {
  static_cast<const KernelState*>(kernel)->cpu(KernelArgs(call));
}

class PluginDevice final : public Device {
 public:
  PluginDevice(const DeviceInfo& info, const plugin::DeviceDescription& description,
               std::unique_ptr<plugin::Device> device, const plugin::OpenOptions& opened,
               std::string node_name)
      : Device(info,
               std::make_unique<PluginMemoryNode>(static_cast<unsigned>(info.index), std::move(node_name),
                                                  description, *device, opened.max_pending_transfers)),
        device_(std::move(device)),
        description_(description),
        opened_(opened) {}

  // drain() is idempotent (the contract): shutdown drained it already, unless opening failed.
  ~PluginDevice() override { device_->drain(); }

  bool can_run(const TaskRecord& task) const noexcept override {
    if (task.kind != TaskKind::function || task.kernel == nullptr) return false;
    // Its kind is never cpu (refused when the context is created), so this is an implementation
    // attached with Kernel::implement.
    return plugin_implementation(*task.kernel, description_.kind) != nullptr ||
           (description_.runs_cpu_kernels && static_cast<bool>(task.kernel->cpu));
  }

  void start(DeviceHost& host) override { host_ = &host; }
  void stop() noexcept override {}

  void submit(TaskRecord* task) override {
    if (task->cancel_pending.load(std::memory_order_acquire) ||
        (task->group != nullptr && task->group->cancel_requested.load(std::memory_order_acquire))) {
      host_->run_on_device(task, *this);  // finishes it as cancelled
      return;
    }
    auto* running = new Running(*this, task);
    plugin::Launch launch;
    std::exception_ptr failure;
    try {
      running->launch = host_->prepare_launch(task, *this);
    } catch (...) {
      failure = std::current_exception();
    }
    if (failure != nullptr) {  // completed out of the handler (as opencl/device.cpp says why)
      delete running;
      host_->complete(task, *this, std::move(failure));
      return;
    }
    launch.call = &running->launch.call;
    launch.implementation = plugin_implementation(*task->kernel, description_.kind);
    launch.has_cpu_body = static_cast<bool>(task->kernel->cpu);
    launch.run_cpu = &run_cpu_body;
    launch.kernel = task->kernel;
    try {
      device_->launch(launch, *running);
    } catch (...) {
      // A launch() that throws has not started (backend_plugin.hpp): `running` was never handed over,
      // and the task fails as a launch reported with done(false) does, not with the plugin's exception.
      const std::exception_ptr failure =
          launch_failure(*task, info().name, fmt::format("its launch() threw: {}", thrown_message()));
      delete running;
      host_->complete(task, *this, failure);
    }
  }

  DeviceCapabilities capabilities() const noexcept override {
    // The plugin runs its own queues, within the bounds it was opened with; nerve keeps its copies
    // in flight within max_pending_transfers (PluginMemoryNode).
    return DeviceCapabilities{description_.host_addressable, description_.unified_memory,
                              opened_.stream_count, opened_.max_pending_transfers};
  }

  DeviceCounters counters() const override {
    DeviceCounters counters;
    static_cast<const PluginMemoryNode&>(memory()).count_copies(counters);
    return counters;
  }

 private:
  // One launch in flight: its call (the plugin reads it until done) and the way back.
  struct Running final : plugin::Completion {
    Running(PluginDevice& owner, TaskRecord* running_task) : device(owner), task(running_task) {}
    void done(bool ok, const char* error) noexcept override {
      std::exception_ptr failure;
      if (!ok) failure = launch_failure(*task, device.info().name, error != nullptr ? error : "(no message)");
      PluginDevice& owner = device;
      TaskRecord* finished = task;
      delete this;
      owner.host_->complete(finished, owner, failure);
    }
    PluginDevice& device;
    TaskRecord* task;
    DeviceLaunch launch;
  };

  std::unique_ptr<plugin::Device> device_;
  plugin::DeviceDescription description_;
  plugin::OpenOptions opened_;  // the bounds the plugin was opened with
  DeviceHost* host_ = nullptr;
};

class PluginBackend final : public Backend {
 public:
  PluginBackend(std::string name, plugin::Backend* backend, std::filesystem::path file)
      : name_(std::move(name)), backend_(backend), file_(std::move(file)) {}

  std::string name() const override { return name_; }

  std::vector<DeviceInfo> enumerate(const Topology& topology) override {
    std::vector<DeviceInfo> found;
    const std::size_t count = call("Backend::device_count()", [&] { return backend_->device_count(); });
    {
      // The plugin ABI has no way to say why there is no device: nerve says what it knows, so that
      // nerve-info and a gpu.devices naming this backend do not stay silent (NERVE_INFO.md).
      std::lock_guard lock(mutex_);
      why_ = count > 0 ? std::string{}
                       : fmt::format("no device (its Backend::device_count() returned 0; plugin file {})",
                                     file_.string());
    }
    for (std::size_t i = 0; i < count; ++i) found.push_back(info(describe(i), &topology));
    return found;
  }

  std::string unavailable_reason() const override {
    std::lock_guard lock(mutex_);
    return why_;
  }
  bool plugin() const override { return true; }

  std::unique_ptr<Device> open(std::size_t which, const DeviceOpenOptions& options) override {
    const plugin::DeviceDescription description = describe(which);
    plugin::OpenOptions open_options;
    open_options.index = options.index;
    open_options.stream_count = options.stream_count;
    open_options.max_pending_transfers = options.max_pending_transfers;
    std::unique_ptr<plugin::Device> device =
        call(fmt::format("Backend::open({})", which), [&] { return backend_->open(which, open_options); });
    if (device == nullptr) {
      throw plugin_error(file_,
                         fmt::format("Backend::open({}) returned no device ('{}')", which, description.name));
    }
    DeviceInfo described = info(description, options.topology);
    described.index = options.index;
    return std::make_unique<PluginDevice>(described, description, std::move(device), open_options,
                                          options.node_name(described.name));
  }

 private:
  // info(): what nerve knows of a described device. A NUMA node the topology lacks (a plugin's guess,
  // one of another machine) is unknown (-1), with a warning, rather than a locality nerve-info shows
  // and placement would use.
  DeviceInfo info(const plugin::DeviceDescription& description, const Topology* topology) const {
    DeviceInfo out;
    out.kind = description.kind;
    out.name = description.name;
    out.memory_bytes = description.memory_bytes;
    out.compute_units = description.compute_units;
    out.numa_node = description.numa_node;
    const int nodes = topology != nullptr ? static_cast<int>(topology->numa_nodes().size()) : 0;
    if (topology != nullptr && (out.numa_node < -1 || out.numa_node >= nodes)) {
      std::unique_lock lock(mutex_);
      if (unplaced_.emplace(description.name, out.numa_node).second)  // once: each context enumerates
        log::warn(
            "plugin '{}': device '{}' says it is attached to NUMA node {}, which this machine's "
            "topology does not have (nodes 0 to {}); its NUMA node is taken as unknown",
            name_, description.name, out.numa_node, nodes - 1);
      out.numa_node = -1;
    }
    out.backend = name_;
    out.unified_memory = description.unified_memory;
    return out;
  }

  // describe(): the plugin's description of device `which`, refused when it claims DeviceKind::cpu —
  // the CPU workers' kind, device 0 and memory node 0 alone: such a device would be taken for them.
  plugin::DeviceDescription describe(std::size_t which) {
    plugin::DeviceDescription description =
        call(fmt::format("Backend::describe({})", which), [&] { return backend_->describe(which); });
    if (description.kind == DeviceKind::cpu) {
      throw plugin_error(file_,
                         fmt::format("device {} ('{}') of backend '{}' declares DeviceKind::cpu, which is "
                                     "the CPU workers' alone: declare test (the default), opencl or cuda",
                                     which, description.name, name_));
    }
    // A value outside the enumeration (a plugin built against another header, or uninitialised
    // memory) would index the kernels' implementations per kind out of bounds.
    if (description.kind != DeviceKind::test && description.kind != DeviceKind::opencl &&
        description.kind != DeviceKind::cuda) {
      throw plugin_error(file_,
                         fmt::format("device {} ('{}') of backend '{}' declares DeviceKind {}, which is "
                                     "no kind of device: declare test (the default), opencl or cuda",
                                     which, description.name, name_, static_cast<int>(description.kind)));
    }
    // A Kernel's CPU body dereferences its arguments' pointers: on memory a CPU cannot address, it
    // would read and write whatever those addresses are in this process.
    if (description.runs_cpu_kernels && !description.host_addressable) {
      throw plugin_error(file_, fmt::format("device {} ('{}') of backend '{}' runs Kernels' CPU bodies "
                                            "(runs_cpu_kernels) on memory a CPU cannot address "
                                            "(host_addressable false): one of the two is wrong",
                                            which, description.name, name_));
    }
    return description;
  }

  // A call into the plugin's Backend: what it throws is the plugin's failure, not an exception of
  // nerve's, and the user must learn which file to blame.
  template <class Call>
  std::invoke_result_t<Call&> call(std::string_view what, Call&& plugin_call) {
    try {
      return plugin_call();
    } catch (...) {
      throw plugin_error(file_, fmt::format("{} threw: {}", what, thrown_message()));
    }
  }

  std::string name_;
  plugin::Backend* backend_;
  std::filesystem::path file_;
  mutable std::mutex mutex_;  // guards why_ and unplaced_: contexts may be built on several threads at once
  std::string why_;           // unavailable_reason(), set by each enumerate()
  mutable std::set<std::pair<std::string, int>> unplaced_;  // devices and NUMA nodes warned about
};

}  // namespace

std::shared_ptr<Backend> make_plugin_backend(std::string name, plugin::Backend* backend,
                                             std::filesystem::path file) {
  return std::make_shared<PluginBackend>(std::move(name), backend, std::move(file));
}

Error plugin_error(const std::filesystem::path& file, std::string_view why) {
  return Error(ErrorCode::invalid_config, fmt::format("backend plugin '{}': {}", file.string(), why));
}

}  // namespace nerve::detail
