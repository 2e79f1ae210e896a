// opencl_program.hpp — the OpenCL implementation a Kernel carries (nerve::opencl::attach).
//
// It is plain data (no OpenCL types), so attach() works in builds without OpenCL. The OpenCL
// backend builds it per device (opencl/programs.hpp), keyed by `id` in memory and by the content
// hash on disk.
#pragma once

#include <cstdint>
#include <string>

#include "nerve/opencl.hpp"

namespace nerve::detail {

class OpenclProgram final : public KernelImplementation {
 public:
  OpenclProgram(std::string program_source, std::string entry_name, nerve::opencl::Options program_options);

  const std::uint64_t id;  // unique in the process, never reused (a cache key that cannot go stale)
  const std::string source;
  const std::string entry;
  const nerve::opencl::Options options;
};

}  // namespace nerve::detail
