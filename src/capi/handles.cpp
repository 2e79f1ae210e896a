#include "capi/handles.hpp"

#include <fmt/format.h>

#include "nerve/error.hpp"

#include "memory/buffer_state.hpp"

namespace nerve::capi {

const char* NameTable::intern(const std::string& name) {
  std::lock_guard lock(mutex_);
  return names_.insert(name).first->c_str();
}

std::size_t NameTable::size() const {
  std::lock_guard lock(mutex_);
  return names_.size();
}

std::size_t NameTable::bucket_count() const {
  std::lock_guard lock(mutex_);
  return names_.bucket_count();
}

void NameTable::release() noexcept {
  std::unordered_set<std::string> released;
  std::lock_guard lock(mutex_);
  names_.swap(released);
}

nerve_context& checked_context(nerve_context* ctx) {
  if (ctx == nullptr) throw Error(ErrorCode::invalid_argument, "the context is NULL");
  if (!ctx->runtime) {
    throw Error(ErrorCode::invalid_argument, "the context has been shut down (nerve_shutdown)");
  }
  return *ctx;
}

nerve_buffer& checked_buffer(const nerve_buffer* buffer) {
  if (buffer == nullptr) throw Error(ErrorCode::invalid_argument, "the buffer is NULL");
  if (buffer->magic != buffer_magic) {
    throw Error(ErrorCode::invalid_argument, "the pointer passed as a buffer is not a nerve_buffer_t");
  }
  return const_cast<nerve_buffer&>(*buffer);
}

nerve_task& checked_task(nerve_task* task) {
  if (task == nullptr) throw Error(ErrorCode::invalid_argument, "the task is NULL");
  return *task;
}

nerve_task_pool& checked_pool(nerve_task_pool* pool) {
  if (pool == nullptr) throw Error(ErrorCode::invalid_argument, "the task pool is NULL");
  return *pool;
}

void destroy_pool(nerve_task_pool* pool) {
  std::unique_ptr<nerve_task_pool> owned(pool);
  nerve_context& owner = *pool->owner;
  {
    std::lock_guard lock(owner.registry_mutex);
    owner.detached_pools.reserve(owner.detached_pools.size() + 1);  // room before detaching
  }
  try {
    detail::pool_destroy_checked(pool->state);
  } catch (...) {
    // The runtime owns the state now and frees it after the tasks; the descriptors stay till shutdown.
    std::lock_guard lock(owner.registry_mutex);
    owner.detached_pools.push_back(std::move(owned));
    throw;
  }
}

std::string describe(const nerve_buffer& buffer) {
  return detail::describe_buffer(buffer.id, {}, buffer.bytes);  // C buffers have no name
}

int device_count(nerve_context& context) { return static_cast<int>(context.runtime->devices().size()); }

void check_device(nerve_context& context, nerve_device_t device, const char* what) {
  if (device == NERVE_DEVICE_ANY || (device >= 0 && device < device_count(context))) return;
  // Name every device of the context, so the message says which numbers exist.
  std::string devices = "0 = the CPU workers";
  const std::vector<DeviceInfo> infos = context.runtime->devices();
  for (std::size_t i = 1; i < infos.size(); ++i)
    devices += fmt::format(", {} = '{}' ({})", i, infos[i].name, infos[i].backend);
  throw Error(ErrorCode::invalid_argument,
              fmt::format("{} {} is not a device of this context (devices: {}; NERVE_DEVICE_ANY = -1 lets "
                          "nerve choose)",
                          what, device, devices));
}

}  // namespace nerve::capi
