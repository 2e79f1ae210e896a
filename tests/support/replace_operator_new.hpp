// replace_operator_new.hpp — the global operator new and delete of a test binary that watches its
// heap, all forms (arrays, alignment, nothrow) routed to two functions the test defines:
// nerve_test_allocate() (alignment 0: the default one; throws std::bad_alloc) and nerve_test_free().
// heap_allocate() is the allocation itself, for them to call.
//
// Include it in one source of the binary only (it defines the operators). Such a test is a binary
// of its own: the other suites keep the real allocator.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <new>

void* nerve_test_allocate(std::size_t bytes, std::size_t alignment);
void nerve_test_free(void* memory) noexcept;

// heap_allocate(): `bytes` (at least one) from malloc, or aligned_alloc for an over-aligned type.
inline void* heap_allocate(std::size_t bytes, std::size_t alignment) {
  const std::size_t size = bytes == 0 ? 1 : bytes;
  void* memory = alignment <= alignof(std::max_align_t)
                     ? std::malloc(size)
                     : std::aligned_alloc(alignment, (size + alignment - 1) / alignment * alignment);
  if (memory == nullptr) throw std::bad_alloc();
  return memory;
}

void* operator new(std::size_t bytes) { return nerve_test_allocate(bytes, 0); }
void* operator new[](std::size_t bytes) { return nerve_test_allocate(bytes, 0); }
void* operator new(std::size_t bytes, std::align_val_t alignment) {
  return nerve_test_allocate(bytes, static_cast<std::size_t>(alignment));
}
void* operator new[](std::size_t bytes, std::align_val_t alignment) {
  return nerve_test_allocate(bytes, static_cast<std::size_t>(alignment));
}
void* operator new(std::size_t bytes, const std::nothrow_t&) noexcept {
  try {
    return nerve_test_allocate(bytes, 0);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t bytes, const std::nothrow_t&) noexcept {
  try {
    return nerve_test_allocate(bytes, 0);
  } catch (...) {
    return nullptr;
  }
}
void operator delete(void* memory) noexcept { nerve_test_free(memory); }
void operator delete[](void* memory) noexcept { nerve_test_free(memory); }
void operator delete(void* memory, std::size_t) noexcept { nerve_test_free(memory); }
void operator delete[](void* memory, std::size_t) noexcept { nerve_test_free(memory); }
void operator delete(void* memory, std::align_val_t) noexcept { nerve_test_free(memory); }
void operator delete[](void* memory, std::align_val_t) noexcept { nerve_test_free(memory); }
void operator delete(void* memory, std::size_t, std::align_val_t) noexcept { nerve_test_free(memory); }
void operator delete[](void* memory, std::size_t, std::align_val_t) noexcept { nerve_test_free(memory); }
