// plugin_device.hpp — a plugin's backend and devices seen through nerve's own interfaces.
//
// PluginBackend adapts nerve::plugin::Backend to Backend. Each opened plugin::Device becomes a
// Device whose memory node forwards allocation and host<->device copies to the plugin (copies with
// another kind of device memory bounce through host memory, host_bounce.hpp), and whose submit()
// resolves the task's call and hands it to plugin::Device::launch. Completions come back on the
// plugin's threads and go straight to the runtime.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "nerve/backend_plugin.hpp"
#include "nerve/error.hpp"

#include "backend/backend.hpp"

namespace nerve::detail {

// make_plugin_backend(): wraps `backend` (owned by the plugin, alive until exit) named `name`, loaded
// from `file`. What the plugin's Backend throws, and an open() that returns no device, become
// plugin_error(file, ...): a plugin's failure is reported as its loading problems are.
std::shared_ptr<Backend> make_plugin_backend(std::string name, plugin::Backend* backend,
                                             std::filesystem::path file);

// plugin_error(): Error(invalid_config) "backend plugin '<file>': <why>", for every problem of a plugin.
Error plugin_error(const std::filesystem::path& file, std::string_view why);

}  // namespace nerve::detail
