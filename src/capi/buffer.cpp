// buffer.cpp — nerve_buffer_*: allocation, mapping, pointers and free, with misuse detection.
#include "nerve/buffer.hpp"

#include <memory>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "nerve/nerve.h"

#include "capi/errors.hpp"
#include "capi/handles.hpp"
#include "capi/running_kernel.hpp"
#include "memory/buffer_state.hpp"
#include "runtime/context_impl.hpp"

namespace nerve::capi {
namespace {

constexpr unsigned access_bits = MEM_FLAG_READ_WRITE;
constexpr unsigned property_bits = MEM_PROPERTY_STICKY | MEM_PROPERTY_HOST_CACHED;

// check_alive() throws BufferMisuse for a freed handle; call it with the handle's lock held.
void check_alive(const nerve_buffer& buffer, const char* operation) {
  if (buffer.freed) {
    fail(ErrorCode::buffer_misuse,
         fmt::format("{} of {}, which was already freed (use after free)", operation, describe(buffer)));
  }
}

Access default_mode(unsigned flags) {
  const unsigned bits = flags & access_bits;
  return bits == 0 ? Access::read_write : static_cast<Access>(bits);
}

nerve_buffer* allocate(nerve_context& ctx, std::size_t bytes, unsigned flags,
                       const BufferOptions& options = {}) {
  if (bytes == 0) fail(ErrorCode::invalid_argument, "a buffer needs at least one byte");
  auto handle = std::make_unique<nerve_buffer>();
  handle->owner = &ctx;
  handle->bytes = bytes;
  handle->default_mode = default_mode(flags);
  detail::BufferState* state = detail::buffer_create(ctx.impl(), bytes, 1, options);
  handle->state = state;
  handle->host = state->host;
  handle->id = detail::buffer_id(state);
  try {
    std::lock_guard lock(ctx.registry_mutex);
    ctx.buffers.push_back(std::move(handle));
    return ctx.buffers.back().get();
  } catch (...) {
    detail::release(state);
    throw;
  }
}

Access map_access(nerve_map_mode_t mode) {
  if (mode != NERVE_MAP_READ && mode != NERVE_MAP_WRITE && mode != NERVE_MAP_READ_WRITE) {
    fail(ErrorCode::invalid_argument, fmt::format("{} is not a nerve_map_mode_t", static_cast<int>(mode)));
  }
  return static_cast<Access>(mode);
}

// data_pointer() is what nerve_buffer_get_device_ptr / _get_unified_ptr return: inside a kernel, the
// data of a buffer the task declared (alive even if freed since: the task holds it); outside, the
// host data of a live buffer.
void* data_pointer(nerve_buffer& buffer, const char* operation) {
  if (const RunningKernel* kernel = RunningKernel::current()) {
    if (!kernel->declares(&buffer)) {
      fail(ErrorCode::buffer_misuse,
           fmt::format("{} of {}, which the running task '{}' did not declare (declare it with "
                       "nerve_task_set_memory_deps or nerve_task_add_access)",
                       operation, describe(buffer), kernel->name()));
    }
    return kernel->data_of(&buffer);
  }
  std::lock_guard lock(buffer.lock);
  check_alive(buffer, operation);
  return buffer.host;
}

}  // namespace
}  // namespace nerve::capi

using namespace nerve::capi;
using nerve::ErrorCode;

