// plugin.hpp — backends loaded from shared libraries (include/nerve/backend_plugin.hpp).
//
// load_plugin() dlopen()s one file, finds its entry symbol, checks the ABI version and wraps the
// plugin's Backend in a detail::Backend whose devices adapt plugin::Device to Device/MemoryNode.
// Files are loaded once per process (keyed by device and inode, which every path to a file shares:
// "dir" and "dir/", symbolic and hard links) and never unloaded: their code is behind every device
// and completion they create.
//
// Thread safety: both functions may be called from any thread.
#pragma once

#include <filesystem>
#include <memory>
#include <string_view>
#include <vector>

#include "backend/backend.hpp"

namespace nerve::detail {

// load_plugin(): the backend of plugin file `path`, the same object for every path to one file.
// Throws Error(invalid_config) naming the file: when it is not a regular file, when dlopen fails (its
// message), when the entry symbol is missing, when the ABI versions differ, when the entry is
// incomplete, or when create() throws or returns nullptr (then the next call tries again).
std::shared_ptr<Backend> load_plugin(const std::filesystem::path& path);

// plugins_on_path(): the backends of every libnerve-backend-*.so in the colon-separated directories
// of `path_list` (NERVE_PLUGIN_PATH), in directory order, files by name, each backend once (a
// directory listed twice, a link to a file listed already, add nothing). Missing directories are
// skipped, and so is anything so named that is not a regular file (or a link to one), with a
// warning once per process; a file that does not load throws as load_plugin() does.
std::vector<std::shared_ptr<Backend>> plugins_on_path(std::string_view path_list);

}  // namespace nerve::detail
