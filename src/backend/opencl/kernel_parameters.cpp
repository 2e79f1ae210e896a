#include "backend/opencl/kernel_parameters.hpp"

#include <string_view>

#include <fmt/format.h>

namespace nerve::detail::opencl {
namespace {

std::string argument_type_name(cl_kernel kernel, cl_uint index) {
  std::size_t size = 0;
  if (clGetKernelArgInfo(kernel, index, CL_KERNEL_ARG_TYPE_NAME, 0, nullptr, &size) != CL_SUCCESS ||
      size == 0)
    return {};
  std::string name(size, '\0');
  if (clGetKernelArgInfo(kernel, index, CL_KERNEL_ARG_TYPE_NAME, size, name.data(), nullptr) != CL_SUCCESS)
    return {};
  while (!name.empty() && name.back() == '\0') name.pop_back();
  return name;
}

bool opaque_type(std::string_view name) noexcept {
  return name.starts_with("image") || name == "sampler_t" || name == "event_t";
}

}  // namespace

std::string KernelParameter::describe(unsigned index) const {
  const char* what = "parameter";
  switch (kind) {
    case Kind::pointer: what = "__global pointer parameter"; break;
    case Kind::value: what = "by-value parameter"; break;
    case Kind::local_pointer: what = "__local pointer parameter"; break;
    case Kind::object: what = "parameter"; break;
    case Kind::unknown: break;
  }
  return type_name.empty() ? fmt::format("{} {}", what, index)
                           : fmt::format("{} {} ({})", what, index, type_name);
}

std::vector<KernelParameter> kernel_parameters(cl_kernel kernel, cl_uint count) {
  std::vector<KernelParameter> parameters(count);
  for (cl_uint i = 0; i < count; ++i) {
    cl_kernel_arg_address_qualifier address = 0;
    if (clGetKernelArgInfo(kernel, i, CL_KERNEL_ARG_ADDRESS_QUALIFIER, sizeof address, &address, nullptr) !=
        CL_SUCCESS) {
      return std::vector<KernelParameter>(count);  // no argument information: nothing is checked
    }
    KernelParameter& parameter = parameters[i];
    parameter.type_name = argument_type_name(kernel, i);
    if (opaque_type(parameter.type_name)) {
      parameter.kind = KernelParameter::Kind::object;
    } else if (address == CL_KERNEL_ARG_ADDRESS_GLOBAL || address == CL_KERNEL_ARG_ADDRESS_CONSTANT) {
      parameter.kind = KernelParameter::Kind::pointer;
    } else if (address == CL_KERNEL_ARG_ADDRESS_LOCAL) {
      parameter.kind = KernelParameter::Kind::local_pointer;
    } else {
      parameter.kind = KernelParameter::Kind::value;
    }
  }
  return parameters;
}

}  // namespace nerve::detail::opencl
