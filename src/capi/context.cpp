// context.cpp — nerve_init*, nerve_shutdown and the context queries.
#include <memory>
#include <mutex>
#include <unordered_set>
#include <vector>

#include "nerve/nerve.h"

#include "capi/errors.hpp"
#include "capi/handles.hpp"
#include "capi/settings_from_config.hpp"
#include "runtime/context_impl.hpp"
#include "util/log.hpp"

namespace nerve::capi {
namespace {

// The contexts nerve_init*() made and nerve_shutdown() has not yet destroyed: the seed's
// openclaw_memory_compact() takes no context, so it reaches them through this list. Shutdown leaves
// the list first, under the same lock a compaction holds, so a compaction never sees a dying context.
struct LiveContexts {
  std::mutex mutex;
  std::vector<nerve_context*> contexts;
};

LiveContexts& live_contexts() {
  static LiveContexts live;
  return live;
}

nerve_context* create_context(const nerve_context_config_t& config) {
  auto ctx = std::make_unique<nerve_context>();
  ctx->runtime.emplace(settings_from_config(config));
  LiveContexts& live = live_contexts();
  std::lock_guard lock(live.mutex);
  live.contexts.push_back(ctx.get());
  return ctx.release();
}

void forget_context(nerve_context* ctx) noexcept {
  LiveContexts& live = live_contexts();
  std::lock_guard lock(live.mutex);
  std::erase(live.contexts, ctx);
}

// bury_context(): what is left of a shut-down context (its handle, a few hundred bytes, registries
// emptied) is kept until the process ends, so that a call with its handle is an error saying so
// rather than a read of freed memory (which crashed, or reported "the context is NULL"). Every table
// goes with its contents: kept, allocated after the task records, they held the records' freed heap
// from the system, ~200 KB per init/shutdown.
void bury_context(nerve_context* ctx) noexcept {
  static std::mutex mutex;
  static std::vector<std::unique_ptr<nerve_context>> tombstones;
  std::unique_ptr<nerve_context> owned(ctx);
  // Their handles are dangling from here on (documented). The names go once the runtime, whose
  // records and messages point into them, is gone.
  std::vector<std::unique_ptr<nerve_buffer>>().swap(owned->buffers);
  std::vector<std::unique_ptr<nerve_task_pool>>().swap(owned->detached_pools);
  std::unordered_set<nerve_task_pool*>().swap(owned->pools);
  if (!owned->runtime) owned->names.release();
  try {
    std::lock_guard lock(mutex);
    tombstones.push_back(std::move(owned));
  } catch (...) {  // out of memory: the handle goes, as it did before tombstones
  }
}

// Pools the program did not destroy: a launched one is waited for, an unlaunched one discarded. They
// must go before the runtime does, since their tasks live in its records.
void destroy_remaining_pools(nerve_context& ctx) {
  std::vector<nerve_task_pool*> pools;
  {
    std::lock_guard lock(ctx.registry_mutex);
    pools.assign(ctx.pools.begin(), ctx.pools.end());
    ctx.pools.clear();
  }
  if (!pools.empty())
    log::warn("nerve_shutdown: destroying {} task pool(s) the program did not destroy", pools.size());
  for (nerve_task_pool* pool : pools) {
    // A launched pool's failure nobody waited for is logged by its destruction (detail::pool_destroy).
    try {
      destroy_pool(pool);
    } catch (const std::exception& error) {
      log::error("nerve_shutdown: {}", error.what());
    }
  }
}

bool holds_pools(nerve_context& ctx) {
  std::lock_guard lock(ctx.registry_mutex);
  return !ctx.pools.empty();
}

// Mappings still open would make the runtime's final wait hang (tasks queued behind them never run).
void unmap_remaining_mappings(nerve_context& ctx) {
  std::size_t unmapped = 0;
  std::lock_guard registry(ctx.registry_mutex);
  for (auto& buffer : ctx.buffers) {
    detail::Mapping mapping{};
    {
      std::lock_guard lock(buffer->lock);
      if (buffer->mapping_state != MappingState::mapped) continue;
      mapping = buffer->mapping;
      buffer->mapping = {};
      buffer->mapping_state = MappingState::none;
    }
    detail::buffer_unmap(mapping);
    ++unmapped;
  }
  if (unmapped != 0) log::warn("nerve_shutdown: unmapping {} buffer(s) still mapped", unmapped);
}

// After the runtime is gone: drop the allocation reference of every buffer the program did not free
// (the runtime has already reported them and released their data), so that nothing outlives the
// context.
void release_unfreed_buffers(nerve_context& ctx) {
  std::lock_guard registry(ctx.registry_mutex);
  for (auto& buffer : ctx.buffers) {
    detail::BufferState* state = nullptr;
    {
      std::lock_guard lock(buffer->lock);
      if (buffer->freed) continue;
      buffer->freed = true;
      state = buffer->state;
    }
    detail::release(state);
  }
}

// drain_tasks() waits for every task, those submitted meanwhile included, while the context is still
// usable: a kernel running at the shutdown may submit follow-up work and wait for it (nerve.h), and
// std::optional::reset() marks the context gone before its destruction waits — such a kernel then
// found the context shut down (and read the flag as it was written). What it throws is left to the
// destruction that follows, which waits again and reports.
void drain_tasks(nerve_context& ctx) noexcept {
  try {
    ctx.impl()->wait_for_all_tasks();
  } catch (...) {
  }
}

// inside_task(): nerve_wait_all() would wait for its own task there, nerve_shutdown() for
// everything, or (a task of another context) for work that may wait for it.
bool inside_task(nerve_context& ctx) { return ctx.impl()->inside_a_task(); }

}  // namespace
}  // namespace nerve::capi

