#include "util/futex.hpp"

#include <cerrno>
#include <climits>

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

namespace nerve {

static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t),
              "futex words must be plain 32-bit");

bool futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t expected,
                std::chrono::nanoseconds timeout) noexcept {
  timespec relative{};
  timespec* relative_ptr = nullptr;
  if (timeout != std::chrono::nanoseconds::max()) {
    const auto ns = timeout.count() < 0 ? 0 : timeout.count();
    relative.tv_sec = static_cast<time_t>(ns / 1'000'000'000);
    relative.tv_nsec = static_cast<long>(ns % 1'000'000'000);
    relative_ptr = &relative;
  }
  const long result = ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT_PRIVATE,
                                expected, relative_ptr, nullptr, 0);
  return !(result == -1 && errno == ETIMEDOUT);
}

void futex_wake(std::atomic<std::uint32_t>& word, int count) noexcept {
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE_PRIVATE, count, nullptr, nullptr,
            0);
}

}  // namespace nerve
