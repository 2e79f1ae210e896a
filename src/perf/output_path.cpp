#include "perf/output_path.hpp"

#include <map>
#include <mutex>

#include <fmt/format.h>

#include "nerve/error.hpp"

namespace nerve::detail {

std::filesystem::path absolute_path(const std::filesystem::path& path) {
  std::error_code error;
  std::filesystem::path absolute = std::filesystem::absolute(path, error);
  if (error) return path.lexically_normal();
  // Links resolved: a link to another output's file is that file — also when that file does not exist
  // yet, which weakly_canonical() leaves as the link (two outputs through links to one new file were
  // two different paths).
  for (int hops = 0; hops < 40 && std::filesystem::is_symlink(absolute, error); ++hops) {
    const std::filesystem::path target = std::filesystem::read_symlink(absolute, error);
    if (error) break;
    absolute = target.is_absolute() ? target : absolute.parent_path() / target;
  }
  std::filesystem::path resolved = std::filesystem::weakly_canonical(absolute, error);
  return error ? absolute.lexically_normal() : resolved;
}

namespace {

// The process's claims: absolute path -> "context N's key".
struct Claims {
  std::mutex mutex;
  std::map<std::filesystem::path, std::string> owners;
};

Claims& claims() {
  static Claims process_claims;
  return process_claims;
}

std::string owner_prefix(std::uint64_t context_id) { return fmt::format("context {}'s ", context_id); }

}  // namespace

ClaimedPath claim_output_path(const std::filesystem::path& requested, std::uint64_t context_id,
                              std::string_view key) {
  const std::filesystem::path wanted = absolute_path(requested);
  const std::string owner = owner_prefix(context_id) + std::string(key);
  auto& [mutex, owners] = claims();
  std::lock_guard lock(mutex);
  const auto [held, inserted] = owners.try_emplace(wanted, owner);
  if (inserted) return {wanted, {}};
  // <stem>.<context id><ext>; this context's other output may hold that name already (its trace and
  // decision log both asked for another context's file): the rule applies again to the name, until
  // one is free (docs/CONFIG.md: same.json, same.2.json, same.2.2.json).
  const std::string extension = wanted.extension().string();
  std::string stem = wanted.stem().string();
  std::filesystem::path own = wanted;
  do {
    stem = fmt::format("{}.{}", stem, context_id);
    own.replace_filename(stem + extension);
  } while (!owners.try_emplace(own, owner).second);
  return {own, held->second};
}

void release_output_path(const std::filesystem::path& claimed, std::uint64_t context_id) noexcept {
  auto& [mutex, owners] = claims();
  std::lock_guard lock(mutex);
  const auto held = owners.find(claimed);
  try {
    if (held != owners.end() && held->second.starts_with(owner_prefix(context_id))) owners.erase(held);
  } catch (const std::bad_alloc&) {  // no memory for the owner's name: the claim stays, as before
  }
}

ProvisionalClaims::~ProvisionalClaims() {
  for (const std::filesystem::path& path : claimed_) release_output_path(path, context_id_);
}

ClaimedPath ProvisionalClaims::claim(const std::filesystem::path& requested, std::string_view key) {
  claimed_.reserve(claimed_.size() + 1);  // before the claim: remembering it cannot fail
  ClaimedPath claimed = claim_output_path(requested, context_id_, key);
  claimed_.push_back(claimed.path);
  return claimed;
}

void refuse_unwritable_kind(const std::filesystem::path& path, std::string_view key) {
  std::error_code ignored;
  const std::filesystem::file_status status = std::filesystem::status(path, ignored);
  const char* kind = std::filesystem::is_fifo(status)     ? "a FIFO"
                     : std::filesystem::is_socket(status) ? "a socket"
                                                          : nullptr;
  if (kind == nullptr) return;
  throw ConfigError(fmt::format("{}: '{}' is {}, not a file: nerve writes a file there (name a regular "
                                "file, or a path that does not exist yet)",
                                key, path.string(), kind),
                    std::string(key));
}

}  // namespace nerve::detail