using namespace nerve::capi;

extern "C" {

nerve_context_t* nerve_init(void) {
  return guard_value<nerve_context_t*>("nerve_init", nullptr, [] {
    const nerve_context_config_t config = NERVE_CONTEXT_CONFIG_DEFAULT;
    return create_context(config);
  });
}

nerve_context_t* nerve_init_with_config(const nerve_context_config_t* config) {
  return guard_value<nerve_context_t*>("nerve_init_with_config", nullptr, [config] {
    const nerve_context_config_t defaults = NERVE_CONTEXT_CONFIG_DEFAULT;
    return create_context(config != nullptr ? *config : defaults);
  });
}

void nerve_shutdown(nerve_context_t* ctx) {
  if (ctx == nullptr) return;
  const nerve_status_t refused = guard("nerve_shutdown", [ctx] {
    if (!ctx->runtime)
      fail(nerve::ErrorCode::invalid_argument,
           "the context has been shut down already (a second nerve_shutdown)");
    if (inside_task(*ctx)) {
      fail(nerve::ErrorCode::invalid_argument,
           "called from inside a task (of this context or another); the context stays alive");
    }
  });
  if (refused != NERVE_OK) {
    nerve::log::error("{}", nerve_last_error());
    return;
  }
  forget_context(ctx);
  guard("nerve_shutdown", [ctx] {
    // Mappings first: a launched pool's tasks may wait for one, and destroying the pool waits for them.
    unmap_remaining_mappings(*ctx);
    // A kernel still running may create a pool (nerve.h) after the first look: look again after
    // each drain until none is left.
    do {
      destroy_remaining_pools(*ctx);
      drain_tasks(*ctx);
    } while (holds_pools(*ctx));
    ctx->runtime.reset();         // waits for every task, stops the workers, reports buffers still alive
    ctx->detached_pools.clear();  // their tasks have ended: the descriptors can go
    release_unfreed_buffers(*ctx);
  });
  bury_context(ctx);
}

int nerve_context_get_device_count(nerve_context_t* ctx) {
  return guard_value<int>("nerve_context_get_device_count", -1,
                          [ctx] { return device_count(checked_context(ctx)); });
}

int nerve_context_get_worker_count(nerve_context_t* ctx) {
  return guard_value<int>("nerve_context_get_worker_count", -1,
                          [ctx] { return static_cast<int>(checked_context(ctx).runtime->worker_count()); });
}

nerve_status_t nerve_wait_all(nerve_context_t* ctx) {
  nerve_context* checked = nullptr;
  const nerve_status_t checked_status = guard("nerve_wait_all", [&] {
    checked = &checked_context(ctx);
    if (inside_task(*checked)) {
      fail(nerve::ErrorCode::invalid_argument,
           "called from inside a task: it would wait for that task itself, or (a task of another context) "
           "for work that may wait for it (wait for a task pool instead)");
    }
    // A wait that could never end is the caller's misuse (BUFFER_MISUSE), not a task's failure,
    // whether it is seen at the start or while waiting (work submitted meanwhile).
    checked->impl()->refuse_own_mapping_wait(nerve::detail::ContextImpl::waits_for_all, "wait_all()");
    checked->impl()->wait_for_all_tasks();
  });
  if (checked_status != NERVE_OK) return checked_status;
  try {
    checked->impl()->report_root_errors();
    return NERVE_OK;
  } catch (...) {
    return record_wait_exception("nerve_wait_all");
  }
}

nerve_status_t nerve_context_dump_perf_stats(nerve_context_t* ctx, const char* path) {
  return guard("nerve_context_dump_perf_stats", [&] {
    nerve_context& context = checked_context(ctx);
    if (path == nullptr) fail(nerve::ErrorCode::invalid_argument, "the path is NULL");
    context.runtime->dump_perf_stats(path);
  });
}

size_t nerve_memory_compact(nerve_context_t* ctx) {
  return guard_value<size_t>("nerve_memory_compact", 0,
                             [ctx] { return checked_context(ctx).runtime->memory_compact(); });
}

size_t openclaw_memory_compact(void) {
  return guard_value<size_t>("openclaw_memory_compact", 0, [] {
    LiveContexts& live = live_contexts();
    std::lock_guard lock(live.mutex);
    std::size_t returned = 0;
    for (nerve_context* ctx : live.contexts) returned += ctx->runtime->memory_compact();
    return returned;
  });
}

}  // extern "C"
