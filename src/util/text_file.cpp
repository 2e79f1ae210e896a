#include "util/text_file.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>

#include <fmt/format.h>

#include "nerve/error.hpp"

namespace nerve::detail {

void write_text_file(const std::filesystem::path& path, std::string_view text, std::string_view what) {
  write_text_file(
      path, [text](std::ostream& out) { out << text; }, what);
}

void write_text_file(const std::filesystem::path& path, const std::function<void(std::ostream&)>& write,
                     std::string_view what) {
  // The streams keep no reason of their own: errno, cleared first, holds the failed call's.
  const auto reason = [] { return errno != 0 ? std::strerror(errno) : "the stream failed"; };
  errno = 0;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("cannot write {} to '{}': {}", what, path.string(), reason()));
  }
  write(out);
  out.close();
  if (!out) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("failed writing {} to '{}': {}", what, path.string(), reason()));
  }
}

}  // namespace nerve::detail
