// standard_output.hpp — how nerve's tools (nerve-info, nerve-run, openclaw-benchmark) end when what
// they wrote on the standard output was lost: closed early (`| head -1`), or a device that takes
// nothing (`> /dev/full`). The user did not get what they asked for, so a tool that would have exited
// 0 exits 1 instead, with a note on stderr; each said nothing and exited 0 (or 1, silently) before.
#pragma once

#include <csignal>
#include <cstdio>

namespace nerve::tools {

// stdout_lost() flushes the standard output and is true, having said on stderr "<tool>: the standard
// output was closed early: <what>" ("the report on it is incomplete"), when it did not take
// everything written to it. Call it after the last write.
inline bool stdout_lost(const char* tool, const char* what) {
  if (std::fflush(stdout) == 0 && std::ferror(stdout) == 0) return false;
  std::fprintf(stderr, "%s: the standard output was closed early: %s\n", tool, what);
  return true;
}

// ignore_sigpipe(): a reader that quits early (`nerve-info | head -1`) must not kill the tool with
// SIGPIPE before stdout_lost() can say so and set the exit status: writes to the pipe fail (EPIPE)
// instead. Called first in main(). A child the tool runs must get the default back before its exec
// (an ignored signal stays ignored across exec).
inline void ignore_sigpipe() { std::signal(SIGPIPE, SIG_IGN); }

}  // namespace nerve::tools
