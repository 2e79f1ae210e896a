#include "runtime/thread_exit.hpp"

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <unordered_map>
#include <vector>

#include <pthread.h>

#include "runtime/context_impl.hpp"
#include "util/fork_generation.hpp"

namespace nerve::detail {
namespace {

struct ContextDirectory {
  explicit ContextDirectory(std::uint64_t made_in) noexcept : generation(made_in) {}
  const std::uint64_t generation;  // fork_generation() of the process it belongs to
  std::mutex mutex;
  std::unordered_map<std::uint64_t, ContextImpl*> live;
};

// directory(): this process's. A forked child starts one of its own: the parent's contexts are not
// its to give thread states back to, and another thread of the parent may have held the mutex (or a
// context's threads_mutex) at the fork, for ever in the child — whose exit() then hung handing its
// main thread's state back. The old one is left as it is (leaked, as every directory is: threads may
// exit after static destruction).
ContextDirectory& directory() {
  static std::atomic<ContextDirectory*> current{new ContextDirectory(fork_generation())};
  ContextDirectory* dir = current.load(std::memory_order_acquire);
  const std::uint64_t generation = fork_generation();
  if (dir->generation == generation) return *dir;
  auto* own = new (std::nothrow) ContextDirectory(generation);
  if (own == nullptr) return *dir;  // no memory: the parent's, as it was
  if (current.compare_exchange_strong(dir, own, std::memory_order_acq_rel)) return *own;
  delete own;  // another thread of the child made it first
  return *dir;
}

struct Held {
  std::uint64_t context_id;
  ThreadState* state;
};

// hand_back(): the exiting thread's states go back to the contexts still alive.
void hand_back(const std::vector<Held>& held) noexcept {
  thread_cache = {};  // a later use from another thread-exit destructor registers anew
  ContextDirectory& dir = directory();
  std::lock_guard lock(dir.mutex);
  for (const Held& entry : held) {
    if (const auto context = dir.live.find(entry.context_id); context != dir.live.end())
      context->second->take_back_thread_state(entry.state);
  }
}

constinit thread_local bool thread_exiting = false;

// HeldStates is the calling thread's list of states to hand back; its destructor runs at thread exit.
struct HeldStates {
  std::vector<Held> held;

  HeldStates() = default;
  HeldStates(const HeldStates&) = delete;
  HeldStates& operator=(const HeldStates&) = delete;
  ~HeldStates() {
    thread_exiting = true;
    hand_back(held);
  }

  // forget_dead_contexts(): a long-lived thread that uses many short-lived contexts keeps a short list.
  void forget_dead_contexts() {
    ContextDirectory& dir = directory();
    std::lock_guard lock(dir.mutex);
    std::erase_if(held, [&](const Held& entry) { return !dir.live.contains(entry.context_id); });
  }
};

thread_local HeldStates held_states;

// A registration made after ~HeldStates ran (a thread_local destroyed later used a context) is handed
// back by a thread-specific value's destructor, which glibc runs after every C++ thread_local's (and
// again, up to PTHREAD_DESTRUCTOR_ITERATIONS times, if one of those registers once more).
void hand_back_late(void* list) noexcept {
  const std::unique_ptr<std::vector<Held>> held(static_cast<std::vector<Held>*>(list));
  hand_back(*held);
}

bool hand_back_late_at_exit(std::uint64_t context_id, ThreadState* state) noexcept {
  static const std::optional<pthread_key_t> key = []() -> std::optional<pthread_key_t> {
    pthread_key_t made{};
    if (pthread_key_create(&made, &hand_back_late) != 0) return std::nullopt;
    return made;
  }();
  if (!key) return false;
  try {
    auto* held = static_cast<std::vector<Held>*>(pthread_getspecific(*key));
    if (held == nullptr) {
      auto made = std::make_unique<std::vector<Held>>();
      if (pthread_setspecific(*key, made.get()) != 0) return false;
      held = made.release();  // hand_back_late() deletes it
    }
    held->push_back({context_id, state});
    return true;
  } catch (...) {
    return false;
  }
}

}  // namespace

void enter_context_directory(std::uint64_t context_id, ContextImpl& context) noexcept {
  ContextDirectory& dir = directory();
  std::lock_guard lock(dir.mutex);
  try {
    dir.live.emplace(context_id, &context);
  } catch (...) {  // no memory: this context's thread states stay tied to thread ids
  }
}

void leave_context_directory(std::uint64_t context_id) noexcept {
  ContextDirectory& dir = directory();
  std::lock_guard lock(dir.mutex);
  dir.live.erase(context_id);
}

bool hand_back_at_exit(std::uint64_t context_id, ThreadState* state) noexcept {
  if (thread_exiting) return hand_back_late_at_exit(context_id, state);  // held_states is gone
  try {
    if (held_states.held.size() >= 16) held_states.forget_dead_contexts();
    held_states.held.push_back({context_id, state});
    return true;
  } catch (...) {
    return false;
  }
}

}  // namespace nerve::detail
