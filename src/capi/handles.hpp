// handles.hpp — what the C API's opaque handles are: nerve_context, nerve_buffer, nerve_task and
// nerve_task_pool.
//
// Lifetime: the context owns every buffer handle it ever allocated, freed ones included, until
// nerve_shutdown(). A freed handle is a tombstone (a few words; its data is gone or going) so that a
// double free or a use after free is detected from the handle itself instead of touching freed memory.
// Task pools are registered with their context so that shutdown can destroy the ones left alive
// before the runtime goes. A nerve_task belongs to nobody until it is submitted; then the runtime owns
// it (inside the task's closure) until the task finishes.
//
// Thread safety: a buffer handle's mutable state (freed, mapping) is guarded by its spin lock, held
// only for a few instructions, never while blocking or calling into the runtime. `state`, `host`,
// `bytes`, `id`, `flags` and `owner` never change after allocation, but `state` may only be
// dereferenced while the buffer is known to be alive (checked under the lock, then pinned with
// detail::retain) because the runtime deletes it once freed and unused.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "nerve/context.hpp"
#include "nerve/detail/runtime_api.hpp"
#include "nerve/nerve.h"

#include "capi/descriptor_arena.hpp"
#include "util/spin_lock.hpp"

namespace nerve::capi {

inline constexpr std::uint32_t buffer_magic = 0x4e425546;  // "NBUF": catches non-buffer pointers

enum class MappingState : std::uint8_t {
  none,
  probing,  // a thread is in nerve_buffer_try_map() (which never waits for tasks, but may run some
            // while the host copy is brought back from a device)
  waiting,  // a thread is blocked in nerve_buffer_map()
  mapped,
  unmapping,  // a thread is in nerve_buffer_unmap(): the runtime still counts the mapping as held
};

// One declared access of an unsubmitted task.
struct TaskAccess {
  nerve_buffer* buffer;
  std::size_t offset;
  std::size_t size;
  Access mode;
};

// Interned task names: a name must outlive its task record (error messages of cancelled tasks are made
// after the closure is gone), so names live in the context until shutdown; one copy per distinct name.
class NameTable {
 public:
  const char* intern(const std::string& name);
  std::size_t size() const;
  std::size_t bucket_count() const;
  // release() frees every name and the table itself: only once no task or record can name them.
  void release() noexcept;

 private:
  mutable std::mutex mutex_;
  std::unordered_set<std::string> names_;
};

}  // namespace nerve::capi

struct nerve_buffer {
  std::uint32_t magic = nerve::capi::buffer_magic;
  nerve_context* owner = nullptr;
  nerve::detail::BufferState* state = nullptr;  // holds the allocation's reference until freed
  std::byte* host = nullptr;                    // the host data (CPU-only build: the only copy)
  std::size_t bytes = 0;
  std::uint64_t id = 0;
  nerve::Access default_mode = nerve::Access::read_write;  // for nerve_task_set_memory_deps

  mutable nerve::SpinLock lock;  // guards the fields below
  bool freed = false;
  nerve::capi::MappingState mapping_state = nerve::capi::MappingState::none;
  std::thread::id mapping_thread;  // who set mapping_state to probing or waiting
  nerve::detail::Mapping mapping{};
};

struct nerve_context {
  std::optional<nerve::Context> runtime;  // reset by nerve_shutdown() before the handles go

  std::mutex registry_mutex;
  std::vector<std::unique_ptr<nerve_buffer>> buffers;  // every handle ever allocated (tombstones kept)
  std::unordered_set<nerve_task_pool*> pools;          // pools not destroyed yet
  // Pools destroyed while their tasks could not end (nerve_task_pool_destroy): the runtime frees their
  // state after the tasks, these handles keep the tasks' descriptors until shutdown.
  std::vector<std::unique_ptr<nerve_task_pool>> detached_pools;
  nerve::capi::NameTable names;

  nerve::detail::ContextImpl* impl() const noexcept { return runtime->impl(); }
};

struct nerve_task {
  nerve_kernel_fn fn = nullptr;
  void* desc = nullptr;
  std::vector<nerve::capi::TaskAccess> accesses;
  std::string name;
  bool compute_intensive = false;
  int priority = 0;
  std::uint32_t device_kinds = NERVE_DEVICE_KIND_CPU;  // nerve_task_set_device_kinds()
  // An access declaration that failed (nerve_task_add_access, nerve_task_set_memory_deps): the task
  // would run without that data, so its submission is refused with this error, until a successful
  // nerve_task_set_memory_deps replaces every declaration.
  bool declaration_failed = false;
  std::string failed_declaration;  // "<function>: <message>"
  nerve::ErrorCode failed_declaration_code = nerve::ErrorCode::invalid_argument;
};

struct nerve_task_pool {
  nerve_context* owner = nullptr;
  nerve::detail::PoolState* state = nullptr;
  nerve::capi::DescriptorArena descriptors;
};

namespace nerve::capi {

// checked_context() / checked_buffer() / ... throw Error(invalid_argument) for NULL; checked_buffer()
// also rejects a pointer that is not a buffer handle. They do not check that a buffer is alive.
nerve_context& checked_context(nerve_context* ctx);
nerve_buffer& checked_buffer(const nerve_buffer* buffer);
nerve_task& checked_task(nerve_task* task);
nerve_task_pool& checked_pool(nerve_task_pool* pool);
// destroy_pool(): destroys a pool already out of its context's registry (waits for a launched one's
// tasks). If that wait could never end, the pool is detached (its handle kept until shutdown, for
// the tasks' descriptors) and the Error rethrown.
void destroy_pool(nerve_task_pool* pool);

// describe() names a buffer in messages as the runtime does, "buffer 3 (64 bytes)" (describe_buffer()),
// from the handle's own fields: safe on a freed handle.
std::string describe(const nerve_buffer& buffer);

// check_device() throws Error(invalid_argument) unless `device` is NERVE_DEVICE_ANY or a device of
// this build (`what` names the argument in the message).
void check_device(nerve_context& context, nerve_device_t device, const char* what);
int device_count(nerve_context& context);

}  // namespace nerve::capi
