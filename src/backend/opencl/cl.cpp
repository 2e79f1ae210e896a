#include "backend/opencl/cl.hpp"

#include <fmt/format.h>

namespace nerve::detail::opencl {

std::string error_name(cl_int code) {
  switch (code) {
#define NERVE_CL_ERROR(name) \
  case name: return #name;
    NERVE_CL_ERROR(CL_DEVICE_NOT_FOUND)
    NERVE_CL_ERROR(CL_DEVICE_NOT_AVAILABLE)
    NERVE_CL_ERROR(CL_COMPILER_NOT_AVAILABLE)
    NERVE_CL_ERROR(CL_MEM_OBJECT_ALLOCATION_FAILURE)
    NERVE_CL_ERROR(CL_OUT_OF_RESOURCES)
    NERVE_CL_ERROR(CL_OUT_OF_HOST_MEMORY)
    NERVE_CL_ERROR(CL_PROFILING_INFO_NOT_AVAILABLE)
    NERVE_CL_ERROR(CL_MEM_COPY_OVERLAP)
    NERVE_CL_ERROR(CL_IMAGE_FORMAT_MISMATCH)
    NERVE_CL_ERROR(CL_IMAGE_FORMAT_NOT_SUPPORTED)
    NERVE_CL_ERROR(CL_BUILD_PROGRAM_FAILURE)
    NERVE_CL_ERROR(CL_MAP_FAILURE)
    NERVE_CL_ERROR(CL_MISALIGNED_SUB_BUFFER_OFFSET)
    NERVE_CL_ERROR(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST)
    NERVE_CL_ERROR(CL_COMPILE_PROGRAM_FAILURE)
    NERVE_CL_ERROR(CL_LINKER_NOT_AVAILABLE)
    NERVE_CL_ERROR(CL_LINK_PROGRAM_FAILURE)
    NERVE_CL_ERROR(CL_DEVICE_PARTITION_FAILED)
    NERVE_CL_ERROR(CL_KERNEL_ARG_INFO_NOT_AVAILABLE)
    NERVE_CL_ERROR(CL_INVALID_VALUE)
    NERVE_CL_ERROR(CL_INVALID_DEVICE_TYPE)
    NERVE_CL_ERROR(CL_INVALID_PLATFORM)
    NERVE_CL_ERROR(CL_INVALID_DEVICE)
    NERVE_CL_ERROR(CL_INVALID_CONTEXT)
    NERVE_CL_ERROR(CL_INVALID_QUEUE_PROPERTIES)
    NERVE_CL_ERROR(CL_INVALID_COMMAND_QUEUE)
    NERVE_CL_ERROR(CL_INVALID_HOST_PTR)
    NERVE_CL_ERROR(CL_INVALID_MEM_OBJECT)
    NERVE_CL_ERROR(CL_INVALID_IMAGE_FORMAT_DESCRIPTOR)
    NERVE_CL_ERROR(CL_INVALID_IMAGE_SIZE)
    NERVE_CL_ERROR(CL_INVALID_SAMPLER)
    NERVE_CL_ERROR(CL_INVALID_BINARY)
    NERVE_CL_ERROR(CL_INVALID_BUILD_OPTIONS)
    NERVE_CL_ERROR(CL_INVALID_PROGRAM)
    NERVE_CL_ERROR(CL_INVALID_PROGRAM_EXECUTABLE)
    NERVE_CL_ERROR(CL_INVALID_KERNEL_NAME)
    NERVE_CL_ERROR(CL_INVALID_KERNEL_DEFINITION)
    NERVE_CL_ERROR(CL_INVALID_KERNEL)
    NERVE_CL_ERROR(CL_INVALID_ARG_INDEX)
    NERVE_CL_ERROR(CL_INVALID_ARG_VALUE)
    NERVE_CL_ERROR(CL_INVALID_ARG_SIZE)
    NERVE_CL_ERROR(CL_INVALID_KERNEL_ARGS)
    NERVE_CL_ERROR(CL_INVALID_WORK_DIMENSION)
    NERVE_CL_ERROR(CL_INVALID_WORK_GROUP_SIZE)
    NERVE_CL_ERROR(CL_INVALID_WORK_ITEM_SIZE)
    NERVE_CL_ERROR(CL_INVALID_GLOBAL_OFFSET)
    NERVE_CL_ERROR(CL_INVALID_EVENT_WAIT_LIST)
    NERVE_CL_ERROR(CL_INVALID_EVENT)
    NERVE_CL_ERROR(CL_INVALID_OPERATION)
    NERVE_CL_ERROR(CL_INVALID_GL_OBJECT)
    NERVE_CL_ERROR(CL_INVALID_BUFFER_SIZE)
    NERVE_CL_ERROR(CL_INVALID_MIP_LEVEL)
    NERVE_CL_ERROR(CL_INVALID_GLOBAL_WORK_SIZE)
    NERVE_CL_ERROR(CL_INVALID_PROPERTY)
    NERVE_CL_ERROR(CL_INVALID_IMAGE_DESCRIPTOR)
    NERVE_CL_ERROR(CL_INVALID_COMPILER_OPTIONS)
    NERVE_CL_ERROR(CL_INVALID_LINKER_OPTIONS)
    NERVE_CL_ERROR(CL_INVALID_DEVICE_PARTITION_COUNT)
#undef NERVE_CL_ERROR
    case -1001: return "CL_PLATFORM_NOT_FOUND_KHR";  // the ICD loader found no platform
    default: return fmt::format("CL error {}", code);
  }
}

void check(cl_int status, std::string_view what, ErrorCode code) {
  if (status != CL_SUCCESS) throw Error(code, fmt::format("{}: {}", what, error_name(status)));
}

namespace {
// info_string(): a string query (clGetDeviceInfo, clGetPlatformInfo) without its trailing NULs and spaces.
template <class Object, class Name, class Query>
std::string info_string(Query query, Object object, Name what, std::string_view query_name) {
  std::size_t size = 0;
  check(query(object, what, 0, nullptr, &size), query_name);
  std::string text(size, '\0');
  check(query(object, what, size, text.data(), nullptr), query_name);
  while (!text.empty() && (text.back() == '\0' || text.back() == ' ')) text.pop_back();
  return text;
}
}  // namespace

std::string device_string(cl_device_id device, cl_device_info what) {
  return info_string(&clGetDeviceInfo, device, what, "clGetDeviceInfo");
}

std::string platform_string(cl_platform_id platform, cl_platform_info what) {
  return info_string(&clGetPlatformInfo, platform, what, "clGetPlatformInfo");
}

}  // namespace nerve::detail::opencl
