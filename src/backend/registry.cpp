#include "backend/registry.hpp"

namespace nerve::detail {

// No hardware backend is built yet: the CPU workers are the only device.
std::vector<std::unique_ptr<Device>> discover_devices(const Config& /*config*/, const Topology& /*topology*/,
                                                      int /*first_index*/) {
  return {};
}

}  // namespace nerve::detail
