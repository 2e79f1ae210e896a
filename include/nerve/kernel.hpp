// kernel.hpp — a named computation with one implementation per kind of device.
//
//   nerve::Kernel axpy("axpy");
//   axpy.cpu([](const nerve::KernelArgs& args) {
//     auto x = args.span<const float>(0);
//     auto y = args.span<float>(1);
//     const float a = args.value<float>(0);
//     for (std::size_t i = 0; i < y.size(); ++i) y[i] += a * x[i];
//   });
//   nerve::opencl::attach(axpy, source, "axpy");   // an OpenCL implementation (backend header)
//   context.submit(axpy, nerve::read(x), nerve::read_write(y), nerve::value(2.0f));
//
// The scheduler places a kernel's task only on devices that run one of its implementations (the
// kind's, made for the device's backend: backend_plugin.hpp); a kernel that none of the context's
// enabled devices runs is an error at submit time. Arguments are
// the task's accesses (in order) and plain values (in order, each copied into the task).
//
// KernelArgs checks what a body asks for: span<T>(i) needs sizeof(T) to divide the access's size,
// its start to be aligned for T, and T to be const for read-only accesses; value<T>(i) needs the size the
// value was given with. A mismatch throws Error(invalid_argument) naming the kernel, the argument and what
// was expected.
//
// Thread safety: a Kernel is configured before first use and then immutable; copies share the
// implementations (reference counted), and may be used from any thread. Configuring a kernel (cpu(),
// implement(), a backend's attach(), through any copy) once a call of it was submitted throws
// Error(invalid_argument) naming the kernel, even when that submit was refused or is still under way
// on another thread; configure another Kernel instead.
//
// A moved-from Kernel is empty: name() is "", implements() false, and any other use (configuring it,
// submitting it) is Error(invalid_argument); assign another Kernel to it to use it again.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <type_traits>

#include "nerve/detail/runtime_api.hpp"
#include "nerve/device.hpp"
#include "nerve/error.hpp"
#include "nerve/export.hpp"

namespace nerve {

namespace detail {
struct KernelValue {
  const void* data;
  std::size_t size;
};

// What one call of a kernel sees, on the device it runs on.
struct KernelCall {
  const char* kernel_name;
  const AccessView* views;
  const Access* modes;
  std::size_t access_count;
  const KernelValue* values;
  std::size_t value_count;
  int device;
  void* queue;  // the device's queue / stream (nullptr on CPUs)
};

[[noreturn]] NERVE_API void throw_kernel_argument_error(const KernelCall& call, const char* what,
                                                        std::size_t index, const std::string& detail);
}  // namespace detail

class KernelArgs {
 public:
  explicit KernelArgs(const detail::KernelCall& call) noexcept : call_(call) {}

  std::size_t access_count() const noexcept { return call_.access_count; }
  std::size_t value_count() const noexcept { return call_.value_count; }
  int device() const noexcept { return call_.device; }
  void* queue() const noexcept { return call_.queue; }
  const char* kernel_name() const noexcept { return call_.kernel_name; }

  // span<T>(i): access i as elements of T (const T for a read-only access).
  template <class T>
  std::span<T> span(std::size_t i) const {
    using Element = std::remove_const_t<T>;
    const detail::AccessView& view = checked_view(i);
    if (!std::is_const_v<T> && call_.modes[i] == Access::read) {
      detail::throw_kernel_argument_error(call_, "access", i, "is read-only: ask for span<const T>");
    }
    if (view.size % sizeof(Element) != 0) {
      detail::throw_kernel_argument_error(call_, "access", i,
                                          "is " + std::to_string(view.size) +
                                              " bytes, not a whole number of " +
                                              std::to_string(sizeof(Element)) + "-byte elements");
    }
    // A slice of a buffer of another element type may start between two T's (a char buffer's
    // slice at byte 1 as int): dereferencing such a span is undefined behaviour.
    if (reinterpret_cast<std::uintptr_t>(view.data) % alignof(Element) != 0) {
      detail::throw_kernel_argument_error(call_, "access", i,
                                          "starts at an address that is not " +
                                              std::to_string(alignof(Element)) +
                                              "-byte aligned, as the element type needs");
    }
    return {static_cast<T*>(view.data), view.size / sizeof(Element)};
  }
  // data(i), size_bytes(i): access i's address on the device and its size in bytes (device pointers
  // for device kernels).
  void* data(std::size_t i) const { return checked_view(i).data; }
  std::size_t size_bytes(std::size_t i) const { return checked_view(i).size; }

