// thread_exit.hpp — an application thread's states handed back to their contexts when it exits.
//
// A thread that uses a context gets a ThreadState (ContextImpl::register_current_thread). Keyed by
// std::thread::id alone, an exited thread's state went to the next thread the system gave the same
// id, and nothing ordered the old thread's last writes to it (its task-record cache, its counters)
// before the new thread's first reads: ThreadSanitizer reported it for programs that start
// short-lived threads. Now a thread's exit hands each of its states back under the context's
// threads_mutex (ContextImpl::take_back_thread_state), and a later thread — whatever its id — takes
// a handed-back state under the same mutex, which orders the two.
//
// An exiting thread must not call into a context being destroyed: contexts enter a process-wide
// directory when made and leave it when their owner lets go (ContextImpl::release_owner, before the
// workers stop), and both the hand-back and the leaving happen under the directory's mutex. Lock
// order: the directory's mutex, then a context's threads_mutex.
//
// A thread_local destroyed after that hand-back may use a context again: that registration is handed
// back by a pthread key's destructor, which glibc runs after the C++ thread_locals'. Where a state
// cannot be noted at all (no memory, no key), it stays tied to the thread's id as before.
#pragma once

#include <cstdint>

namespace nerve::detail {

struct ContextImpl;
struct ThreadState;

void enter_context_directory(std::uint64_t context_id, ContextImpl& context) noexcept;
void leave_context_directory(std::uint64_t context_id) noexcept;

// hand_back_at_exit(): the calling thread gives `state` back to context `context_id` when it exits;
// false when it cannot (see above).
bool hand_back_at_exit(std::uint64_t context_id, ThreadState* state) noexcept;

}  // namespace nerve::detail
