// malloc_library.hpp — jemalloc or tcmalloc, loaded at run time as a block source (memory.allocator).
//
// The library is opened with dlopen(RTLD_NOW | RTLD_LOCAL): its malloc does not replace the
// process's (everything outside the pools keeps glibc's), and nerve does not link against it, so a
// machine without it runs nerve with memory.allocator: system. Functions are resolved with dlsym on
// the library's own handle and checked with dladdr to really belong to it — Debian's libraries export
// the plain names (jemalloc: aligned_alloc/free; tcmalloc also tc_memalign/tc_free, preferred because
// unambiguous); a jemalloc built with a prefix exports je_aligned_alloc, tried first.
//
// A library is loaded once per process and never unloaded: blocks it handed out may outlive any one
// pool, and neither library supports being unloaded.
//
// jemalloc uses initial-exec TLS and glibc only has a little static TLS left for libraries opened
// after start-up, so dlopen("libjemalloc.so.2") fails with "cannot allocate memory in static TLS
// block" unless the program starts with GLIBC_TUNABLES=glibc.rtld.optional_static_tls=16384 (or has
// jemalloc preloaded). The error message says so.
//
// Thread safety: malloc_library() may be called from any thread; the returned functions are
// thread-safe (the libraries' own guarantee).
// Errors: ConfigError naming memory.allocator, the library files tried and dlerror()'s text.
#pragma once

#include <string>
#include <vector>

#include "nerve/config.hpp"

namespace nerve::memory {

struct MallocLibrary {
  void* (*aligned_alloc)(std::size_t alignment, std::size_t bytes) = nullptr;  // (alignment, bytes)
  void (*free)(void* block) = nullptr;
  // Gives the library's free memory back to the system (tcmalloc: MallocExtension_ReleaseFreeMemory;
  // jemalloc: mallctl "arena.<all>.purge"); a freed block otherwise stays in the library's free
  // lists, and the process's resident memory with it. Null if the library exports no such call.
  void (*release_free_memory_call)() = nullptr;
  int (*mallctl)(const char*, void*, std::size_t*, void*, std::size_t) = nullptr;
  std::string file;  // the library that was loaded, e.g. "libjemalloc.so.2"

  void release_free_memory() const noexcept {
    if (release_free_memory_call != nullptr) release_free_memory_call();
    // MALLCTL_ARENAS_ALL: every arena at once.
    if (mallctl != nullptr) (void)mallctl("arena.4096.purge", nullptr, nullptr, nullptr, 0);
  }
};

// malloc_library() loads (on first use) the library for `kind` (jemalloc or tcmalloc).
const MallocLibrary& malloc_library(MemoryAllocator kind);

// Test hook: set_malloc_library_files_for_testing() replaces the file names tried for `kind` until it
// is called again with an empty list (back to the defaults); meanwhile every malloc_library(kind)
// call loads from those files, whether or not the default library is already loaded.
void set_malloc_library_files_for_testing(MemoryAllocator kind, std::vector<std::string> files);

// allocator_name() is the memory.allocator word for `kind`.
const char* allocator_name(MemoryAllocator kind) noexcept;

}  // namespace nerve::memory
