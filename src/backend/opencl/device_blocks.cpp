#include "backend/opencl/device_blocks.hpp"

#include <fmt/format.h>

#include "nerve/error.hpp"

#include "backend/opencl/engine.hpp"

namespace nerve::detail::opencl {

void* DeviceBlockAllocator::allocate_block(std::size_t bytes, std::size_t /*alignment: offsets within a
                                                                              block are what OpenCL aligns*/) {
  cl_int status = CL_SUCCESS;
  cl_mem mem = clCreateBuffer(engine_.context(), CL_MEM_READ_WRITE, bytes, nullptr, &status);
  if (status == CL_MEM_OBJECT_ALLOCATION_FAILURE || status == CL_OUT_OF_RESOURCES ||
      status == CL_OUT_OF_HOST_MEMORY || status == CL_INVALID_BUFFER_SIZE) {
    throw Error(ErrorCode::out_of_memory, fmt::format("{}: clCreateBuffer of {} bytes failed: {}", describe(),
                                                      bytes, error_name(status)));
  }
  check(status, fmt::format("clCreateBuffer of {} bytes on {}", bytes, describe()));
  std::byte* block = nullptr;
  try {
    block = addresses_.insert(mem, bytes);
  } catch (...) {
    clReleaseMemObject(mem);
    throw;
  }
  blocks_.fetch_add(1, std::memory_order_relaxed);
  bytes_.fetch_add(bytes, std::memory_order_relaxed);
  return block;
}

void DeviceBlockAllocator::free_block(void* block, std::size_t bytes) noexcept {
  if (cl_mem mem = addresses_.erase(static_cast<const std::byte*>(block))) {
    clReleaseMemObject(mem);
    blocks_.fetch_sub(1, std::memory_order_relaxed);
    bytes_.fetch_sub(bytes, std::memory_order_relaxed);
  }
}

std::string DeviceBlockAllocator::describe() const {
  return fmt::format("memory of OpenCL device '{}'", engine_.device().name);
}

memory::NodeAllocatorStats DeviceBlockAllocator::stats() const {
  memory::NodeAllocatorStats out;
  out.blocks = blocks_.load(std::memory_order_relaxed);
  out.bytes = bytes_.load(std::memory_order_relaxed);
  return out;
}

}  // namespace nerve::detail::opencl
