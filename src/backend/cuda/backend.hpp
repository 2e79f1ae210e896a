// backend.hpp — the CUDA backend: the devices a CUDA driver (cudart, or a fake in tests) sees.
//
// make_backend() wraps any Driver; make_cudart_backend() (builds with the CUDA toolkit) wraps the
// real one, which loads libcudart at run time: without a driver, a library or a device it lists no
// device and says why (unavailable_reason(), shown by nerve-info), and never fails the context.
//
// Thread safety: as Backend.
#pragma once

#include <memory>
#include <string>

#include "backend/backend.hpp"
#include "backend/cuda/driver.hpp"

namespace nerve::detail::cuda {

std::shared_ptr<Backend> make_backend(std::shared_ptr<Driver> driver, std::string name = "cuda");

#if NERVE_HAVE_CUDA
// make_cudart_driver(): the real driver (cudart_driver.cpp).
std::shared_ptr<Driver> make_cudart_driver();
#endif

}  // namespace nerve::detail::cuda
