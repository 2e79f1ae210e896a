// plugin_loader.cpp — finding and opening backend plugins.
#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <system_error>
#include <utility>

#include <dlfcn.h>
#include <sys/stat.h>

#include <fmt/format.h>

#include "nerve/backend_plugin.hpp"
#include "nerve/error.hpp"

#include "backend/plugin.hpp"
#include "backend/plugin_device.hpp"
#include "util/log.hpp"

namespace nerve::detail {
namespace {

constexpr std::string_view plugin_prefix = "libnerve-backend-";
constexpr std::string_view plugin_suffix = ".so";

// A file's identity: its device and inode, which every path to it shares — "dir" and "dir/", a
// symbolic link, a hard link — so that one library is one backend however it was reached.
using FileIdentity = std::pair<dev_t, ino_t>;

std::mutex plugins_mutex;
std::map<FileIdentity, std::shared_ptr<Backend>>& loaded_plugins() {
  static auto* plugins = new std::map<FileIdentity, std::shared_ptr<Backend>>();  // lives until exit
  return *plugins;
}
// Paths already warned about (a file named like a plugin that is not one, a NERVE_PLUGIN_PATH entry
// that cannot be listed): once per process, not at every context.
std::set<std::string>& skipped_paths() {
  static auto* paths = new std::set<std::string>();  // lives until exit
  return *paths;
}

[[noreturn]] void refuse(const std::filesystem::path& path, const std::string& why) {
  throw plugin_error(path, why);
}

}  // namespace

std::shared_ptr<Backend> load_plugin(const std::filesystem::path& path) {
  std::error_code error;
  std::filesystem::path canonical = std::filesystem::canonical(path, error);
  if (error) refuse(path, fmt::format("cannot be opened: {}", error.message()));
  struct stat file {};
  if (::stat(canonical.c_str(), &file) != 0 || !S_ISREG(file.st_mode)) refuse(path, "is not a regular file");
  std::lock_guard lock(plugins_mutex);
  auto& plugins = loaded_plugins();
  const FileIdentity identity{file.st_dev, file.st_ino};
  if (auto found = plugins.find(identity); found != plugins.end()) return found->second;

  void* library = ::dlopen(canonical.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* message = ::dlerror();
    refuse(path, fmt::format("dlopen failed: {}", message != nullptr ? message : "unknown error"));
  }
  auto entry_function =
      reinterpret_cast<nerve_backend_entry_function>(::dlsym(library, plugin::entry_symbol));
  if (entry_function == nullptr) {
    ::dlclose(library);
    refuse(path, fmt::format("no entry symbol '{}' (is it a nerve backend plugin? it must define "
                             "extern \"C\" const nerve::plugin::Entry* {}())",
                             plugin::entry_symbol, plugin::entry_symbol));
  }
  const plugin::Entry* entry = entry_function();
  if (entry == nullptr) {
    ::dlclose(library);
    refuse(path, fmt::format("{}() returned no entry", plugin::entry_symbol));
  }
  if (entry->abi_version != plugin::abi_version) {
    const std::uint32_t theirs = entry->abi_version;
    ::dlclose(library);
    refuse(path, fmt::format("built for backend plugin ABI version {}, but this nerve has version {}: "
                             "rebuild the plugin against this nerve's headers",
                             theirs, plugin::abi_version));
  }
  if (entry->name == nullptr || *entry->name == '\0' || entry->create == nullptr) {
    ::dlclose(library);
    refuse(path, "its entry has no name or no create function");
  }
  plugin::Backend* backend = nullptr;
  try {
    backend = entry->create();
  } catch (const std::exception& failure) {
    refuse(path, fmt::format("creating its backend failed: {}", failure.what()));
  } catch (...) {
    refuse(path, "creating its backend failed: it threw an exception that is not a std::exception");
  }
  if (backend == nullptr) refuse(path, "creating its backend returned nothing");
  // The library stays loaded for the process's life: its code runs every device it creates.
  auto wrapped = make_plugin_backend(entry->name, backend, path);
  plugins.emplace(identity, wrapped);
  return wrapped;
}

namespace {

// plugin_file(): `path` (a name the prefix and suffix match) is a library to load: a regular file, or
// a symbolic link to one. Anything else (a directory so named, a dangling link) is skipped with a
// warning: dlopen() would fail on it, and every context with it.
bool plugin_file(const std::filesystem::path& path) {
  std::error_code error;
  const std::filesystem::file_status status = std::filesystem::status(path, error);
  if (!error && std::filesystem::is_regular_file(status)) return true;
  std::lock_guard lock(plugins_mutex);
  if (skipped_paths().insert(path.string()).second) {
    const std::string what = error                                   ? error.message()
                             : std::filesystem::is_directory(status) ? "it is a directory"
                                                                     : "it is not a regular file";
    log::warn("NERVE_PLUGIN_PATH: skipping '{}', which is named like a backend plugin: {}", path.string(),
              what);
  }
  return false;
}

// unlisted_entry(): `directory`, an entry of NERVE_PLUGIN_PATH, could not be listed (`error`). Said
// with a warning, once per process: a typo in the path would otherwise look like a plugin without
// devices. Such an entry adds no plugin; the others still load.
void unlisted_entry(const std::filesystem::path& directory, const std::error_code& error) {
  std::error_code status_error;
  const std::filesystem::file_status status = std::filesystem::status(directory, status_error);
  const std::string why = !std::filesystem::exists(status) ? std::string("does not exist")
                          : !std::filesystem::is_directory(status)
                              ? std::string(
                                    "is not a directory (NERVE_PLUGIN_PATH lists directories that hold "
                                    "libnerve-backend-<name>.so files)")
                              : fmt::format("cannot be listed: {}", error.message());
  std::lock_guard lock(plugins_mutex);
  if (skipped_paths().insert(directory.string()).second)
    log::warn("NERVE_PLUGIN_PATH: '{}' {}; no plugin is loaded from it", directory.string(), why);
}

}  // namespace

std::vector<std::shared_ptr<Backend>> plugins_on_path(std::string_view path_list) {
  std::vector<std::shared_ptr<Backend>> backends;
  while (!path_list.empty()) {
    const auto colon = path_list.find(':');
    const std::string_view directory = path_list.substr(0, colon);
    path_list = colon == std::string_view::npos ? std::string_view{} : path_list.substr(colon + 1);
    if (directory.empty()) continue;
    std::error_code error;
    std::vector<std::filesystem::path> files;
    for (const auto& item : std::filesystem::directory_iterator(std::filesystem::path(directory), error)) {
      const std::string name = item.path().filename().string();
      if (name.size() > plugin_prefix.size() + plugin_suffix.size() && name.starts_with(plugin_prefix) &&
          name.ends_with(plugin_suffix)) {
        files.push_back(item.path());
      }
    }
    if (error) unlisted_entry(std::filesystem::path(directory), error);
    std::sort(files.begin(), files.end());
    for (const auto& file : files) {
      if (!plugin_file(file)) continue;
      // A directory listed twice ("dir:dir/"), or a link to a file already listed, is the same
      // backend: listed again, each of its devices would be opened twice, with a memory node each.
      std::shared_ptr<Backend> backend = load_plugin(file);
      if (std::find(backends.begin(), backends.end(), backend) == backends.end())
        backends.push_back(std::move(backend));
    }
  }
  return backends;
}

}  // namespace nerve::detail
