// decision_log.hpp — DecisionLog: why scheduler.policy heft put each task where it did.
//
// With perf.decision_log set, each placement decision is one JSON line in that file (schema
// "nerve.decision/1", docs/PERF_STATS.md), written as it is made. With tracing on (perf.trace),
// the same object is kept per task id, as text (a sixth of the tree's memory), and added to the task's
// trace slice (`args.placement`); a task whose record perf.max_task_records leaves out has no slice,
// and its decision is let go then (forget()), so that they never outnumber the records. Neither is
// built when both are off: the placer asks explains() first.
//
// Thread safety: every member may be called from any thread (one mutex).
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include <nlohmann/json.hpp>

namespace nerve::detail {

class DecisionLog {
 public:
  // `path` empty: no file. `annotate`: keep each decision for the trace. Throws Error when the file
  // cannot be created.
  DecisionLog(const std::filesystem::path& path, bool annotate);

  bool explains() const noexcept { return file_.is_open() || annotate_; }
  // record(): one decision; `task_id` is the task's trace id (0 when tasks are not recorded).
  // `number`: the decision's place in decision order (HeftDecision::number), which concurrent
  // placements may log out of.
  void record(std::uint64_t task_id, std::uint64_t number, nlohmann::json&& decision);
  std::optional<nlohmann::json> annotation(std::uint64_t task_id) const;
  // forget(): the task's record was not kept: no trace slice will ask for its decision.
  void forget(std::uint64_t task_id) noexcept;
  std::size_t annotations_kept() const;  // tests
  void flush();

 private:
  mutable std::mutex mutex_;
  std::ofstream file_;
  const bool annotate_;
  std::unordered_map<std::uint64_t, std::string> annotations_;
};

}  // namespace nerve::detail
