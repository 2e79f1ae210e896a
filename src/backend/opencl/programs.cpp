#include "backend/opencl/programs.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string_view>
#include <system_error>
#include <vector>

#include <unistd.h>

#include <fmt/format.h>

#include "util/fnv1a.hpp"
#include "util/log.hpp"

namespace nerve::detail::opencl {
namespace {

// Version 2 adds the binary's checksum (a file of version 1 is stale: rebuilt and replaced).
constexpr char magic[8] = {'N', 'E', 'R', 'V', 'E', 'C', 'L', '2'};

// The file name: two independent 64-bit hashes of the key material (the material itself is stored
// in the file and compared on load, so a collision costs a rebuild, never a wrong program).
std::string file_name(const std::string& material) {
  return fmt::format("{:016x}{:016x}.bin", fnv1a(material), fnv1a(material, 0x84222325cbf29ce4ULL));
}

// The options every program is built with: the kernel's own, and argument information, which
// kernel_parameters() reads to check each call's arguments against the parameters.
std::string with_argument_info(const std::string& options) {
  return options.empty() ? std::string("-cl-kernel-arg-info") : options + " -cl-kernel-arg-info";
}

std::string build_log(cl_program program, cl_device_id device) {
  std::size_t size = 0;
  if (clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, 0, nullptr, &size) != CL_SUCCESS)
    return {};
  std::string log(size, '\0');
  if (clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, size, log.data(), nullptr) != CL_SUCCESS)
    return {};
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n' || log.back() == ' ')) log.pop_back();
  return log;
}

// argument_info_available(): the program's kernels report their parameters (kernel_parameters.hpp).
// The OpenCL spec promises that only for programs built from source: a driver may drop it from a
// binary, and then the checks of each call's arguments would silently stop.
bool argument_info_available(cl_program program) {
  cl_uint count = 0;
  if (clCreateKernelsInProgram(program, 0, nullptr, &count) != CL_SUCCESS || count == 0) return true;
  std::vector<cl_kernel> kernels(count);
  if (clCreateKernelsInProgram(program, count, kernels.data(), nullptr) != CL_SUCCESS) return true;
  bool available = true;
  for (cl_kernel kernel : kernels) {
    cl_uint arguments = 0;
    if (available &&
        clGetKernelInfo(kernel, CL_KERNEL_NUM_ARGS, sizeof arguments, &arguments, nullptr) == CL_SUCCESS &&
        arguments > 0) {
      cl_kernel_arg_address_qualifier address = 0;
      available = clGetKernelArgInfo(kernel, 0, CL_KERNEL_ARG_ADDRESS_QUALIFIER, sizeof address, &address,
                                     nullptr) == CL_SUCCESS;
    }
    clReleaseKernel(kernel);
  }
  return available;
}

void write_u64(std::ofstream& out, std::uint64_t value) {
  out.write(reinterpret_cast<const char*>(&value), 8);
}
bool read_u64(std::ifstream& in, std::uint64_t& value) {
  return static_cast<bool>(in.read(reinterpret_cast<char*>(&value), 8));
}

std::uint64_t binary_checksum(const std::vector<unsigned char>& binary) {
  return fnv1a(std::string_view(reinterpret_cast<const char*>(binary.data()), binary.size()));
}

