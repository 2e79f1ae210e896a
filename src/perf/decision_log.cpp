#include "perf/decision_log.hpp"

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "nerve/error.hpp"

#include "perf/output_path.hpp"
#include "util/json_text.hpp"

namespace nerve::detail {

DecisionLog::DecisionLog(const std::filesystem::path& path, bool annotate) : annotate_(annotate) {
  if (path.empty()) return;
  refuse_unwritable_kind(path, "perf.decision_log");
  errno = 0;
  file_.open(path, std::ios::out | std::ios::trunc);
  if (!file_) {
    throw ConfigError(fmt::format("perf.decision_log: cannot create '{}': {}", path.string(),
                                  errno != 0 ? std::strerror(errno) : "open failed"),
                      "perf.decision_log");
  }
}

void DecisionLog::record(std::uint64_t task_id, nlohmann::json&& decision) {
  std::lock_guard lock(mutex_);
  decision["decision"] = ++decisions_;
  if (file_.is_open()) file_ << json_text(decision) << '\n';
  if (annotate_ && task_id != 0) annotations_.insert_or_assign(task_id, std::move(decision));
}

std::optional<nlohmann::json> DecisionLog::annotation(std::uint64_t task_id) const {
  std::lock_guard lock(mutex_);
  const auto it = annotations_.find(task_id);
  if (it == annotations_.end()) return std::nullopt;
  return it->second;
}

void DecisionLog::flush() {
  std::lock_guard lock(mutex_);
  if (file_.is_open()) file_.flush();
}

}  // namespace nerve::detail
