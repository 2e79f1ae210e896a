// backend.hpp — the OpenCL backend: every device of every OpenCL platform the ICD loader finds.
#pragma once

#include <memory>

#include "backend/backend.hpp"

namespace nerve::detail::opencl {

// make_backend(): the built-in OpenCL backend (registry.cpp registers it when OpenCL is built).
std::shared_ptr<Backend> make_backend();

}  // namespace nerve::detail::opencl
