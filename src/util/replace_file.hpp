// replace_file(): writes a whole file so that readers (another process loading it) see the old
// contents or the new, never a part: the text goes to `<path>.tmp`, which is then renamed over
// `path`. On failure the temporary is removed and std::runtime_error / filesystem_error thrown.
#pragma once

#include <filesystem>
#include <string_view>

namespace nerve::detail {

void replace_file(const std::filesystem::path& path, std::string_view text);

}  // namespace nerve::detail