extern "C" {

nerve_buffer_t* nerve_buffer_alloc(nerve_context_t* ctx, size_t bytes, nerve_device_t preferred_device,
                                   unsigned properties) {
  return guard_value<nerve_buffer_t*>("nerve_buffer_alloc", nullptr, [&] {
    nerve_context& context = checked_context(ctx);
    check_device(context, preferred_device, "preferred_device");
    if ((properties & ~(access_bits | property_bits)) != 0) {
      fail(ErrorCode::invalid_argument,
           fmt::format("properties 0x{:x} has bits that are neither MEM_FLAG_* nor MEM_PROPERTY_*",
                       properties));
    }
    nerve::BufferOptions options;
    options.sticky = (properties & MEM_PROPERTY_STICKY) != 0;
    options.host_cached = (properties & MEM_PROPERTY_HOST_CACHED) != 0;
    // Data mainly used on a device lives, on the host, in the memory of the NUMA node the device is
    // attached to: its copies then cross no inter-socket link, and CPU tasks on it run nearby.
    if (preferred_device > NERVE_DEVICE_CPU) {
      const int node = context.runtime->devices().at(static_cast<std::size_t>(preferred_device)).numa_node;
      // A node the topology lacks (a plugin's guess) is no place to put data: the policy decides.
      if (node >= 0 && static_cast<std::size_t>(node) < context.runtime->topology().numa_nodes().size())
        options.numa_node = node;
    }
    return allocate(context, bytes, properties, options);
  });
}

nerve_buffer_t* nerve_buffer_alloc_unified(nerve_context_t* ctx, size_t bytes, unsigned flags) {
  return guard_value<nerve_buffer_t*>("nerve_buffer_alloc_unified", nullptr, [&] {
    nerve_context& context = checked_context(ctx);
    if ((flags & ~access_bits) != 0) {
      fail(ErrorCode::invalid_argument,
           fmt::format(
               "flags 0x{:x} has bits that are not MEM_FLAG_* (MEM_PROPERTY_* go to nerve_buffer_alloc)",
               flags));
    }
    return allocate(context, bytes, flags);
  });
}

namespace {

// wait_out_unmapping(): another thread's nerve_buffer_unmap() of the handle is under way (it never
// waits for tasks): let it end. Until the runtime has dropped that mapping it counts as held by the
// thread that made it, which a map, a wait or a pool's destruction there would be refused for.
void wait_out_unmapping(const nerve_buffer& handle, std::unique_lock<nerve::SpinLock>& lock) {
  while (handle.mapping_state == MappingState::unmapping) {
    lock.unlock();
    std::this_thread::yield();
    lock.lock();
  }
}

// Unpin: gives back a reference on a buffer's state taken to use it outside the handle's lock.
struct Unpin {
  explicit Unpin(nerve::detail::BufferState* pinned) noexcept : state(pinned) {}
  ~Unpin() { nerve::detail::release(state); }
  nerve::detail::BufferState* state;
  Unpin(const Unpin&) = delete;
  Unpin& operator=(const Unpin&) = delete;
};

// map_buffer(): nerve_buffer_map (wait) and nerve_buffer_try_map (busy instead of waiting).
void* map_buffer(const char* function, nerve_buffer_t* buffer, nerve_map_mode_t mode, bool wait) {
  return guard_value<void*>(function, nullptr, [&] {
    nerve_buffer& handle = checked_buffer(buffer);
    nerve::Access access{};
    // Inside a kernel, a map that would wait for its own task is refused before anything about the
    // handle's mapping: another thread's map pending for that very task made try_map busy (a kernel
    // retrying on busy spun for ever). The conflict lasts as long as the task runs.
    if (nerve::detail::running_task_record() != nullptr) {
      nerve::detail::BufferState* state = nullptr;
      {
        std::lock_guard lock(handle.lock);
        check_alive(handle, "map");
        access = map_access(mode);
        state = handle.state;
        nerve::detail::retain(state);  // free is not refused outside a mapping
      }
      const Unpin unpin{state};
      nerve::detail::refuse_map_behind_running_task(state, 0, handle.bytes, access);
    }
    {
      std::unique_lock lock(handle.lock);
      // Another thread's try_map only probes (it never waits for tasks): a map lets it finish rather
      // than fail because of it. Not this thread's own probe, which it runs inside of (a kernel the
      // probe ran while bringing the data back): that would wait for itself.
      // Nor fail because of another thread's unmap under way (wait_out_unmapping()).
      const std::thread::id self = std::this_thread::get_id();
      while ((wait && handle.mapping_state == MappingState::probing && handle.mapping_thread != self) ||
             handle.mapping_state == MappingState::unmapping) {
        lock.unlock();
        std::this_thread::yield();
        lock.lock();
      }
      check_alive(handle, "map");
      access = map_access(mode);  // after: a freed handle is misuse, whatever the mode
      if (handle.mapping_state == MappingState::waiting || handle.mapping_state == MappingState::probing) {
        // Nothing is mapped yet, but this handle's one mapping is being taken. try_map reports a
        // pending mapping as busy, as documented.
        const char* other =
            handle.mapping_state == MappingState::waiting ? "nerve_buffer_map" : "nerve_buffer_try_map";
        if (handle.mapping_thread == self) {
          fail(ErrorCode::buffer_misuse,
               fmt::format("map of {} inside this thread's own {} of it (one mapping per buffer at a time)",
                           describe(handle), other));
        }
        if (!wait) {
          fail(ErrorCode::busy, fmt::format("try_map of {}: another thread's {} of it is pending (nothing "
                                            "was mapped)",
                                            describe(handle), other));
        }
        fail(ErrorCode::buffer_misuse,
             fmt::format("map of {} while another thread's nerve_buffer_map of it is pending (one mapping "
                         "per buffer at a time)",
                         describe(handle)));
      }
      if (handle.mapping_state != MappingState::none) {
        fail(ErrorCode::buffer_misuse,
             fmt::format("map of {}, which is already mapped (unmap it first)", describe(handle)));
      }
      // While a map is in progress or alive, free is refused, so `state` stays valid without a pin.
      handle.mapping_state = wait ? MappingState::waiting : MappingState::probing;
      handle.mapping_thread = self;
    }
    nerve::detail::Mapping mapping{};
    try {
      mapping = nerve::detail::buffer_map(handle.state, 0, handle.bytes, access, wait);
    } catch (...) {
      std::lock_guard lock(handle.lock);
      handle.mapping_state = MappingState::none;
      throw;
    }
    std::lock_guard lock(handle.lock);
    if (mapping.record == nullptr) {
      handle.mapping_state = MappingState::none;
      fail(ErrorCode::busy, fmt::format("try_map of {}: a conflicting task or mapping is pending (nothing "
                                        "was mapped; nerve_buffer_map waits for it)",
                                        describe(handle)));
    }
    handle.mapping = mapping;
    handle.mapping_state = MappingState::mapped;
    return mapping.data;
  });
}

}  // namespace

void* nerve_buffer_map(nerve_buffer_t* buffer, nerve_map_mode_t mode) {
  return map_buffer("nerve_buffer_map", buffer, mode, true);
}

void* nerve_buffer_try_map(nerve_buffer_t* buffer, nerve_map_mode_t mode) {
  return map_buffer("nerve_buffer_try_map", buffer, mode, false);
}

nerve_status_t nerve_buffer_unmap(nerve_buffer_t* buffer) {
  return guard("nerve_buffer_unmap", [&] {
    nerve_buffer& handle = checked_buffer(buffer);
    nerve::detail::Mapping mapping{};
    {
      std::lock_guard lock(handle.lock);
      check_alive(handle, "unmap");
      if (handle.mapping_state != MappingState::mapped) {
        fail(ErrorCode::buffer_misuse, fmt::format("unmap of {}, which is not mapped", describe(handle)));
      }
      mapping = handle.mapping;
      handle.mapping = {};
      handle.mapping_state = MappingState::unmapping;
    }
    // `none` only once the runtime has ended the mapping (whether or not buffer_unmap throws).
    struct Unmapped {
      nerve_buffer& handle;
      ~Unmapped() {
        std::lock_guard lock(handle.lock);
        handle.mapping_state = MappingState::none;
      }
    } unmapped{handle};
    nerve::detail::buffer_unmap(mapping);
  });
}

void* nerve_buffer_get_device_ptr(nerve_buffer_t* buffer, nerve_device_t device) {
  return guard_value<void*>("nerve_buffer_get_device_ptr", nullptr, [&] {
    nerve_buffer& handle = checked_buffer(buffer);
    // First: a freed (or, in a kernel, undeclared) handle is misuse, whatever else is wrong.
    void* data = data_pointer(handle, "device pointer");
    check_device(*handle.owner, device, "device");
    // The data is where the task runs (inside a kernel) or on the host (outside): an address on any
    // other device does not exist for this caller, and handing out the host's would be a lie.
    const bool in_kernel = RunningKernel::current() != nullptr;
    const int here = in_kernel ? nerve::detail::running_device() : 0;
    if (device != NERVE_DEVICE_ANY && device != here) {
      fail(ErrorCode::invalid_argument,
           in_kernel
               ? fmt::format("device pointer on device {}: the running task runs on device {}, where its "
                             "data is (pass that device, or NERVE_DEVICE_ANY)",
                             device, here)
               : fmt::format("device pointer on device {} outside a kernel: only the host address "
                             "(device 0, or NERVE_DEVICE_ANY) is available there",
                             device));
    }
    return data;
  });
}

void* nerve_buffer_get_unified_ptr(nerve_buffer_t* buffer) {
  return guard_value<void*>("nerve_buffer_get_unified_ptr", nullptr,
                            [&] { return data_pointer(checked_buffer(buffer), "unified pointer"); });
}

size_t nerve_buffer_size(const nerve_buffer_t* buffer) {
  return guard_value<size_t>("nerve_buffer_size", 0, [&] {
    nerve_buffer& handle = checked_buffer(buffer);
    // Inside a kernel of a task that declared it, the buffer is the task's, freed since or not: its
    // size is there as its pointers are (data_pointer()). `bytes` never changes.
    if (const RunningKernel* kernel = RunningKernel::current();
        kernel != nullptr && kernel->declares(&handle))
      return handle.bytes;
    std::lock_guard lock(handle.lock);
    check_alive(handle, "size");
    return handle.bytes;
  });
}

nerve_status_t nerve_buffer_free(nerve_buffer_t* buffer) {
  return guard("nerve_buffer_free", [&] {
    nerve_buffer& handle = checked_buffer(buffer);
    nerve::detail::BufferState* state = nullptr;
    {
      std::unique_lock lock(handle.lock);
      if (handle.freed) fail(ErrorCode::buffer_misuse, fmt::format("double free of {}", describe(handle)));
      wait_out_unmapping(handle, lock);
      if (handle.mapping_state != MappingState::none) {
        fail(ErrorCode::buffer_misuse,
             handle.mapping_state == MappingState::mapped
                 ? fmt::format("free of {} while it is mapped (unmap it first)", describe(handle))
                 : fmt::format("free of {} while a map of it is pending (unmap it once mapped)",
                               describe(handle)));
      }
      handle.freed = true;
      state = handle.state;
    }
    // Tasks already submitted hold their own references: the data goes when the last of them ends.
    nerve::detail::buffer_free(state);
  });
}

}  // extern "C"
