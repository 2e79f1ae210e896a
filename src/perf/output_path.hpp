// output_path.hpp — the files a context writes (perf.trace, perf.decision_log), claimed per process.
//
// Each output file belongs to one context and one key: the first context that names a file gets
// it; a later claim of the same file (another context's trace, or this context's trace and decision
// log naming one file) gets `<stem>.<context id><ext>` beside it instead, so no output overwrites or
// interleaves with another. Paths are made absolute when claimed: a relative one means the working
// directory when the context was created, wherever the program moves afterwards.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace nerve::detail {

struct ClaimedPath {
  std::filesystem::path path;  // absolute: the file to write
  std::string taken_by;        // empty when `path` is the file asked for, else who holds that one
};

// claim_output_path(): `key` ("perf.trace", ...) of context `context_id` asks for `requested`. The
// claim lasts for the process's lifetime, so a later context never takes over a finished one's file.
ClaimedPath claim_output_path(const std::filesystem::path& requested, std::uint64_t context_id,
                              std::string_view key);

// release_output_path(): gives back context `context_id`'s claim of `claimed` (a path
// claim_output_path() returned): that context never came to be.
void release_output_path(const std::filesystem::path& claimed, std::uint64_t context_id) noexcept;

// ProvisionalClaims: the claims of a context under construction. Its construction may still fail after
// them (a bad perf.decision_log, a device that does not open): they are given back then (the
// destructor), so that the next context gets the files asked for instead of `<stem>.<id><ext>`
// beside them, "taken" by a context that never existed. keep() once the context exists.
class ProvisionalClaims {
 public:
  explicit ProvisionalClaims(std::uint64_t context_id) noexcept : context_id_(context_id) {}
  ProvisionalClaims(const ProvisionalClaims&) = delete;
  ProvisionalClaims& operator=(const ProvisionalClaims&) = delete;
  ~ProvisionalClaims();
  ClaimedPath claim(const std::filesystem::path& requested, std::string_view key);
  void keep() noexcept { claimed_.clear(); }

 private:
  std::uint64_t context_id_;
  std::vector<std::filesystem::path> claimed_;
};

// refuse_unwritable_kind(): ConfigError(key) when `path` exists as something a file cannot be
// written to at a later time: a FIFO (opening it to check it would block until a reader came, and
// give that reader an empty stream, with the real output waiting for the next) or a socket. A
// device such as /dev/null is written as a file is.
void refuse_unwritable_kind(const std::filesystem::path& path, std::string_view key);

// absolute_path(): `path` against the working directory now, normalised, symbolic links resolved (a
// last link to a file not made yet too: it names that file); `path` itself when the working directory
// cannot be read. What a file is called whatever the spelling: outputs compare by it.
std::filesystem::path absolute_path(const std::filesystem::path& path);

}  // namespace nerve::detail