  // value<T>(i): the i-th plain value argument.
  template <class T>
  T value(std::size_t i) const {
    static_assert(std::is_trivially_copyable_v<T>);
    if (i >= call_.value_count) detail::throw_kernel_argument_error(call_, "value", i, "does not exist");
    if (call_.values[i].size != sizeof(T)) {
      detail::throw_kernel_argument_error(
          call_, "value", i,
          "has " + std::to_string(call_.values[i].size) + " bytes, not " + std::to_string(sizeof(T)));
    }
    T result;
    std::memcpy(&result, call_.values[i].data, sizeof(T));
    return result;
  }

  const detail::KernelCall& call() const noexcept { return call_; }

 private:
  const detail::AccessView& checked_view(std::size_t i) const {
    if (i >= call_.access_count) detail::throw_kernel_argument_error(call_, "access", i, "does not exist");
    return call_.views[i];
  }
  const detail::KernelCall& call_;
};

// The base of every device-specific implementation a backend attaches (OpenCL program, CUDA
// launcher, a plugin's own); the backend of that device kind downcasts it.
class KernelImplementation {
 public:
  virtual ~KernelImplementation() = default;
};

using CpuKernel = std::function<void(const KernelArgs&)>;

namespace detail {
struct KernelState;
}

class NERVE_API Kernel {
 public:
  // `name` keys the kernel's performance models, and names it in errors, traces and statistics:
  // an empty one is Error(invalid_argument).
  explicit Kernel(std::string name);

  // cpu(): the implementation for CPU workers (and for devices that run CPU bodies: nerve's
  // simulated test devices, plugin devices that say so). Before the first submit only (see Thread
  // safety above).
  Kernel& cpu(CpuKernel body);
  // implement(): attach an implementation for a device kind other than cpu (cpu() gives that one:
  // Error(invalid_argument) otherwise): opencl and cuda (nerve::opencl::attach and cuda::attach wrap
  // this), or a backend plugin's own for its devices' kind — test, their default, included. Each
  // backend's devices run only the implementations made for them (backend_plugin.hpp). A Kernel
  // holds one implementation per device kind: a later implement() (or attach) for the same kind
  // replaces the earlier one, silently, so one Kernel cannot carry code for two backends whose
  // devices share a kind (PoCL and a plugin's devices of kind opencl, two plugins of kind test):
  // use a Kernel per backend then. Before the first submit only. A null `implementation` is
  // Error(invalid_argument).
  Kernel& implement(DeviceKind kind, std::shared_ptr<const KernelImplementation> implementation);

  const std::string& name() const noexcept;
  bool implements(DeviceKind kind) const noexcept;
  const KernelImplementation* implementation(DeviceKind kind) const noexcept;
  // state(), shared_state(): the shared configuration (for backends and submission); an empty
  // (moved-from) Kernel throws Error(invalid_argument).
  const detail::KernelState& state() const;
  std::shared_ptr<const detail::KernelState> shared_state() const;

 private:
  std::shared_ptr<detail::KernelState> state_;
};

// A plain value argument of a kernel task, copied into the task at submit.
template <class T>
struct KernelValueArg {
  static_assert(std::is_trivially_copyable_v<T>, "kernel values are copied byte-wise");
  T value;
};
template <class T>
KernelValueArg<T> value(const T& v) noexcept {
  return {v};
}

}  // namespace nerve
