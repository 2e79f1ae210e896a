#include "util/regular_file.hpp"

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <system_error>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace nerve::detail {

std::string_view file_kind(mode_t mode) noexcept {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "a special file";
}

std::string read_to_end(int fd) {
  std::string text;
  char buffer[1 << 16];
  while (true) {
    const ssize_t count = ::read(fd, buffer, sizeof buffer);
    if (count == 0) return text;
    if (count < 0 && errno == EINTR) continue;
    if (count < 0) throw std::system_error(errno, std::generic_category());
    text.append(buffer, static_cast<std::size_t>(count));
  }
}

std::string read_regular_file(const std::filesystem::path& path) {
  const auto failed = [](const char* doing) {
    return std::runtime_error(std::string(doing) + ": " + std::strerror(errno));
  };
  // Non-blocking: opening a FIFO for reading otherwise waits for a writer. The type is checked on
  // what was opened, so a path replaced meanwhile is no way around it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw failed("cannot open it");
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } const closer{fd};
  struct stat status {};
  if (::fstat(fd, &status) != 0) throw failed("cannot read it");
  if (!S_ISREG(status.st_mode))
    throw std::runtime_error("it is " + std::string(file_kind(status.st_mode)) + ", not a regular file");
  try {
    return read_to_end(fd);
  } catch (const std::system_error& error) {
    throw std::runtime_error("cannot read it: " + error.code().message());
  }
}

}  // namespace nerve::detail
