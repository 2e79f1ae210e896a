#include "support/watchdog.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <dirent.h>
#include <execinfo.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;  // NOLINT(readability-redundant-declaration): posix_spawn passes it on

namespace nerve::testing {
namespace {

// How long before CTest's TIMEOUT the watchdog fires: a quarter of the timeout, 3 to 15 seconds, so
// that gdb has time to attach and print before CTest kills the process.
int seconds_before_timeout(int timeout) { return std::min(15, std::max(3, timeout / 4)); }

// ---- async-signal-safe output (used from the SIGUSR2 handler) ----

void write_all(const char* text, std::size_t length) {
  while (length > 0) {
    const ssize_t written = ::write(STDERR_FILENO, text, length);
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) return;
    text += written;
    length -= static_cast<std::size_t>(written);
  }
}

void write_text(const char* text) { write_all(text, std::strlen(text)); }

void write_number(long value) {
  char digits[24];
  int used = 0;
  const bool negative = value < 0;
  unsigned long rest = negative ? 0UL - static_cast<unsigned long>(value) : static_cast<unsigned long>(value);
  do {
    digits[sizeof(digits) - 1 - used++] = static_cast<char>('0' + rest % 10);
    rest /= 10;
  } while (rest != 0);
  if (negative) digits[sizeof(digits) - 1 - used++] = '-';
  write_all(digits + sizeof(digits) - used, static_cast<std::size_t>(used));
}

long current_thread_id() { return ::syscall(SYS_gettid); }

// ---- fallback: every thread prints its own stack from a signal handler ----

std::atomic<int> threads_reported{0};

// print_own_backtrace() is the SIGUSR2 handler: the interrupted thread writes its stack to stderr.
// backtrace() was called once before (see start_watchdog_from_environment), so libgcc is loaded and
// the unwinder does not allocate here.
void print_own_backtrace(int /*signal*/) {
  const int saved_errno = errno;
  constexpr int max_frames = 64;
  void* frames[max_frames];
  const int count = backtrace(frames, max_frames);
  write_text("\nThread (tid ");
  write_number(current_thread_id());
  write_text("):\n");
  backtrace_symbols_fd(frames, count, STDERR_FILENO);
  threads_reported.fetch_add(1, std::memory_order_release);
  errno = saved_errno;
}

std::vector<long> thread_ids() {
  std::vector<long> ids;
  if (DIR* tasks = opendir("/proc/self/task")) {
    while (const dirent* entry = readdir(tasks)) {
      if (entry->d_name[0] != '.') ids.push_back(std::strtol(entry->d_name, nullptr, 10));
    }
    closedir(tasks);
  }
  return ids;
}

void print_backtraces_with_signals() {
  struct sigaction action {};
  action.sa_handler = print_own_backtrace;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGUSR2, &action, nullptr);

  const long self = current_thread_id();
  for (const long tid : thread_ids()) {
    if (tid == self) {
      std::fprintf(stderr, "\nThread (tid %ld): the watchdog itself\n", tid);
      continue;
    }
    const int before = threads_reported.load(std::memory_order_acquire);
    if (::syscall(SYS_tgkill, getpid(), tid, SIGUSR2) != 0) continue;  // the thread has exited
    // One thread at a time, so that stacks do not interleave; a thread that blocks SIGUSR2 never
    // answers, so wait a bounded time.
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
    while (threads_reported.load(std::memory_order_acquire) == before &&
           std::chrono::steady_clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (threads_reported.load(std::memory_order_acquire) == before) {
      std::fprintf(stderr, "\nThread (tid %ld): did not answer SIGUSR2 (signal blocked?)\n", tid);
    }
  }
}

// ---- preferred: gdb attaches and prints every thread's stack ----

std::string find_on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::string directories = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  std::size_t start = 0;
  while (start <= directories.size()) {
    const std::size_t end = std::min(directories.find(':', start), directories.size());
    std::string candidate = directories.substr(start, end - start);
    if (candidate.empty()) candidate = ".";
    candidate += "/" + program;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return {};
}

// print_backtraces_with_gdb() runs gdb on this process with its output going to a temporary file
// (not a pipe: gdb stops every thread of ours, including the one that would drain the pipe), then
// copies the file to stderr. Returns true when gdb printed at least one stack frame.
bool print_backtraces_with_gdb(const std::string& gdb, int seconds_allowed) {
  // Yama's ptrace_scope=1 only lets a declared tracer attach; allow any (fails harmlessly without Yama).
  prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);

