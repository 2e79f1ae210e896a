// allocator_baselines.hpp — the allocators W8 compares nerve's pools with: glibc malloc (the
// process's own), jemalloc and tcmalloc, both opened with dlopen(RTLD_LOCAL) into the same process,
// so that every allocator runs on the same machine state in one run and the process's own malloc
// stays glibc's.
//
// jemalloc uses initial-exec TLS, which glibc only reserves for libraries opened after start-up when
// the process starts with GLIBC_TUNABLES=glibc.rtld.optional_static_tls=N. A driver that runs W8
// calls reexec_with_static_tls() first thing in main(): it re-executes the program with that
// tunable (once; a failure to re-execute leaves jemalloc out, with a note).
//
// Thread safety: baseline_allocators() loads once (thread-safe static); the functions it returns are
// the libraries' own, thread-safe.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace nerve::bench {

// Each allocator is called through its fastest entry points for a pair whose size the caller knows,
// as nerve's pools are (their deallocate takes the size): jemalloc's sdallocx() and tcmalloc's
// tc_free_sized() skip the size lookup free() makes. glibc 2.36 has no sized free.
struct BaselineAllocator {
  std::string name;  // "glibc malloc", "jemalloc", "tcmalloc"
  void* (*allocate)(std::size_t bytes);
  void (*release)(void* pointer);
  void (*release_sized)(void* pointer, std::size_t bytes) = nullptr;             // tcmalloc
  void (*release_flags)(void* pointer, std::size_t bytes, int flags) = nullptr;  // jemalloc

  // free() with the size, where the allocator takes it.
  void free(void* pointer, std::size_t bytes) const {
    if (release_flags != nullptr) {
      release_flags(pointer, bytes, 0);
    } else if (release_sized != nullptr) {
      release_sized(pointer, bytes);
    } else {
      release(pointer);
    }
  }
};

// baseline_allocators() lists the allocators available in this process; `missing` says which could
// not be loaded and why.
const std::vector<BaselineAllocator>& baseline_allocators(std::string* missing = nullptr);

// reexec_with_static_tls() re-executes the program (argv as given) with the static-TLS tunable if
// it is not already set; returns only when it is set or the re-execution failed.
void reexec_with_static_tls(char** argv);

}  // namespace nerve::bench
