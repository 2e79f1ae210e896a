#include "nerve/kernel.hpp"

#include <fmt/format.h>

#include "task/kernel_task.hpp"
#include "task/task_record.hpp"

namespace nerve {

Kernel::Kernel(std::string name) : state_(std::make_shared<detail::KernelState>()) {
  if (name.empty())
    throw Error(ErrorCode::invalid_argument, "a kernel needs a name (it keys performance models)");
  state_->name = std::move(name);
}

namespace {
// configured(): the state a configuring or submitting call works on; a moved-from Kernel has none.
detail::KernelState& configured(const std::shared_ptr<detail::KernelState>& state, const char* what) {
  if (state == nullptr) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("{} on an empty Kernel (moved from): assign it a Kernel first", what));
  }
  return *state;
}

// refuse_if_used(): a configuring call (`what`) on a kernel already submitted is an error, not a
// silent change of what later calls run (and of what its performance models learn under its name).
// Called with the state's `configuring` mutex held.
void refuse_if_used(const detail::KernelState& state, const std::string& what) {
  if (!state.used.load(std::memory_order_relaxed)) return;
  throw Error(ErrorCode::invalid_argument,
              fmt::format("kernel '{}' was already used: {} after its first submit would change it (a "
                          "Kernel is configured before first use, then immutable; configure a new Kernel)",
                          state.name, what));
}
}  // namespace

Kernel& Kernel::cpu(CpuKernel body) {
  detail::KernelState& state = configured(state_, "cpu()");
  std::lock_guard lock(state.configuring);
  refuse_if_used(state, "cpu()");
  state.cpu = std::move(body);
  return *this;
}

Kernel& Kernel::implement(DeviceKind kind, std::shared_ptr<const KernelImplementation> implementation) {
  detail::KernelState& state = configured(state_, "implement()");
  // Plugin devices of kind test (the default) run the implementation attached here; nerve's own
  // simulated test devices run cpu() bodies only and never look at it.
  if (kind == DeviceKind::cpu) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("kernel '{}': the CPU implementation is given with cpu()", name()));
  }
  // A null one would leave the kind unimplemented without a word, and the mistake would surface only
  // at submit (no device runs the kernel), far from here: refused like an empty opencl::attach
  // source or cuda::attach launcher.
  if (implementation == nullptr) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("kernel '{}': implement() for {} devices was given no implementation (nullptr)",
                            name(), nerve::name(kind)));
  }
  std::lock_guard lock(state.configuring);
  refuse_if_used(state, fmt::format("attaching an implementation for {} devices", nerve::name(kind)));
  state.by_kind[static_cast<std::size_t>(kind)] = std::move(implementation);
  return *this;
}

const std::string& Kernel::name() const noexcept {
  static const std::string empty;
  return state_ != nullptr ? state_->name : empty;
}
bool Kernel::implements(DeviceKind kind) const noexcept {
  return state_ != nullptr && state_->implements(kind);
}
const KernelImplementation* Kernel::implementation(DeviceKind kind) const noexcept {
  return state_ != nullptr ? state_->by_kind[static_cast<std::size_t>(kind)].get() : nullptr;
}
const detail::KernelState& Kernel::state() const { return configured(state_, "using a Kernel"); }
std::shared_ptr<const detail::KernelState> Kernel::shared_state() const {
  configured(state_, "using a Kernel");
  return state_;
}

namespace detail {

void throw_kernel_argument_error(const KernelCall& call, const char* what, std::size_t index,
                                 const std::string& detail) {
  throw Error(ErrorCode::invalid_argument,
              fmt::format("kernel '{}': {} {} {}", call.kernel_name, what, index, detail));
}

const ClosureOps KernelTask::ops{&KernelTask::invoke, &KernelTask::destroy};

void KernelTask::invoke(void* self, const AccessView* views) {
  const KernelTask& task = *static_cast<KernelTask*>(self);
  if (!task.kernel->cpu) {
    throw Error(ErrorCode::internal, fmt::format("kernel '{}' has no CPU implementation", task.kernel->name));
  }
  const KernelCall call = task.describe(views, running_device(), nullptr);
  task.kernel->cpu(KernelArgs(call));
}

const KernelTask* kernel_task_of(TaskRecord& task) noexcept {
  if (task.ops != &KernelTask::ops) return nullptr;
  return static_cast<const KernelTask*>(task.closure_storage());
}

}  // namespace detail
}  // namespace nerve
