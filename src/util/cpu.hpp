// cpu.hpp — processor hints for spin loops.
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace nerve {

// cpu_relax() tells the core we are spinning (x86 PAUSE), saving power and the sibling thread's time.
inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

inline constexpr std::size_t cache_line_size = 64;

}  // namespace nerve
