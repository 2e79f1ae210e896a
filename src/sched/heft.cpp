#include "sched/heft.hpp"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "util/monotonic_clock.hpp"

namespace nerve::detail {

const char* name(HeftMode mode) noexcept {
  switch (mode) {
    case HeftMode::only: return "only";
    case HeftMode::earliest: return "earliest_finish";
    case HeftMode::calibrating: return "calibrating";
    case HeftMode::locality: return "locality";
  }
  return "?";
}

HeftPlacer::HeftPlacer(unsigned device_count, unsigned host_units)
    : host_units_(std::max(1u, host_units)), loads_(device_count) {}

double HeftPlacer::host_backlog_ns() const {
  double backlog = loads_.empty() ? 0.0 : loads_[0].outstanding_ns;
  for (std::size_t device = 1; device < loads_.size(); ++device)
    backlog += loads_[device].outstanding_ns * loads_[device].host_cores;
  return backlog;
}

double HeftPlacer::finish(const HeftCandidate& candidate, double run_ns, double backlog_ns) const {
  const double own = std::max(candidate.ready_ns, candidate.transfer_ns) + run_ns;
  if (candidate.device == 0 || candidate.host_cores == 0) return own;
  return std::max(own, (backlog_ns + run_ns * candidate.host_cores) / host_units_);
}

HeftDecision HeftPlacer::decide(const TaskRecord* task, std::vector<HeftCandidate>& candidates,
                                std::size_t locality) {
  std::lock_guard lock(mutex_);
  constexpr double infinity = std::numeric_limits<double>::infinity();
  // The finish a candidate surely beats: a calibrated one's predicted finish, or, for one still
  // calibrating but past its first (often cold) sample, its finish at half its measured speed. All
  // devices calibrate together when no model is stored yet, so a slow device must be judged against
  // another's early samples too, not only against a finished calibration.
  double best_bound = infinity;
  const double backlog = host_backlog_ns();
  for (HeftCandidate& candidate : candidates) {
    const Load& load = loads_[static_cast<std::size_t>(candidate.device)];
    // The CPU workers wait for the host's whole backlog, devices time-sharing their cores included.
    candidate.ready_ns =
        (candidate.device == 0 ? backlog : load.outstanding_ns) / std::max(1u, candidate.units);
    candidate.finish_ns = finish(candidate, candidate.run_ns, backlog);
    if (candidate.modelled && !candidate.calibrating) {
      best_bound = std::min(best_bound, candidate.finish_ns);
    } else if (candidate.modelled && candidate.samples >= 2) {
      best_bound = std::min(best_bound, finish(candidate, candidate.run_ns * 2, backlog));
    }
  }
  // A calibrating model that would still finish after that bound if the device ran twice as fast as
  // measured so far cannot win: more samples would not change the decision, and calibrating it (a
  // device 50x slower, say) would cost more than the models ever save. One sample is not enough to
  // judge: a device's first call is often cold (PoCL compiles the work-group function at the first
  // launch, GPUs load modules lazily, pages are touched first), 4x and more. Two candidates cannot
  // dominate each other (each would have to be more than 4x slower than the other), so one stays.
  bool open = false;  // an uncalibrated candidate that might still win
  for (HeftCandidate& candidate : candidates) {
    if (candidate.modelled && !candidate.calibrating) continue;
    candidate.dominated = candidate.modelled && candidate.samples >= 2 &&
                          finish(candidate, candidate.run_ns * 0.5, backlog) > best_bound;
    open |= !candidate.dominated;
  }
  HeftDecision decision;
  if (candidates.size() == 1) {
    decision = {0, HeftMode::only};
  } else if (!open) {
    // Earliest finish among the calibrated; on a tie the device already holding more of the input.
    std::size_t best = candidates.size();
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      const HeftCandidate& a = candidates[i];
      if (a.dominated) continue;
      if (best == candidates.size()) {
        best = i;
        continue;
      }
      const HeftCandidate& b = candidates[best];
      if (a.finish_ns < b.finish_ns || (a.finish_ns == b.finish_ns && a.local_bytes > b.local_bytes))
        best = i;
    }
    decision = {best, HeftMode::earliest};
  } else {
    std::size_t best = candidates.size();
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      const HeftCandidate& candidate = candidates[i];
      const bool learning = (!candidate.modelled || candidate.calibrating) && !candidate.dominated;
      const bool free = loads_[static_cast<std::size_t>(candidate.device)].in_flight < candidate.units;
      if (learning && free && (best == candidates.size() || candidate.samples < candidates[best].samples))
        best = i;
    }
    if (best < candidates.size()) {
      decision = {best, HeftMode::calibrating};
    } else {
      // The device holding most input, unless that one is too slow to win: then the one holding most
      // among those that might (on a tie, the earlier predicted finish).
      std::size_t fallback = locality;
      for (std::size_t i = 0; candidates[locality].dominated && i < candidates.size(); ++i) {
        const HeftCandidate& a = candidates[i];
        if (a.dominated) continue;
        if (fallback == locality) {
          fallback = i;
          continue;
        }
        const HeftCandidate& b = candidates[fallback];
        if (a.local_bytes > b.local_bytes || (a.local_bytes == b.local_bytes && a.finish_ns < b.finish_ns))
          fallback = i;
      }
      decision = {fallback, HeftMode::locality};
    }
  }
  const HeftCandidate& chosen = candidates[decision.chosen];
  Load& load = loads_[static_cast<std::size_t>(chosen.device)];
  load.outstanding_ns += chosen.run_ns;
  load.host_cores = chosen.host_cores;
  ++load.in_flight;
  assigned_[task] = HeftAssignment{chosen.device, chosen.run_ns};
  decision.number = ++decisions_;
  decision.decided_ns = monotonic_ns();
  return decision;
}

