// registry.hpp — where a context's devices come from.
//
// discover_devices() asks every built-in backend (and, later, plugins) for the devices the
// configuration enables, numbering them from `first_index` (device i owns memory node i). Backends
// register here; the runtime calls it once, while building a context.
#pragma once

#include <memory>
#include <vector>

#include "nerve/config.hpp"
#include "nerve/topology.hpp"

#include "backend/device.hpp"

namespace nerve::detail {

std::vector<std::unique_ptr<Device>> discover_devices(const Config& config, const Topology& topology,
                                                      int first_index);

}  // namespace nerve::detail
