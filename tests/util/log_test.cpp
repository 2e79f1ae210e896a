// The logger's lines stay whole: longer than a pipe writes atomically, from many threads at once, and
// in a child forked while a parent thread was in the middle of one.
#include "util/log.hpp"

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

namespace nerve::log {
namespace {

// Sends this process's stderr into a pipe for the guard's lifetime; restores it on destruction.
class CapturedStderr {
 public:
  explicit CapturedStderr(int pipe_capacity) {
    EXPECT_EQ(::pipe(ends_), 0);
    ::fcntl(ends_[1], F_SETPIPE_SZ, pipe_capacity);
    saved_ = ::dup(2);
    ::dup2(ends_[1], 2);
    ::close(ends_[1]);
  }
  ~CapturedStderr() {
    restore();
    ::close(ends_[0]);
  }
  CapturedStderr(const CapturedStderr&) = delete;
  CapturedStderr& operator=(const CapturedStderr&) = delete;

  int read_end() const { return ends_[0]; }
  // Puts stderr back; the pipe's write end closes with it, so a reader sees the end.
  void restore() {
    if (saved_ < 0) return;
    ::dup2(saved_, 2);
    ::close(saved_);
    saved_ = -1;
  }

 private:
  int ends_[2] = {-1, -1};
  int saved_ = -1;
};

std::string read_all(int descriptor) {
  std::string text;
  char chunk[65536];
  for (ssize_t got; (got = ::read(descriptor, chunk, sizeof(chunk))) != 0;) {
    if (got > 0) text.append(chunk, static_cast<std::size_t>(got));
    if (got < 0 && errno != EINTR) break;
  }
  return text;
}

TEST(Log, LinesLongerThanAPipeWritesAtOnceStayWholeAcrossThreads) {
  constexpr int threads = 4;
  constexpr int lines_each = 40;
  constexpr std::size_t length = 20000;  // five times PIPE_BUF
  std::string captured;
  {
    CapturedStderr stderr_pipe(4096);
    std::thread reader([&] { captured = read_all(stderr_pipe.read_end()); });
    std::vector<std::thread> writers;
    for (int t = 0; t < threads; ++t) {
      writers.emplace_back([t] {
        const std::string message(length, static_cast<char>('a' + t));
        for (int i = 0; i < lines_each; ++i) write(Level::warn, message);
      });
    }
    for (auto& writer : writers) writer.join();
    stderr_pipe.restore();
    reader.join();
  }
  std::vector<int> seen(threads, 0);
  std::size_t start = 0;
  int lines = 0;
  for (std::size_t end; (end = captured.find('\n', start)) != std::string::npos; start = end + 1, ++lines) {
    const std::string_view line(captured.data() + start, end - start);
    const std::string_view prefix = "[nerve] warn: ";
    ASSERT_EQ(line.size(), prefix.size() + length) << "line " << lines << " was cut or mixed with another";
    ASSERT_EQ(line.substr(0, prefix.size()), prefix);
    const char letter = line[prefix.size()];
    ASSERT_TRUE(letter >= 'a' && letter < 'a' + threads);
    ASSERT_EQ(line.find_first_not_of(letter, prefix.size()), std::string_view::npos)
        << "line " << lines << " holds another thread's text";
    ++seen[letter - 'a'];
  }
  EXPECT_EQ(start, captured.size());
  for (int t = 0; t < threads; ++t) EXPECT_EQ(seen[t], lines_each) << "thread " << t;
}

// A non-blocking stderr that is full takes the rest of the line once the reader catches up (the line
// was cut at the first EAGAIN, the next one starting in its middle).
TEST(Log, ANonBlockingStderrGetsTheWholeLine) {
  std::string captured;
  {
    CapturedStderr stderr_pipe(4096);
    ::fcntl(2, F_SETFL, ::fcntl(2, F_GETFL) | O_NONBLOCK);
    std::thread reader([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the pipe fills first
      captured = read_all(stderr_pipe.read_end());
    });
    write(Level::warn, std::string(20000, 'n'));
    write(Level::warn, "next");
    ::fcntl(2, F_SETFL, ::fcntl(2, F_GETFL) & ~O_NONBLOCK);
    stderr_pipe.restore();
    reader.join();
  }
  EXPECT_EQ(captured, "[nerve] warn: " + std::string(20000, 'n') + "\n[nerve] warn: next\n");
}

TEST(Log, AChildForkedWhileAParentThreadWritesALineCanStillLog) {
  CapturedStderr stderr_pipe(4096);
  // Nobody reads the pipe yet: the writer blocks in the middle of its line, holding the process's turn.
  std::thread writer([] { write(Level::warn, std::string(100000, 'x')); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 2);
    write(Level::warn, "from the child");
    ::_exit(0);
  }
  int status = -1;
  pid_t waited = 0;
  for (int i = 0; i < 1000 && waited == 0; ++i) {
    waited = ::waitpid(child, &status, WNOHANG);
    if (waited == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (waited == 0) {
    ::kill(child, SIGKILL);
    ::waitpid(child, &status, 0);
  }
  EXPECT_EQ(waited, child) << "the child waited for a line its parent's thread was writing";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  std::thread reader([&] { read_all(stderr_pipe.read_end()); });
  writer.join();
  stderr_pipe.restore();
  reader.join();
}

}  // namespace
}  // namespace nerve::log