HeftAssignment HeftPlacer::take(const TaskRecord* task) {
  std::lock_guard lock(mutex_);
  const auto it = assigned_.find(task);
  if (it == assigned_.end()) return {};
  const HeftAssignment assignment = it->second;
  assigned_.erase(it);
  return assignment;
}

void HeftPlacer::done(const HeftAssignment& assignment) {
  if (assignment.device < 0) return;
  std::lock_guard lock(mutex_);
  Load& load = loads_[static_cast<std::size_t>(assignment.device)];
  load.outstanding_ns = std::max(0.0, load.outstanding_ns - assignment.predicted_ns);
  if (load.in_flight > 0) --load.in_flight;
  if (load.in_flight == 0) load.outstanding_ns = 0;  // no rounding residue left behind
}

double HeftPlacer::outstanding_ns(int device) const {
  std::lock_guard lock(mutex_);
  return loads_[static_cast<std::size_t>(device)].outstanding_ns;
}

std::string HeftPlacer::reason(const HeftDecision& decision, const std::vector<HeftCandidate>& candidates,
                               std::span<const LeftOut> left_out) {
  const HeftCandidate& chosen = candidates[decision.chosen];
  switch (decision.mode) {
    case HeftMode::only: {
      if (left_out.empty()) return fmt::format("only device {} implements the kernel", chosen.device);
      std::string text = fmt::format("only device {} can take the call:", chosen.device);
      for (const LeftOut& other : left_out) {
        text += fmt::format("{} device {} implements the kernel but is left out: {}",
                            &other == left_out.data() ? "" : ";", other.device, other.why);
      }
      return text;
    }
    case HeftMode::earliest: {
      const HeftCandidate* runner_up = nullptr;
      for (const HeftCandidate& candidate : candidates) {
        if (&candidate != &chosen && (runner_up == nullptr || candidate.finish_ns < runner_up->finish_ns))
          runner_up = &candidate;
      }
      return fmt::format(
          "earliest predicted finish: device {} at {:.0f} ns (free in {:.0f}, data in {:.0f}, run {:.0f}{}); "
          "next best device {} at {:.0f} ns",
          chosen.device, chosen.finish_ns, chosen.ready_ns, chosen.transfer_ns, chosen.run_ns,
          chosen.host_cores > 0 ? fmt::format(", on {} of the host's busy cores", chosen.host_cores) : "",
          runner_up->device, runner_up->finish_ns);
    }
    case HeftMode::calibrating:
      return fmt::format("calibrating: device {}'s model has {} of 10 samples and it has a free unit",
                         chosen.device, chosen.samples);
    case HeftMode::locality:
      return fmt::format(
          "models still calibrating and no uncalibrated device is free: locality-aware fallback, device {} "
          "holds the most input ({} bytes) of the devices not too slow to win",
          chosen.device, chosen.local_bytes);
  }
  return {};
}

}  // namespace nerve::detail
