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

void DecisionLog::record(std::uint64_t task_id, std::uint64_t number, nlohmann::json&& decision) {
  decision["decision"] = number;
  std::lock_guard lock(mutex_);
  std::string text = json_text(decision);
  if (file_.is_open()) file_ << text << '\n';
  if (annotate_ && task_id != 0) annotations_.insert_or_assign(task_id, std::move(text));
}

std::optional<nlohmann::json> DecisionLog::annotation(std::uint64_t task_id) const {
  std::lock_guard lock(mutex_);
  const auto it = annotations_.find(task_id);
  if (it == annotations_.end()) return std::nullopt;
  return nlohmann::json::parse(it->second);
}

void DecisionLog::forget(std::uint64_t task_id) noexcept {
  std::lock_guard lock(mutex_);
  annotations_.erase(task_id);
}

std::size_t DecisionLog::annotations_kept() const {
  std::lock_guard lock(mutex_);
  return annotations_.size();
}

void DecisionLog::flush() {
  std::lock_guard lock(mutex_);
  if (file_.is_open()) file_.flush();
}

}  // namespace nerve::detail
