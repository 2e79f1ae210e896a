#include "util/replace_file.hpp"

#include <fstream>
#include <stdexcept>
#include <string>

namespace nerve::detail {

void replace_file(const std::filesystem::path& path, std::string_view text) {
  const auto temporary = std::filesystem::path(path.string() + ".tmp");
  try {
    {
      std::ofstream out(temporary);
      out << text;
      if (!out) throw std::runtime_error("cannot write " + temporary.string());
    }
    std::filesystem::rename(temporary, path);
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove(temporary, ignored);  // no half-written file left behind
    throw;
  }
}

}  // namespace nerve::detail
