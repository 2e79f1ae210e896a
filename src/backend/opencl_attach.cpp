// opencl_attach.cpp — nerve::opencl::attach(), in every build (with or without OpenCL).
#include <atomic>
#include <memory>

#include <fmt/format.h>

#include "nerve/error.hpp"
#include "nerve/opencl.hpp"

#include "backend/opencl_program.hpp"

namespace nerve {
namespace detail {
namespace {
std::atomic<std::uint64_t> program_ids{0};
}  // namespace

OpenclProgram::OpenclProgram(std::string program_source, std::string entry_name,
                             nerve::opencl::Options program_options)
    : id(program_ids.fetch_add(1, std::memory_order_relaxed) + 1),
      source(std::move(program_source)),
      entry(std::move(entry_name)),
      options(std::move(program_options)) {}

}  // namespace detail

namespace opencl {

Kernel& attach(Kernel& kernel, std::string source, std::string entry, Options options) {
  if (source.empty()) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("kernel '{}': opencl::attach needs the program's source", kernel.name()));
  }
  if (entry.empty()) {
    throw Error(
        ErrorCode::invalid_argument,
        fmt::format("kernel '{}': opencl::attach needs the name of a __kernel function", kernel.name()));
  }
  return kernel.implement(DeviceKind::opencl, std::make_shared<detail::OpenclProgram>(
                                                  std::move(source), std::move(entry), std::move(options)));
}

}  // namespace opencl
}  // namespace nerve
