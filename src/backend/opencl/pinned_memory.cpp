#include "backend/opencl/pinned_memory.hpp"

#include <fmt/format.h>

#include "nerve/error.hpp"

#include "backend/opencl/engine.hpp"

namespace nerve::detail::opencl {

PinnedOpenclAllocator::~PinnedOpenclAllocator() {
  for (const auto& [block, entry] : blocks_) release(block, entry.first);
}

void* PinnedOpenclAllocator::allocate_block(std::size_t bytes,
                                            std::size_t /*alignment: mapped memory is page aligned*/) {
  cl_int status = CL_SUCCESS;
  cl_mem mem =
      clCreateBuffer(engine_.context(), CL_MEM_ALLOC_HOST_PTR | CL_MEM_READ_WRITE, bytes, nullptr, &status);
  void* mapped = nullptr;
  if (status == CL_SUCCESS) {
    mapped = clEnqueueMapBuffer(engine_.sync_queue(), mem, CL_TRUE, CL_MAP_READ | CL_MAP_WRITE, 0, bytes, 0,
                                nullptr, nullptr, &status);
    if (status != CL_SUCCESS) clReleaseMemObject(mem);
  }
  if (status != CL_SUCCESS || mapped == nullptr) {
    throw Error(ErrorCode::out_of_memory,
                fmt::format("{}: cannot create and map {} bytes of pinned memory: {}", describe(), bytes,
                            error_name(status)));
  }
  std::lock_guard lock(mutex_);
  blocks_.emplace(mapped, std::make_pair(mem, bytes));
  return mapped;
}

void PinnedOpenclAllocator::free_block(void* block, std::size_t /*bytes*/) noexcept {
  cl_mem mem = nullptr;
  {
    std::lock_guard lock(mutex_);
    const auto found = blocks_.find(block);
    if (found == blocks_.end()) return;
    mem = found->second.first;
    blocks_.erase(found);
  }
  release(block, mem);
}

void PinnedOpenclAllocator::release(void* block, cl_mem mem) noexcept {
  clEnqueueUnmapMemObject(engine_.sync_queue(), mem, block, 0, nullptr, nullptr);
  clFinish(engine_.sync_queue());
  clReleaseMemObject(mem);
}

std::string PinnedOpenclAllocator::describe() const {
  return fmt::format("pinned staging memory of OpenCL device '{}'", engine_.device().name);
}

memory::NodeAllocatorStats PinnedOpenclAllocator::stats() const {
  std::lock_guard lock(mutex_);
  memory::NodeAllocatorStats out;
  out.blocks = blocks_.size();
  for (const auto& [block, entry] : blocks_) out.bytes += entry.second;
  out.locked_bytes = out.bytes;  // the driver pins what it maps from CL_MEM_ALLOC_HOST_PTR buffers
  return out;
}

}  // namespace nerve::detail::opencl
