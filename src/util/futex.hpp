// futex.hpp — thin wrappers over Linux futex(2) on a 32-bit atomic word.
//
// futex_wait() sleeps while *word == expected (spurious wake-ups are possible; callers re-check).
// futex_wake() wakes up to `count` threads sleeping on word. Both are process-private futexes.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace nerve {

// Returns false when the wait timed out.
bool futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t expected,
                std::chrono::nanoseconds timeout = std::chrono::nanoseconds::max()) noexcept;
void futex_wake(std::atomic<std::uint32_t>& word, int count) noexcept;

}  // namespace nerve
