// fork_generation.hpp — how many fork()s lie between the first caller and this process, so that an
// object made before a fork can tell, with one load instead of a getpid() system call, that it now
// lives in the child (where the threads it started do not exist).
#pragma once

#include <cstdint>

namespace nerve::detail {

// fork_generation(): 0 in the process that first called it (which registers a pthread_atfork child
// handler then), one more in each forked child below it.
std::uint64_t fork_generation() noexcept;

}  // namespace nerve::detail
