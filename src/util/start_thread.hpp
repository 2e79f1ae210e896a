// start_thread.hpp — a thread nerve starts, or an Error that says which and why it could not.
//
// std::thread reports a failed pthread_create (EAGAIN: no memory for the thread's stack under
// `ulimit -v`, or the process's thread limit, `ulimit -u` / a cgroup's pids.max) as a bare
// std::system_error, "Resource temporarily unavailable", which names neither the thread nor what to
// change; the C API could only call it an internal error.
#pragma once

#include <string_view>
#include <system_error>
#include <thread>
#include <utility>

namespace nerve::detail {

// throw_thread_not_started(): Error(out_of_memory), "cannot start <what>: <reason> (<remedy>)".
[[noreturn]] void throw_thread_not_started(std::string_view what, const std::system_error& error);

// start_thread(): a thread running `body`, or throw_thread_not_started(what, ...). The caller undoes
// what it set up for the thread (the thread never ran).
template <class Body>
std::thread start_thread(std::string_view what, Body&& body) {
  try {
    return std::thread(std::forward<Body>(body));
  } catch (const std::system_error& error) {
    throw_thread_not_started(what, error);
  }
}

}  // namespace nerve::detail
