#include "runtime/thread_exit.hpp"

#include <mutex>
#include <unordered_map>
#include <vector>

#include "runtime/context_impl.hpp"

namespace nerve::detail {
namespace {

struct ContextDirectory {
  std::mutex mutex;
  std::unordered_map<std::uint64_t, ContextImpl*> live;
};

ContextDirectory& directory() {
  static auto* instance =
      new ContextDirectory;  // leaked on purpose: threads may exit after static destruction
  return *instance;
}

constinit thread_local bool thread_exiting = false;

// HeldStates is the calling thread's list of states to hand back; its destructor runs at thread exit.
struct HeldStates {
  struct Held {
    std::uint64_t context_id;
    ThreadState* state;
  };
  std::vector<Held> held;

  HeldStates() = default;
  HeldStates(const HeldStates&) = delete;
  HeldStates& operator=(const HeldStates&) = delete;
  ~HeldStates() {
    thread_exiting = true;
    thread_cache = {};  // a later use from another thread-local destructor registers anew
    ContextDirectory& dir = directory();
    std::lock_guard lock(dir.mutex);
    for (const Held& entry : held) {
      if (const auto context = dir.live.find(entry.context_id); context != dir.live.end())
        context->second->take_back_thread_state(entry.state);
    }
  }

  // forget_dead_contexts(): a long-lived thread that uses many short-lived contexts keeps a short list.
  void forget_dead_contexts() {
    ContextDirectory& dir = directory();
    std::lock_guard lock(dir.mutex);
    std::erase_if(held, [&](const Held& entry) { return !dir.live.contains(entry.context_id); });
  }
};

thread_local HeldStates held_states;

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
  if (thread_exiting) return false;  // held_states is being (or has been) destroyed
  try {
    if (held_states.held.size() >= 16) held_states.forget_dead_contexts();
    held_states.held.push_back({context_id, state});
    return true;
  } catch (...) {
    return false;
  }
}

}  // namespace nerve::detail
