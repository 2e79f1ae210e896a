#include "util/replace_file.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

namespace nerve::detail {

void replace_file(const std::filesystem::path& path, std::string_view text) {
  replace_file(path, [text](std::ostream& out) { out << text; });
}

void replace_file(const std::filesystem::path& requested, const std::function<void(std::ostream&)>& write) {
  // A link is followed: the file it names is replaced, and the link stays (renamed over, it was
  // replaced by a file of its own and its target never changed again).
  // Link by link, so that a dangling one gets its target made (weakly_canonical() gave the link back
  // when its target did not exist, and the link was replaced by a file); at most 40, as the kernel
  // follows before ELOOP.
  std::filesystem::path path = requested;
  for (int hops = 0; hops < 40; ++hops) {
    std::error_code not_a_link;
    if (!std::filesystem::is_symlink(path, not_a_link)) break;
    const std::filesystem::path target = std::filesystem::read_symlink(path, not_a_link);
    if (not_a_link) break;
    path = target.is_absolute() ? target : path.parent_path() / target;
  }
  // The file keeps its permissions (a private 0600 one stayed private no longer); a new one is
  // rw-r--r--.
  namespace fs = std::filesystem;
  std::error_code absent;
  const fs::file_status existing = fs::status(path, absent);
  const fs::perms mode = !absent && fs::exists(existing) ? existing.permissions()
                                                         : fs::perms::owner_read | fs::perms::owner_write |
                                                               fs::perms::group_read | fs::perms::others_read;
  // A name of this writer's own: two saves at once (two contexts, two processes) must not write one
  // temporary, nor remove each other's.
  std::string pattern = path.string() + ".tmp.XXXXXX";
  std::vector<char> name(pattern.begin(), pattern.end());
  name.push_back('\0');
  const int fd = mkstemp(name.data());
  if (fd < 0) throw ReplaceRefused("cannot create " + pattern + ": " + std::strerror(errno));
  close(fd);
  const std::filesystem::path temporary(name.data());
  try {
    {
      std::ofstream out(temporary, std::ios::trunc);
      write(out);
      out.flush();
      if (!out) throw std::runtime_error("cannot write " + temporary.string());
    }
    fs::permissions(temporary, mode);
    std::error_code refused;
    std::filesystem::rename(temporary, path, refused);
    if (refused) {
      throw ReplaceRefused("cannot rename " + temporary.string() + " over " + path.string() + ": " +
                           refused.message());
    }
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove(temporary, ignored);  // no half-written file left behind
    throw;
  }
}

FileLock::FileLock(const std::filesystem::path& path)
    : fd_(open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)) {
  // flock() needs no write access: another user's lock file (rw-r--r--) still locks.
  if (fd_ < 0 && (errno == EACCES || errno == EROFS)) fd_ = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) {
    failure_ = std::strerror(errno);
    return;
  }
  while (flock(fd_, LOCK_EX) != 0) {
    if (errno == EINTR) continue;
    failure_ = std::strerror(errno);
    close(fd_);
    fd_ = -1;
    return;
  }
}

FileLock::~FileLock() {
  if (fd_ >= 0) close(fd_);  // releases the lock
}

}  // namespace nerve::detail
