// replace_file(): writes a whole file so that readers (another process loading it) see the old
// contents or the new, never a part: the text goes to a temporary of the writer's own beside it,
// which is then renamed over `path`. A link is followed (the file it names is replaced, the link
// stays), and the file keeps its permissions (a new one is rw-r--r--). On failure the temporary is
// removed and std::runtime_error / filesystem_error thrown.
// FileLock: an exclusive lock on a lock file (flock), held for its lifetime, across threads and
// processes alike: for a read-merge-write of shared files (performance models in one directory).
#pragma once

#include <filesystem>
#include <functional>
#include <ostream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace nerve::detail {

// ReplaceRefused: where `path` is, no file can be replaced whole: no temporary can be made beside it,
// or it cannot be renamed over the file. (A failure to write the temporary, a full disk, is another
// std::runtime_error: writing in place instead would fail the same way, destroying the old file.)
struct ReplaceRefused : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void replace_file(const std::filesystem::path& path, std::string_view text);
// replace_file(): the same, the text written by `write` into the temporary as it makes it; what
// `write` throws propagates (the temporary is removed).
void replace_file(const std::filesystem::path& path, const std::function<void(std::ostream&)>& write);

class FileLock {
 public:
  // Blocks until held. A lock file that cannot be opened for writing (another user's) is locked
  // through a read-only descriptor; one that cannot be opened at all is no lock: held() is false and
  // failure() says why.
  explicit FileLock(const std::filesystem::path& path);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

  bool held() const noexcept { return fd_ >= 0; }
  const std::string& failure() const noexcept { return failure_; }

 private:
  int fd_;
  std::string failure_;
};

}  // namespace nerve::detail
