#include "backend/plugin_device.hpp"

#include <atomic>
#include <exception>
#include <type_traits>
#include <utility>

#include <fmt/format.h>

#include "backend/host_bounce.hpp"
#include "task/kernel_task.hpp"
#include "task/task_record.hpp"

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

// A plugin's copy completion forwarded to the runtime's; one per copy, deleted when done.
struct CopyBridge final : plugin::Completion {
  CopyCompletion* target;
  explicit CopyBridge(CopyCompletion& completion) : target(&completion) {}
  void done(bool ok, const char* error) noexcept override {
    CopyCompletion* forward = target;
    const std::string message = error != nullptr ? error : (ok ? "" : "the plugin's copy failed");
    delete this;
    forward->copy_done(ok, message);
  }
};

class PluginMemoryNode final : public MemoryNode {
 public:
  PluginMemoryNode(unsigned index, std::string name, const plugin::DeviceDescription& description,
                   plugin::Device& device)
      : MemoryNode(index, std::move(name), description.memory_bytes, description.host_addressable),
        device_(device) {}

  void drain() noexcept override { device_.drain(); }

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

 protected:
  std::byte* allocate_storage(std::size_t bytes) override {
    return static_cast<std::byte*>(device_.allocate(bytes));
  }
  void free_storage(std::byte* data, std::size_t bytes) noexcept override { device_.deallocate(data, bytes); }
  void start_copy(MemoryNode& from, const std::byte* source, MemoryNode& to, std::byte* destination,
                  std::size_t bytes, CopyCompletion& completion) override {
    if (&to == this && from.host_addressable()) {
      device_.copy_to_device(source, destination, bytes, *new CopyBridge(completion));
    } else if (&from == this && to.host_addressable()) {
      device_.copy_to_host(source, destination, bytes, *new CopyBridge(completion));
    } else {
      copy_through_host(from, source, to, destination, bytes);  // another backend's device memory
      completion.copy_done(true, {});
    }
  }

 private:
  plugin::Device& device_;
};

void run_cpu_body(const void* kernel, const KernelCall& call) {
  static_cast<const KernelState*>(kernel)->cpu(KernelArgs(call));
}

class PluginDevice final : public Device {
 public:
  PluginDevice(const DeviceInfo& info, const plugin::DeviceDescription& description,
               std::unique_ptr<plugin::Device> device, const plugin::OpenOptions& opened)
      : Device(info, std::make_unique<PluginMemoryNode>(static_cast<unsigned>(info.index),
                                                        fmt::format("{}{}", info.backend, info.index),
                                                        description, *device)),
        device_(std::move(device)),
        description_(description),
        opened_(opened) {}

  // drain() is idempotent (the contract): shutdown drained it already, unless opening failed.
  ~PluginDevice() override { device_->drain(); }

  bool can_run(const TaskRecord& task) const noexcept override {
    if (task.kind != TaskKind::function || task.kernel == nullptr) return false;
    const bool own_kind = description_.kind != DeviceKind::cpu && description_.kind != DeviceKind::test &&
                          task.kernel->implements(description_.kind);
    return own_kind || (description_.runs_cpu_kernels && static_cast<bool>(task.kernel->cpu));
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
    try {
      running->launch = host_->prepare_launch(task, *this);
    } catch (...) {
      delete running;
      host_->complete(task, *this, std::current_exception());
      return;
    }
    launch.call = &running->launch.call;
    launch.implementation = running->launch.implementation;
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
    // The plugin runs its own queues and copies: what it reports is the bounds it was opened with.
    return DeviceCapabilities{description_.host_addressable, description_.unified_memory,
                              opened_.stream_count, opened_.max_pending_transfers};
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

  std::vector<DeviceInfo> enumerate(const Topology& /*topology*/) override {
    std::vector<DeviceInfo> found;
    const std::size_t count = call("Backend::device_count()", [&] { return backend_->device_count(); });
    for (std::size_t i = 0; i < count; ++i) found.push_back(info(describe(i)));
    return found;
  }

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
    DeviceInfo described = info(description);
    described.index = options.index;
    return std::make_unique<PluginDevice>(described, description, std::move(device), open_options);
  }

 private:
  DeviceInfo info(const plugin::DeviceDescription& description) const {
    DeviceInfo out;
    out.kind = description.kind;
    out.name = description.name;
    out.memory_bytes = description.memory_bytes;
    out.compute_units = description.compute_units;
    out.numa_node = description.numa_node;
    out.backend = name_;
    out.unified_memory = description.unified_memory;
    return out;
  }

  plugin::DeviceDescription describe(std::size_t which) {
    return call(fmt::format("Backend::describe({})", which), [&] { return backend_->describe(which); });
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
