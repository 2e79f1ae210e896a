// cpu.hpp — processor hints: spin loops, prefetches, the cache line size.
#pragma once

#include <cstddef>

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

// prefetch_for_write() asks for the line holding `address` in a state this core can write (x86-64
// PREFETCHW, which 64-bit processors without it execute as a no-op). A line another core modified
// last comes over in one transfer, where a read prefetch shares it and the first store must then
// take it from the other core again.
inline void prefetch_for_write(const void* address) noexcept {
#if defined(__x86_64__) || defined(__PRFCHW__)
  // An address operand, not a memory one: the line may belong to a freed object (a hint).
  asm volatile("prefetchw (%0)" : : "r"(address));
#else
  __builtin_prefetch(address, 1);
#endif
}

inline constexpr std::size_t cache_line_size = 64;

}  // namespace nerve
