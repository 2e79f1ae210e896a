// regular_file.hpp — reading a file the runtime finds by name in a directory it shares with others
// (performance models): only a regular file is read, so that a FIFO there is no wait for a writer
// for ever, and each failure says what the file is or what the system answered.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include <sys/types.h>

namespace nerve::detail {

// file_kind() names what a file that is not a regular one is: "a directory", "a FIFO", "a socket",
// "a character device", "a block device", "a special file".
std::string_view file_kind(mode_t mode) noexcept;

// read_to_end(): what is left to read from the open descriptor `fd`; throws std::system_error with
// the system's reason when a read fails.
std::string read_to_end(int fd);

// read_regular_file(): the whole contents of `path`. Throws std::runtime_error "cannot open it: No
// such file or directory" (a dangling link too), "it is a FIFO, not a regular file" (never opened
// for a blocking read), "cannot read it: <reason>".
std::string read_regular_file(const std::filesystem::path& path);

}  // namespace nerve::detail
