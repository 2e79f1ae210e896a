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

struct BaselineAllocator {
  std::string name;  // "glibc malloc", "jemalloc", "tcmalloc"
  void* (*allocate)(std::size_t bytes);
  void (*release)(void* pointer);
};

// baseline_allocators() lists the allocators available in this process; `missing` says which could
// not be loaded and why.
const std::vector<BaselineAllocator>& baseline_allocators(std::string* missing = nullptr);

// reexec_with_static_tls() re-executes the program (argv as given) with the static-TLS tunable if
// it is not already set; returns only when it is set or the re-execution failed.
void reexec_with_static_tls(char** argv);

}  // namespace nerve::bench
