#include "memory/pool/malloc_library.hpp"

#include <array>
#include <memory>
#include <mutex>

#include <dlfcn.h>
#include <link.h>

#include <fmt/format.h>

#include "nerve/error.hpp"

namespace nerve::memory {
namespace {

constexpr std::size_t kinds = 3;

struct Registry {
  std::mutex mutex;
  std::array<std::unique_ptr<MallocLibrary>, kinds> loaded;  // never unloaded (see the header)
  std::array<std::vector<std::string>, kinds> test_files;
  std::vector<std::unique_ptr<MallocLibrary>> loaded_for_tests;  // loads through the test hook
};

Registry& registry() {
  static Registry* instance = new Registry;  // leaked on purpose: used until the very end of the process
  return *instance;
}

std::size_t index_of(MemoryAllocator kind) { return static_cast<std::size_t>(kind); }

std::vector<std::string> default_files(MemoryAllocator kind) {
  if (kind == MemoryAllocator::jemalloc) return {"libjemalloc.so.2"};
  return {"libtcmalloc_minimal.so.4", "libtcmalloc.so.4"};
}

// belongs_to() checks that `symbol` lies in the object `handle` opened, not in a library it depends
// on (dlsym searches those too: a prefixed jemalloc would otherwise give glibc's malloc).
bool belongs_to(void* handle, void* symbol) {
  link_map* map = nullptr;
  Dl_info info{};
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0 || map == nullptr) return false;
  if (dladdr(symbol, &info) == 0) return false;
  return reinterpret_cast<std::uintptr_t>(info.dli_fbase) == static_cast<std::uintptr_t>(map->l_addr) ||
         (info.dli_fname != nullptr && map->l_name != nullptr &&
          std::string_view(info.dli_fname) == map->l_name);
}

void* find_own_symbol(void* handle, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    void* symbol = dlsym(handle, name);
    if (symbol != nullptr && belongs_to(handle, symbol)) return symbol;
  }
  return nullptr;
}

std::unique_ptr<MallocLibrary> load(MemoryAllocator kind, const std::vector<std::string>& files) {
  std::string failures;
  for (const std::string& file : files) {
    void* handle = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = dlerror();
      failures += fmt::format("{}{}", failures.empty() ? "" : "; ", why != nullptr ? why : file.c_str());
      continue;
    }
    const bool tcmalloc = kind == MemoryAllocator::tcmalloc;
    void* allocate = tcmalloc ? find_own_symbol(handle, {"tc_memalign", "aligned_alloc"})
                              : find_own_symbol(handle, {"je_aligned_alloc", "aligned_alloc"});
    void* release = tcmalloc ? find_own_symbol(handle, {"tc_free", "free"})
                             : find_own_symbol(handle, {"je_free", "free"});
    if (allocate == nullptr || release == nullptr) {
      failures +=
          fmt::format("{}{}: exports no aligned_alloc/free of its own", failures.empty() ? "" : "; ", file);
      dlclose(handle);
      continue;
    }
    auto library = std::make_unique<MallocLibrary>();
    library->aligned_alloc = reinterpret_cast<void* (*)(std::size_t, std::size_t)>(allocate);
    library->free = reinterpret_cast<void (*)(void*)>(release);
    if (tcmalloc) {
      library->release_free_memory_call =
          reinterpret_cast<void (*)()>(find_own_symbol(handle, {"MallocExtension_ReleaseFreeMemory"}));
    } else {
      library->mallctl = reinterpret_cast<int (*)(const char*, void*, std::size_t*, void*, std::size_t)>(
          find_own_symbol(handle, {"je_mallctl", "mallctl"}));
    }
    library->file = file;
    return library;
  }
  std::string hint = fmt::format("install it or set memory.allocator: system");
  if (failures.find("static TLS") != std::string::npos) {
    hint = fmt::format(
        "the library needs static TLS that glibc only reserves at start-up: start the program with "
        "GLIBC_TUNABLES=glibc.rtld.optional_static_tls=16384 or LD_PRELOAD={}, or set memory.allocator: "
        "system",
        files.front());
  }
  throw ConfigError(fmt::format("memory.allocator: {}: cannot load {}: {} ({})", allocator_name(kind),
                                fmt::join(files, " or "), failures, hint),
                    "memory.allocator");
}

}  // namespace

const char* allocator_name(MemoryAllocator kind) noexcept {
  switch (kind) {
    case MemoryAllocator::system: return "system";
    case MemoryAllocator::jemalloc: return "jemalloc";
    case MemoryAllocator::tcmalloc: return "tcmalloc";
  }
  return "?";
}

const MallocLibrary& malloc_library(MemoryAllocator kind) {
  if (kind == MemoryAllocator::system) {
    throw Error(ErrorCode::internal, "malloc_library(): the system allocator is not a loadable library");
  }
  Registry& reg = registry();
  std::lock_guard lock(reg.mutex);
  if (const auto& test_files = reg.test_files[index_of(kind)]; !test_files.empty()) {
    reg.loaded_for_tests.push_back(load(kind, test_files));
    return *reg.loaded_for_tests.back();
  }
  auto& slot = reg.loaded[index_of(kind)];
  if (!slot) slot = load(kind, default_files(kind));
  return *slot;
}

void set_malloc_library_files_for_testing(MemoryAllocator kind, std::vector<std::string> files) {
  Registry& reg = registry();
  std::lock_guard lock(reg.mutex);
  reg.test_files[index_of(kind)] = std::move(files);
}

}  // namespace nerve::memory
