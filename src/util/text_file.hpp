// text_file.hpp — write_text_file(): an output the program asked for by name (a context's or a
// distributed runtime's perf stats and trace), written in place, with the system's reason when it
// cannot be: "cannot write '/tmp'" alone left the user to guess that /tmp is a directory.
#pragma once

#include <filesystem>
#include <functional>
#include <ostream>
#include <string_view>

namespace nerve::detail {

// write_text_file(): `text` into `path`, created or truncated. Throws Error(invalid_argument)
// "cannot write <what> to '<path>': <reason>" when the file cannot be opened (a directory, a missing
// directory, no permission), "failed writing <what> to '<path>': <reason>" when writing it fails (a
// full disk).
void write_text_file(const std::filesystem::path& path, std::string_view text, std::string_view what);
// write_text_file(): the same, the text written by `write` into the open file as it makes it (a large
// document need not be held whole). What `write` throws propagates; the file then holds a part.
void write_text_file(const std::filesystem::path& path, const std::function<void(std::ostream&)>& write,
                     std::string_view what);

}  // namespace nerve::detail