  char output_path[] = "/tmp/nerve-watchdog-XXXXXX";
  const int output = mkstemp(output_path);
  if (output < 0) return false;
  unlink(output_path);  // the descriptors keep the file alive

  const std::string pid = std::to_string(getpid());
  const std::string limit = std::to_string(std::max(1, seconds_allowed));
  std::vector<std::string> arguments;
  // gdb stops this whole process, so the process cannot time gdb out itself: `timeout` does (TERM
  // makes gdb detach; KILL follows if it does not).
  if (const std::string timeout = find_on_path("timeout"); !timeout.empty()) {
    arguments = {timeout, "-k", "3", limit};
  }
  arguments.insert(arguments.end(), {gdb, "-nx", "-batch", "-p", pid,                     //
                                     "-iex", "set debuginfod enabled off",                //
                                     "-ex", "set pagination off", "-ex", "info threads",  //
                                     "-ex", "thread apply all bt"});
  // A gdb killed while it holds this process stopped (a slow attach on a loaded machine) leaves it
  // stopped for good, this thread included, until CTest's timeout: a shell resumes it however gdb
  // ended. (Seen under load: the watchdog fired, then nothing until the outer timeout.)
  if (access("/bin/sh", X_OK) == 0) {
    arguments.insert(arguments.begin(), {"/bin/sh", "-c", "\"$@\"; kill -CONT " + pid, "sh"});
  }
  std::vector<char*> argv;
  for (std::string& argument : arguments) argv.push_back(argument.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, output, STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, output, STDERR_FILENO);
  pid_t child = 0;
  const int spawned = posix_spawn(&child, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (spawned != 0) {
    close(output);
    return false;
  }
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }

  std::string text;
  char chunk[4096];
  lseek(output, 0, SEEK_SET);
  for (ssize_t got = 0; (got = read(output, chunk, sizeof(chunk))) > 0;) {
    text.append(chunk, static_cast<std::size_t>(got));
  }
  close(output);
  write_all(text.data(), text.size());
  return text.find("\n#0 ") != std::string::npos;
}

void fire(int fired_after, int timeout) {
  // Flush what the test printed so far, unless a hung thread holds stdout's lock.
  if (ftrylockfile(stdout) == 0) {
    std::fflush(stdout);
    funlockfile(stdout);
  }
  std::fprintf(stderr,
               "\n*** nerve test watchdog: still running after %d s (CTest TIMEOUT %d s); "
               "backtraces of all threads follow, then abort\n",
               fired_after, timeout);

  bool printed = false;
  const char* no_gdb = std::getenv("NERVE_TEST_WATCHDOG_NO_GDB");
  if (no_gdb != nullptr && *no_gdb != '\0' && *no_gdb != '0') {
    std::fprintf(stderr, "*** (NERVE_TEST_WATCHDOG_NO_GDB is set: not using gdb)\n");
  } else if (const std::string gdb = find_on_path("gdb"); gdb.empty()) {
    std::fprintf(stderr, "*** (gdb is not on PATH)\n");
  } else {
    std::fprintf(stderr, "*** backtraces via gdb:\n");
    printed = print_backtraces_with_gdb(gdb, seconds_before_timeout(timeout) - 1);
    if (!printed) std::fprintf(stderr, "*** (gdb printed no stack)\n");
  }
  if (!printed) {
    std::fprintf(stderr, "*** backtraces via signals (each thread prints its own stack):\n");
    print_backtraces_with_signals();
  }
  std::fprintf(stderr, "\n*** nerve test watchdog: aborting the hung test\n");
  std::abort();
}

}  // namespace

void start_watchdog_from_environment() {
  static std::atomic<bool> started{false};
  const char* text = std::getenv("NERVE_TEST_TIMEOUT");
  if (text == nullptr) return;
  const long timeout = std::strtol(text, nullptr, 10);
  if (timeout <= 0 || timeout > 24L * 3600) return;
  if (started.exchange(true)) return;

  // Load the unwinder now: its first use may allocate, which a signal handler must not do.
  void* frame = nullptr;
  backtrace(&frame, 1);

  const int timeout_seconds = static_cast<int>(timeout);
  const int fire_after = std::max(1, timeout_seconds - seconds_before_timeout(timeout_seconds));
  std::thread([fire_after, timeout_seconds] {
    std::this_thread::sleep_for(std::chrono::seconds(fire_after));
    fire(fire_after, timeout_seconds);
  }).detach();
}

}  // namespace nerve::testing
