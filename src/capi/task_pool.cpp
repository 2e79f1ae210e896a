// task_pool.cpp — nerve_task_pool_*: bulk launches of independent tasks, with descriptor memory.
#include <memory>
#include <mutex>

#include <fmt/format.h>

#include "nerve/nerve.h"

#include "capi/errors.hpp"
#include "capi/handles.hpp"
#include "capi/submit.hpp"

namespace nerve::capi {
namespace {

// Descriptors are plain structs of pointers and sizes; anything above this is a mistake (a count
// passed as a size), not a descriptor.
constexpr std::size_t max_descriptor_size = std::size_t{1} << 24;

nerve_task_pool* create_pool(nerve_context_t* ctx, std::size_t capacity, std::size_t descriptor_size) {
  nerve_context& context = checked_context(ctx);
  if (descriptor_size == 0 || descriptor_size > max_descriptor_size) {
    fail(ErrorCode::invalid_argument,
         fmt::format("descriptor size {} is not in [1, {}]", descriptor_size, max_descriptor_size));
  }
  auto pool = std::unique_ptr<nerve_task_pool>(
      new nerve_task_pool{&context, nullptr, DescriptorArena(capacity, descriptor_size)});
  pool->state = detail::pool_create(context.impl(), capacity);
  try {
    std::lock_guard lock(context.registry_mutex);
    context.pools.insert(pool.get());
  } catch (...) {
    detail::pool_destroy(pool->state);
    throw;
  }
  return pool.release();
}

}  // namespace
}  // namespace nerve::capi

using namespace nerve::capi;

extern "C" {

nerve_task_pool_t* nerve_task_pool_create(nerve_context_t* ctx, size_t capacity) {
  return guard_value<nerve_task_pool_t*>("nerve_task_pool_create", nullptr,
                                         [&] { return create_pool(ctx, capacity, NERVE_TASK_DESC_SIZE); });
}

nerve_task_pool_t* nerve_task_pool_create_ex(nerve_context_t* ctx, size_t capacity, size_t desc_size) {
  return guard_value<nerve_task_pool_t*>("nerve_task_pool_create_ex", nullptr,
                                         [&] { return create_pool(ctx, capacity, desc_size); });
}

void* nerve_task_pool_alloc_desc(nerve_task_pool_t* pool) {
  return guard_value<void*>("nerve_task_pool_alloc_desc", nullptr,
                            [&] { return checked_pool(pool).descriptors.allocate(); });
}

nerve_status_t nerve_task_pool_submit(nerve_task_pool_t* pool, nerve_task_t* task) {
  std::unique_ptr<nerve_task> owned(task);  // consumed whatever happens
  return guard("nerve_task_pool_submit", [&] {
    nerve_task_pool& checked = checked_pool(pool);
    checked_task(owned.get());
    submit_task(*checked.owner, std::move(owned), checked.state);
  });
}

nerve_status_t nerve_task_pool_launch(nerve_task_pool_t* pool) {
  return guard("nerve_task_pool_launch", [&] { nerve::detail::pool_launch(checked_pool(pool).state); });
}

nerve_status_t nerve_task_pool_wait_all(nerve_task_pool_t* pool) {
  nerve_task_pool* checked = nullptr;
  // Launch errors and refused waits (inside one of the pool's own kernels, ...) are the caller's, not
  // a task failure: report them as such.
  const nerve_status_t ended = guard("nerve_task_pool_wait_all", [&] {
    checked = &checked_pool(pool);
    nerve::detail::pool_wait_ended(checked->state, "waiting for the pool");
  });
  if (ended != NERVE_OK) return ended;
  try {
    nerve::detail::pool_report(checked->state);
    return NERVE_OK;
  } catch (...) {
    return record_wait_exception("nerve_task_pool_wait_all");
  }
}

void nerve_task_pool_destroy(nerve_task_pool_t* pool) {
  if (pool == nullptr) return;
  guard("nerve_task_pool_destroy", [pool] {
    {
      std::lock_guard lock(pool->owner->registry_mutex);
      pool->owner->pools.erase(pool);
    }
    destroy_pool(pool);
  });
}

}  // extern "C"
