#include "allocator_baselines.hpp"

#include <cstdlib>
#include <cstring>
#include <utility>

#include <dlfcn.h>
#include <unistd.h>

namespace nerve::bench {
namespace {

constexpr const char* tunable = "glibc.rtld.optional_static_tls=16384";

struct Loaded {
  std::vector<BaselineAllocator> allocators;
  std::string missing;
};

Loaded load() {
  Loaded loaded;
  loaded.allocators.push_back({"glibc malloc", &std::malloc, &std::free});
  const struct {
    const char* name;
    const char* file;
    const char* sized_free;  // its free with the size (see BaselineAllocator)
  } libraries[] = {{"jemalloc", "libjemalloc.so.2", "sdallocx"},
                   {"tcmalloc", "libtcmalloc_minimal.so.4", "tc_free_sized"}};
  for (const auto& library : libraries) {
    // Never closed: the libraries cannot be unloaded safely.
    void* handle = dlopen(library.file, RTLD_NOW | RTLD_LOCAL);
    void* allocate = handle != nullptr ? dlsym(handle, "malloc") : nullptr;
    void* release = handle != nullptr ? dlsym(handle, "free") : nullptr;
    if (allocate == nullptr || release == nullptr) {
      const char* why = dlerror();
      loaded.missing += std::string(loaded.missing.empty() ? "" : "; ") + library.name + ": " +
                        (why != nullptr ? why : "no malloc/free");
      continue;
    }
    void* sized = dlsym(handle, library.sized_free);
    if (sized == nullptr) {
      loaded.missing +=
          std::string(loaded.missing.empty() ? "" : "; ") + library.name + ": no " + library.sized_free;
      continue;
    }
    BaselineAllocator allocator{library.name, reinterpret_cast<void* (*)(std::size_t)>(allocate),
                                reinterpret_cast<void (*)(void*)>(release)};
    if (std::strcmp(library.sized_free, "sdallocx") == 0) {
      allocator.release_flags = reinterpret_cast<void (*)(void*, std::size_t, int)>(sized);
    } else {
      allocator.release_sized = reinterpret_cast<void (*)(void*, std::size_t)>(sized);
    }
    loaded.allocators.push_back(std::move(allocator));
  }
  return loaded;
}

}  // namespace

const std::vector<BaselineAllocator>& baseline_allocators(std::string* missing) {
  static const Loaded loaded = load();
  if (missing != nullptr) *missing = loaded.missing;
  return loaded.allocators;
}

void reexec_with_static_tls(char** argv) {
  const char* current = std::getenv("GLIBC_TUNABLES");
  if (current != nullptr && std::strstr(current, "optional_static_tls") != nullptr) return;
  const std::string value =
      current != nullptr && *current != '\0' ? std::string(current) + ":" + tunable : tunable;
  if (setenv("GLIBC_TUNABLES", value.c_str(), 1) != 0) return;
  execv("/proc/self/exe", argv);  // returns only on failure: run on, without jemalloc
}

}  // namespace nerve::bench
