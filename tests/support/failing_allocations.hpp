// failing_allocations.hpp — the global operator new of a test binary in which the calling thread's
// N-th heap allocation fails: set allocations_before_failure to N (negative: none fails, which other
// threads keep). It fails once, then counts no more: the unwinding may allocate.
//
// Include it in one source of the binary only (it defines the operators: replace_operator_new.hpp).
#pragma once

#include <cstddef>
#include <cstdlib>
#include <new>

#include "support/replace_operator_new.hpp"

namespace {

// The calling thread's allocations left before one fails; negative: none fails.
thread_local long allocations_before_failure = -1;

}  // namespace

void* nerve_test_allocate(std::size_t bytes, std::size_t alignment) {
  if (allocations_before_failure == 0) {
    allocations_before_failure = -1;
    throw std::bad_alloc();
  }
  if (allocations_before_failure > 0) --allocations_before_failure;
  return heap_allocate(bytes, alignment);
}

void nerve_test_free(void* memory) noexcept { std::free(memory); }