bool is_space(char c) noexcept {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

bool is_line_end(char c) noexcept { return c == '\n' || c == '\r'; }
bool is_blank(char c) noexcept { return c == ' ' || c == '\t' || c == '\f' || c == '\v'; }
bool is_identifier_char(char c) noexcept {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

// spliced(): the source as the preprocessor's first phases see it: with `trigraphs`, the trigraphs
// of # and of the backslash replaced; each backslash before a line end (blanks between them too,
// which GCC and clang accept) removed with that line end, so that a continued line is one line.
std::string spliced(std::string_view source, bool trigraphs) {
  std::string text;
  text.reserve(source.size());
  for (std::size_t at = 0; at < source.size(); ++at) {
    if (trigraphs && source.substr(at, 3) == "?\?=") {
      text += '#';
      at += 2;
    } else if (trigraphs && source.substr(at, 3) == "?\?/") {
      text += '\\';
      at += 2;
    } else {
      text += source[at];
    }
  }
  std::string joined;
  joined.reserve(text.size());
  for (std::size_t at = 0; at < text.size(); ++at) {
    if (text[at] == '\\') {
      std::size_t end = at + 1;
      while (end < text.size() && is_blank(text[end])) ++end;
      if (end < text.size() && is_line_end(text[end])) {
        at = end + (text[end] == '\r' && end + 1 < text.size() && text[end + 1] == '\n' ? 1 : 0);
        continue;
      }
    }
    joined += text[at];
  }
  return joined;
}

// without_comments(): `text` (spliced) with each comment replaced by one space, as the preprocessor
// does before it reads directives ("# /* a line end */ include" is still a directive). String and
// character literals are skipped, so that a "/*" in one starts no comment; they end at their line's
// end at the latest, so that a quote misread (a C++ digit separator, say) cannot hide more than the
// rest of its line. C++ raw strings are not recognised: OpenCL C has none, and only one spanning
// lines with a "/*" in it could hide a directive.
std::string without_comments(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  std::size_t at = 0;
  while (at < text.size()) {
    const char c = text[at];
    if (c == '/' && at + 1 < text.size() && text[at + 1] == '/') {
      out += ' ';
      while (at < text.size() && !is_line_end(text[at])) ++at;
    } else if (c == '/' && at + 1 < text.size() && text[at + 1] == '*') {
      out += ' ';
      const std::size_t end = text.find("*/", at + 2);
      at = end == std::string::npos ? text.size() : end + 2;
    } else if (c == '"' || c == '\'') {
      out += c;
      ++at;
      while (at < text.size() && text[at] != c && !is_line_end(text[at])) {
        if (text[at] == '\\' && at + 1 < text.size() && !is_line_end(text[at + 1])) {
          out += text[at];
          ++at;
        }
        out += text[at];
        ++at;
      }
      if (at < text.size() && text[at] == c) {
        out += c;
        ++at;
      }
    } else {
      out += c;
      ++at;
    }
  }
  return out;
}

// has_file_directive(): a line of `source` whose first token is '#' or its digraph "%:", then
// (after blanks) include, include_next, import or embed — the directives that read a file — or a
// __has_include / __has_embed anywhere, whose answer depends on the file system too.
bool has_file_directive(std::string_view source, bool trigraphs) {
  const std::string text = without_comments(spliced(source, trigraphs));
  for (const std::string_view probe : {"__has_include", "__has_embed"}) {
    for (std::size_t at = text.find(probe); at != std::string::npos; at = text.find(probe, at + 1)) {
      if (at == 0 || !is_identifier_char(text[at - 1])) return true;
    }
  }
  std::size_t line = 0;
  while (line < text.size()) {
    std::size_t end = line;
    while (end < text.size() && !is_line_end(text[end])) ++end;
    const std::string_view content = std::string_view(text).substr(line, end - line);
    std::size_t at = 0;
    while (at < content.size() && is_blank(content[at])) ++at;
    std::size_t name = std::string_view::npos;
    if (content.substr(at, 1) == "#") name = at + 1;
    if (content.substr(at, 2) == "%:") name = at + 2;
    if (name != std::string_view::npos) {
      while (name < content.size() && is_blank(content[name])) ++name;
      std::size_t word_end = name;
      while (word_end < content.size() && is_identifier_char(content[word_end])) ++word_end;
      const std::string_view word = content.substr(name, word_end - name);
      if (word == "include" || word == "include_next" || word == "import" || word == "embed") return true;
    }
    line = end + 1;
  }
  return false;
}

// kernels_instead(): what the built program does hold, for a message about an entry it lacks. A
// compiler may rename a kernel whose name an OpenCL C built-in takes (PoCL: `mix` becomes `_cl_mix`),
// and the source then plainly has the function the message says is missing: that is said too.
std::string kernels_instead(cl_program program, const std::string& entry) {
  std::size_t size = 0;
  if (clGetProgramInfo(program, CL_PROGRAM_KERNEL_NAMES, 0, nullptr, &size) != CL_SUCCESS || size <= 1)
    return {};
  std::string names(size, '\0');
  if (clGetProgramInfo(program, CL_PROGRAM_KERNEL_NAMES, size, names.data(), nullptr) != CL_SUCCESS)
    return {};
  names.resize(names.find('\0') == std::string::npos ? names.size() : names.find('\0'));
  std::string renamed;
  for (std::size_t start = 0; start <= names.size();) {
    const std::size_t end = std::min(names.find(';', start), names.size());
    const std::string_view name = std::string_view(names).substr(start, end - start);
    if (name != entry && name.size() > entry.size() && name.ends_with(entry)) renamed = std::string(name);
    start = end + 1;
  }
  std::string text = fmt::format("; the program's kernels: {}", names);
  if (!renamed.empty()) {
    text += fmt::format(
        " ('{}' is also an OpenCL C built-in function's name, which the compiler renamed "
        "to '{}': give the kernel another name)",
        entry, renamed);
  }
  return text;
}

}  // namespace

std::string program_cache_material(std::string_view source, std::string_view build_options,
                                   const PlatformDevice& device) {
  // Each field is preceded by its length: joined by a separator alone, a source and options that hold
  // that separator could give two programs one key (and one binary).
  std::string material = "nerve-opencl-cache-3\n";
  for (const std::string_view field :
       {source, build_options, std::string_view(device.platform_name), std::string_view(device.name),
        std::string_view(device.driver_version)}) {
    material += fmt::format("{}:", field.size());
    material += field;
    material += '\n';
  }
  return material;
}

bool program_reads_files(std::string_view source, std::string_view build_options) {
  if (has_file_directive(source, false)) return true;
  // Trigraphs (??= is '#', ??/ a backslash) are on in some OpenCL C modes and off in others: a
  // source that has any is checked both ways, so that neither reading hides a directive.
  if (source.find("??") != std::string_view::npos && has_file_directive(source, true)) return true;
  // -I adds a directory to search; -include, -imacros, -isystem, -iquote and the like read or find
  // files too: any option token starting with "-I" or "-i".
  std::size_t at = 0;
  while (at < build_options.size()) {
    while (at < build_options.size() && is_space(build_options[at])) ++at;
    const std::size_t end = std::min(build_options.find_first_of(" \t\n\r\f\v", at), build_options.size());
    const std::string_view token = build_options.substr(at, end - at);
    if (token.starts_with("-I") || token.starts_with("-i")) return true;
    at = end;
  }
  return false;
}

ProgramCacheCounters& program_cache_counters() noexcept {
  static ProgramCacheCounters counters;
  return counters;
}

std::filesystem::path program_cache_directory() {
  if (const char* root = std::getenv("NERVE_CACHE_DIR"); root != nullptr && *root != '\0')
    return std::filesystem::path(root) / "opencl";
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0')
    return std::filesystem::path(xdg) / "nerve" / "opencl";
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0')
    return std::filesystem::path(home) / ".cache" / "nerve" / "opencl";
  return {};
}

ProgramCache::ProgramCache(const PlatformDevice& device, cl_context context, int device_index)
    : device_(device),
      context_(context),
      where_(fmt::format("device {} (OpenCL device '{}')", device_index, device.name)) {}

ProgramCache::~ProgramCache() {
  for (auto& [key, built] : by_content_) {
    for (auto& [entry, kernel] : built->kernels) clReleaseKernel(kernel);
    if (built->program != nullptr) clReleaseProgram(built->program);
  }
}

cl_kernel ProgramCache::kernel(const OpenclProgram& program, const char* kernel_name) {
  auto found = by_id_.find(program.id);
  if (found == by_id_.end()) {
    const std::string material =
        program_cache_material(program.source, program.options.build_options, device_);
    auto& built = by_content_[material];
    if (built == nullptr) {
      built = std::make_unique<Built>(build(program, material));
    } else {
      program_cache_counters().memory_hits.fetch_add(1, std::memory_order_relaxed);
    }
    Resolved resolved;
    if (!built->failure.empty()) {
      resolved.failure =
          fmt::format("kernel '{}': {}", kernel_name, built->failure);  // a program may serve several
    } else if (auto kernel = built->kernels.find(program.entry); kernel != built->kernels.end()) {
      resolved.kernel = kernel->second;
    } else {
      cl_int status = CL_SUCCESS;
      cl_kernel created = clCreateKernel(built->program, program.entry.c_str(), &status);
      if (status == CL_SUCCESS) {
        built->kernels.emplace(program.entry, created);
        resolved.kernel = created;
      } else {
        resolved.failure = fmt::format(
            "kernel '{}': the OpenCL program has no usable __kernel function '{}' on {} ({}){}", kernel_name,
            program.entry, where_, error_name(status), kernels_instead(built->program, program.entry));
      }
    }
    found = by_id_.emplace(program.id, std::move(resolved)).first;
  }
  if (!found->second.failure.empty()) throw Error(ErrorCode::task_failed, found->second.failure);
  return found->second.kernel;
}

ProgramCache::Built ProgramCache::build(const OpenclProgram& program, const std::string& material) {
  Built built;
  // A program that reads files (headers) is not cached on disk: the files are not in the key material,
  // so a binary stored before a header changed would be loaded after it. It is built from source in
  // each process (and kept in memory for the device's life, like any other).
  const bool reads_files = program_reads_files(program.source, program.options.build_options);
  if (reads_files) {
    log::debug("OpenCL program cache: the program of kernel entry '{}' includes files; not cached on disk",
               program.entry);
  }
  const std::filesystem::path directory = reads_files ? std::filesystem::path() : program_cache_directory();
  const std::filesystem::path file = directory.empty() ? directory : directory / file_name(material);
  if (!file.empty()) {
    built.program = load_binary(file, material, program.options.build_options);
    if (built.program != nullptr && !argument_info_available(built.program)) {
      log::debug(
          "OpenCL program cache: {} keeps no kernel argument information on '{}'; building from "
          "source, so that calls are checked",
          file.string(), device_.name);
      clReleaseProgram(built.program);
      built.program = nullptr;
    }
    if (built.program != nullptr) {
      program_cache_counters().binary_loads.fetch_add(1, std::memory_order_relaxed);
      return built;
    }
  }
  program_cache_counters().builds.fetch_add(1, std::memory_order_relaxed);
  const char* text = program.source.c_str();
  const std::size_t length = program.source.size();
  cl_int status = CL_SUCCESS;
  cl_program created = clCreateProgramWithSource(context_, 1, &text, &length, &status);
  if (status == CL_SUCCESS) {
    const std::string options = with_argument_info(program.options.build_options);
    status = clBuildProgram(created, 1, &device_.device, options.c_str(), nullptr, nullptr);
  }
  if (status != CL_SUCCESS) {
    program_cache_counters().failed_builds.fetch_add(1, std::memory_order_relaxed);
    const std::string log = created != nullptr ? build_log(created, device_.device) : std::string();
    built.failure = fmt::format(
        "the OpenCL program of kernel entry '{}' does not build on {}{}: {}{}{}", program.entry, where_,
        program.options.build_options.empty() ? ""
                                              : fmt::format(" (options '{}')", program.options.build_options),
        error_name(status), log.empty() ? "" : "; compiler log:\n", log);
    if (created != nullptr) clReleaseProgram(created);
    return built;
  }
  built.program = created;
  if (!file.empty()) store_binary(created, file, material);
  return built;
}

cl_program ProgramCache::load_binary(const std::filesystem::path& file, const std::string& material,
                                     const std::string& options) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return nullptr;
  char header[sizeof magic];
  std::uint64_t material_size = 0, binary_size = 0;
  if (!in.read(header, sizeof header) ||
      std::string_view(header, sizeof header) != std::string_view(magic, sizeof magic) ||
      !read_u64(in, material_size) || material_size != material.size()) {
    return nullptr;
  }
  std::string stored(material_size, '\0');
  if (!in.read(stored.data(), static_cast<std::streamsize>(material_size)) || stored != material ||
      !read_u64(in, binary_size) || binary_size == 0 || binary_size > (std::uint64_t{1} << 30)) {
    return nullptr;
  }
  // The file holds exactly the binary and its checksum after this: a size that says otherwise is
  // damage, found before a buffer of that size is allocated (up to 1 GiB) and filled.
  std::error_code error;
  const std::uint64_t file_size = std::filesystem::file_size(file, error);
  const auto header_size = static_cast<std::uint64_t>(in.tellg());
  if (error || file_size < header_size || file_size - header_size != binary_size + 8) {
    log::debug("OpenCL program cache: {} is damaged (its size does not match); rebuilding from source",
               file.string());
    return nullptr;
  }
  std::vector<unsigned char> binary(binary_size);
  std::uint64_t checksum = 0;
  if (!in.read(reinterpret_cast<char*>(binary.data()), static_cast<std::streamsize>(binary_size)) ||
      !read_u64(in, checksum))
    return nullptr;
  // Damaged bytes (a disk error, a partial copy, an edit) would go to the driver as a program, which
  // may crash on them rather than refuse them: they are checked first, and the file rebuilt.
  if (checksum != binary_checksum(binary)) {
    log::debug("OpenCL program cache: {} is damaged (its checksum does not match); rebuilding from source",
               file.string());
    return nullptr;
  }
  const unsigned char* data = binary.data();
  const std::size_t size = binary.size();
  cl_int binary_status = CL_SUCCESS;
  cl_int status = CL_SUCCESS;
  cl_program program =
      clCreateProgramWithBinary(context_, 1, &device_.device, &size, &data, &binary_status, &status);
  if (status == CL_SUCCESS && binary_status == CL_SUCCESS) {
    status =
        clBuildProgram(program, 1, &device_.device, with_argument_info(options).c_str(), nullptr, nullptr);
    if (status == CL_SUCCESS) return program;
  }
  log::debug("OpenCL program cache: {} is unusable ({}); rebuilding from source", file.string(),
             error_name(status != CL_SUCCESS ? status : binary_status));
  if (program != nullptr) clReleaseProgram(program);
  return nullptr;
}

