// kernel_parameters.hpp — what each parameter of an OpenCL kernel takes, so that a call whose
// arguments do not fit is refused with a message instead of reaching the driver.
//
// nerve passes each access as a cl_mem (a __global or __constant pointer parameter) and each value
// by value (a private parameter). clSetKernelArg checks only sizes: a value of 8 bytes given for a
// pointer parameter is taken for a cl_mem handle (PoCL dereferences it: a crash), and a buffer given
// for an 8-byte scalar passes the handle as a number. The kinds come from clGetKernelArgInfo, which
// needs programs built with -cl-kernel-arg-info (programs.cpp adds it); a driver that keeps no
// argument information yields `unknown` kinds, which are not checked.
#pragma once

#include <string>
#include <vector>

#include "backend/opencl/cl.hpp"

namespace nerve::detail::opencl {

struct KernelParameter {
  enum class Kind : unsigned char {
    unknown,        // no argument information: not checked
    pointer,        // __global or __constant pointer: an access
    value,          // by value: a nerve::value
    local_pointer,  // __local pointer: nerve has no argument for it
    object,         // image, sampler, event: nerve has no argument for it
  };
  Kind kind = Kind::unknown;
  std::string type_name;  // e.g. "float*", "uint" (empty when unknown)

  // describe(): "the __global pointer parameter 2 (float*)" and the like, for messages.
  std::string describe(unsigned index) const;
};

// kernel_parameters(): the parameters of `kernel`, which has `count` of them.
std::vector<KernelParameter> kernel_parameters(cl_kernel kernel, cl_uint count);

}  // namespace nerve::detail::opencl
