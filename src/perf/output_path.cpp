#include "perf/output_path.hpp"

#include <map>
#include <mutex>

#include <fmt/format.h>

namespace nerve::detail {

std::filesystem::path absolute_path(const std::filesystem::path& path) {
  std::error_code error;
  const std::filesystem::path absolute = std::filesystem::absolute(path, error);
  if (error) return path.lexically_normal();
  // Links resolved where they lead somewhere: a link to another output's file is that file.
  std::filesystem::path resolved = std::filesystem::weakly_canonical(absolute, error);
  return error ? absolute.lexically_normal() : resolved;
}

ClaimedPath claim_output_path(const std::filesystem::path& requested, std::uint64_t context_id,
                              std::string_view key) {
  static std::mutex mutex;
  static std::map<std::filesystem::path, std::string> owners;  // absolute path -> "context N's key"
  const std::filesystem::path wanted = absolute_path(requested);
  const std::string owner = fmt::format("context {}'s {}", context_id, key);
  std::lock_guard lock(mutex);
  const auto [held, inserted] = owners.try_emplace(wanted, owner);
  if (inserted) return {wanted, {}};
  const std::string stem = wanted.stem().string();
  const std::string extension = wanted.extension().string();
  std::filesystem::path own = wanted;
  own.replace_filename(fmt::format("{}.{}{}", stem, context_id, extension));
  // This context's other output may hold that name already (its trace and decision log both asked
  // for another context's file): count on until a name is free.
  for (int attempt = 2; !owners.try_emplace(own, owner).second; ++attempt)
    own.replace_filename(fmt::format("{}.{}.{}{}", stem, context_id, attempt, extension));
  return {own, held->second};
}

}  // namespace nerve::detail
