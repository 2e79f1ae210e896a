// programs.hpp — OpenCL programs built once per device, cached in memory and on disk.
//
// A kernel's OpenCL implementation (OpenclProgram) is built for a device the first time a task of it
// runs there, on the device's launcher thread. The result is kept for the device's life, by program
// id (then by content, so two Kernels with one source share a build), and written to the disk cache
// as the driver's binary (clGetProgramInfo(CL_PROGRAM_BINARIES)). A later process — or context —
// loads that binary with clCreateProgramWithBinary instead of compiling. Disk entries are keyed by a
// hash of the source, the build options, the platform and device names and the driver version, and
// hold that key material in full, so a hash collision or a stale file is detected and rebuilt. Files
// a program includes are not part of that key: a program that reads files (program_reads_files) is
// never cached on disk, so a changed header is always compiled.
//
// Directory: $NERVE_CACHE_DIR/opencl, else $XDG_CACHE_HOME/nerve/opencl, else ~/.cache/nerve/opencl;
// no disk cache when none can be named or created. Files are written to a temporary name and renamed,
// so concurrent processes never read half a file. A failed build is remembered (in memory only): each
// later task of that kernel fails at once with the same message, which holds the compiler log.
//
// Thread safety: one ProgramCache per device, used by that device's launcher thread only; the
// counters and the disk are safe to share between devices and processes.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "backend/opencl/cl.hpp"
#include "backend/opencl/platform.hpp"
#include "backend/opencl_program.hpp"

namespace nerve::detail::opencl {

struct ProgramCacheCounters {
  std::atomic<std::uint64_t> builds{0};  // compilations from source (successful or not)
  std::atomic<std::uint64_t> failed_builds{0};
  std::atomic<std::uint64_t> binary_loads{0};  // programs loaded from the disk cache
  std::atomic<std::uint64_t> disk_writes{0};
  std::atomic<std::uint64_t> memory_hits{0};  // a device reused a program it built for another Kernel
};
ProgramCacheCounters& program_cache_counters() noexcept;

// program_cache_directory(): where binaries go (read from the environment at each call); empty
// when no directory can be named.
std::filesystem::path program_cache_directory();

// program_cache_material(): the key of a program built for `device`, in memory and on disk: every
// field with its length, so that no two (source, options, device) give the same material.
std::string program_cache_material(std::string_view source, std::string_view build_options,
                                   const PlatformDevice& device);

// program_reads_files(): the source has a directive that reads a file (#include, #include_next,
// #import, #embed) however it is spelled — read as the preprocessor reads lines: continued lines
// joined, comments as spaces, '#' or its digraph "%:" first on the line — or a __has_include, or
// the options name files or include directories (-I..., -include and other -i... options).
bool program_reads_files(std::string_view source, std::string_view build_options);

class ProgramCache {
 public:
  // `device_index`: the device's index in the context, for messages.
  ProgramCache(const PlatformDevice& device, cl_context context, int device_index);
  ~ProgramCache();
  ProgramCache(const ProgramCache&) = delete;
  ProgramCache& operator=(const ProgramCache&) = delete;

  // kernel(): the cl_kernel of `program`'s entry on this device. Throws Error(task_failed) when the
  // program does not build (the message holds the log) or has no such __kernel function.
  cl_kernel kernel(const OpenclProgram& program, const char* kernel_name);

 private:
  struct Built {
    cl_program program = nullptr;
    std::string failure;                                 // why it did not build ("" when it did)
    std::unordered_map<std::string, cl_kernel> kernels;  // by entry name
  };
  struct Resolved {
    cl_kernel kernel = nullptr;
    std::string failure;
  };
  Built build(const OpenclProgram& program, const std::string& material);
  cl_program load_binary(const std::filesystem::path& file, const std::string& material,
                         const std::string& options);
  void store_binary(cl_program program, const std::filesystem::path& file, const std::string& material);

  const PlatformDevice& device_;
  cl_context context_;
  std::string where_;  // "device 1 (OpenCL device 'name')", for messages
  std::unordered_map<std::uint64_t, Resolved> by_id_;
  std::unordered_map<std::string, std::unique_ptr<Built>> by_content_;
};

}  // namespace nerve::detail::opencl
