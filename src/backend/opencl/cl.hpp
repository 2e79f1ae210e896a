// cl.hpp — the OpenCL headers as nerve uses them, and error helpers.
//
// nerve targets the OpenCL 1.2 API (every platform of the last decade has it, PoCL included) through
// the ICD loader, so one binary runs on whatever platforms a machine has installed.
#pragma once

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <CL/cl.h>
#include <CL/cl_ext.h>

#include "nerve/error.hpp"

namespace nerve::detail::opencl {

// error_name(): "CL_OUT_OF_RESOURCES" for -5; "CL error -9999" for codes it does not know.
std::string error_name(cl_int code);

// check(): throws Error(code) "<what>: CL_XXX" when `status` is not CL_SUCCESS.
void check(cl_int status, std::string_view what, ErrorCode code = ErrorCode::internal);

std::string device_string(cl_device_id device, cl_device_info what);
std::string platform_string(cl_platform_id platform, cl_platform_info what);

template <class T>
T device_value(cl_device_id device, cl_device_info what) {
  T value{};
  check(clGetDeviceInfo(device, what, sizeof(T), &value, nullptr), "clGetDeviceInfo");
  return value;
}

}  // namespace nerve::detail::opencl