void ProgramCache::store_binary(cl_program program, const std::filesystem::path& file,
                                const std::string& material) {
  // The binary of this device among the program's devices (a program made from source belongs to
  // every device of the shared context).
  cl_uint count = 0;
  if (clGetProgramInfo(program, CL_PROGRAM_NUM_DEVICES, sizeof count, &count, nullptr) != CL_SUCCESS ||
      count == 0)
    return;
  std::vector<cl_device_id> devices(count);
  std::vector<std::size_t> sizes(count);
  if (clGetProgramInfo(program, CL_PROGRAM_DEVICES, sizeof(cl_device_id) * count, devices.data(), nullptr) !=
          CL_SUCCESS ||
      clGetProgramInfo(program, CL_PROGRAM_BINARY_SIZES, sizeof(std::size_t) * count, sizes.data(),
                       nullptr) != CL_SUCCESS) {
    return;
  }
  std::vector<std::vector<unsigned char>> binaries(count);
  std::vector<unsigned char*> pointers(count);
  for (cl_uint i = 0; i < count; ++i) {
    binaries[i].resize(sizes[i]);
    pointers[i] = sizes[i] == 0 ? nullptr : binaries[i].data();
  }
  if (clGetProgramInfo(program, CL_PROGRAM_BINARIES, sizeof(unsigned char*) * count, pointers.data(),
                       nullptr) != CL_SUCCESS) {
    return;
  }
  std::size_t mine = count;
  for (cl_uint i = 0; i < count; ++i) {
    if (devices[i] == device_.device) mine = i;
  }
  if (mine == count || binaries[mine].empty()) return;
  std::error_code error;
  std::filesystem::create_directories(file.parent_path(), error);
  if (error) {
    log::debug("OpenCL program cache: cannot create {}: {}", file.parent_path().string(), error.message());
    return;
  }
  std::random_device random;
  const std::filesystem::path temporary =
      file.string() + fmt::format(".{}.{:x}.tmp", static_cast<long>(::getpid()), random());
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out.write(magic, sizeof magic);
    write_u64(out, material.size());
    out.write(material.data(), static_cast<std::streamsize>(material.size()));
    write_u64(out, binaries[mine].size());
    out.write(reinterpret_cast<const char*>(binaries[mine].data()),
              static_cast<std::streamsize>(binaries[mine].size()));
    write_u64(out, binary_checksum(binaries[mine]));
    if (!out) {
      std::filesystem::remove(temporary, error);
      return;
    }
  }
  std::filesystem::rename(temporary, file, error);
  if (error) {
    std::filesystem::remove(temporary, error);
    return;
  }
  program_cache_counters().disk_writes.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace nerve::detail::opencl
