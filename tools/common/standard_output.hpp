// standard_output.hpp — how nerve's tools (nerve-info, nerve-run, openclaw-benchmark) end when what
// they wrote on the standard output was lost: closed early (`| head -1`), or a device that takes
// nothing (`> /dev/full`). The user did not get what they asked for, so a tool that would have exited
// 0 exits 1 instead, with a note on stderr; each said nothing and exited 0 (or 1, silently) before.
#pragma once

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

}  // namespace nerve::tools
