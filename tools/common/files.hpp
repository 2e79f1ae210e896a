// files.hpp — how nerve's tools (nerve-run, openclaw-benchmark) treat the files their options name:
// what is refused before anything opens it, which two names are one file, how an output is probed,
// and how an input is read.
//
// An output (a report, a hostfile) goes to a regular file, a new one or one to replace: anything else
// already at its path (a FIFO, a directory, a device such as /dev/null, a socket; through a link too)
// is refused before opening it, as opening a FIFO for writing blocks until a reader comes. An input
// (an earlier report, a trace) is read from a regular file, or from a pipe that a writer holds open
// already, as `--compare <(zcat base.json.gz)` gives: it is opened without waiting, so a FIFO nobody
// writes to reads as empty at once, and is refused as such, instead of hanging the tool. A directory,
// a device (/dev/zero would never end) or a socket is refused as an input too.
#pragma once

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <stdexcept>
#include <string>

#include <fcntl.h>
#include <unistd.h>

#include "perf/output_path.hpp"
#include "util/replace_file.hpp"

namespace nerve::tools {

// special_file_kind() names what `path` is when something other than a regular file is there ("a
// FIFO (named pipe)", "a directory", ...; links followed), or "" (a regular file, or nothing yet).
inline std::string special_file_kind(const std::string& path) {
  std::error_code ignored;
  switch (std::filesystem::status(path, ignored).type()) {
    case std::filesystem::file_type::not_found:
    case std::filesystem::file_type::none:
    case std::filesystem::file_type::regular: return {};
    case std::filesystem::file_type::directory: return "a directory";
    case std::filesystem::file_type::fifo: return "a FIFO (named pipe)";
    case std::filesystem::file_type::socket: return "a socket";
    case std::filesystem::file_type::character: return "a character device";
    case std::filesystem::file_type::block: return "a block device";
    default: return "a special file";
  }
}

// not_a_regular_file() is the error "this is a FIFO (named pipe), not a regular file" for a `path`
// where something other than a regular file is, or "".
inline std::string not_a_regular_file(const std::string& path) {
  const std::string kind = special_file_kind(path);
  return kind.empty() ? std::string() : "this is " + kind + ", not a regular file";
}

// same_file() is true when `a` and `b` name one file, however spelt (relative or absolute, with "."
// or ".."), or through a link (to a file not made yet too), or under two names (a hard link): an
// output naming an input or another output would overwrite it. "" names no file.
inline bool same_file(const std::string& a, const std::string& b) {
  if (a.empty() || b.empty()) return false;
  std::error_code error;
  return nerve::detail::absolute_path(a) == nerve::detail::absolute_path(b) ||
         std::filesystem::equivalent(a, b, error);
}

// cannot_write() is the system's reason why the output `path` cannot be written ("No such file or
// directory"), or "" when it can; check not_a_regular_file() first, as this opens it. The check opens
// the file for appending, which changes nothing, and removes it again if that created it; what a
// link leads to is removed, not the link (removing the path as given took a dangling link away and
// left its target behind, empty).
inline std::string cannot_write(const std::string& path) {
  std::error_code ignored;
  const bool existed = std::filesystem::exists(path, ignored);
  errno = 0;
  if (!std::ofstream(path, std::ios::app)) return errno != 0 ? std::strerror(errno) : "open failed";
  if (!existed) std::filesystem::remove(std::filesystem::canonical(path, ignored), ignored);
  return {};
}

// write_file() writes `text` to the output `path`, replacing what was there whole: the text goes to a
// temporary file beside it, renamed over it once all is written (util/replace_file.hpp: a link is
// followed, the file keeps its permissions). A write that fails (a full disk, the file size limit)
// leaves the previous file as it was: truncated and written in place, it was left half-written.
// Where no temporary can be made or renamed (a directory the user may not write to, holding a file
// they may), the file is written in place. It throws std::runtime_error "<path>: cannot write this
// file: <the system's reason>".
inline void write_file(const std::filesystem::path& path, const std::string& text) {
  const auto failed = [&path](int error) {
    return std::runtime_error(
        path.string() + ": cannot write this file: " + (error != 0 ? std::strerror(error) : "write failed"));
  };
  try {
    // Flushed here, so that the reason is the system's (errno) for this write, not "cannot write"
    // the temporary.
    nerve::detail::replace_file(path, [&](std::ostream& out) {
      errno = 0;
      out << text;
      out.flush();
      if (!out) throw failed(errno);
    });
    return;
  } catch (const nerve::detail::ReplaceRefused&) {  // written in place below
  } catch (const std::filesystem::filesystem_error& error) {
    throw failed(error.code().value());
  }
  errno = 0;
  std::ofstream out(path);
  out << text;
  out.close();
  if (!out) throw failed(errno);
}

// read_file() reads the whole of the input `path` (a regular file, or a pipe with a writer: see
// above); it throws std::runtime_error "<path>: <why>" when it cannot.
inline std::string read_file(const std::filesystem::path& path) {
  const auto failed = [&path](const std::string& why) {
    return std::runtime_error(path.string() + ": " + why);
  };
  const std::string kind = special_file_kind(path);
  const bool pipe = kind == "a FIFO (named pipe)";
  if (!kind.empty() && !pipe) throw failed("this is " + kind + ", not a regular file");
  // O_NONBLOCK only for the open (which would wait for a writer); the reads then wait for the data.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) throw failed(std::string("cannot read this file: ") + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  if (::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK) < 0)
    throw failed(std::string("cannot read this file: ") + std::strerror(errno));
  std::string text;
  char buffer[65536];
  for (;;) {
    const ssize_t got = ::read(fd, buffer, sizeof buffer);
    if (got == 0) break;
    if (got < 0) {
      if (errno == EINTR) continue;
      throw failed(std::string("cannot read this file: ") + std::strerror(errno));
    }
    text.append(buffer, static_cast<std::size_t>(got));
  }
  // A FIFO with no writer ends at once: what the user meant to send through it never came.
  if (pipe && text.empty())
    throw failed(
        "this is a FIFO (named pipe) and nothing was written to it (a pipe is read only "
        "while its writer holds it open, as with <(command))");
  return text;
}

}  // namespace nerve::tools
