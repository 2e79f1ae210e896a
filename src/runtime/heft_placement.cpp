// heft_placement.cpp — scheduler.policy heft: what each device implementing a kernel call would cost
// (history model, coherence state, bus model), the HeftPlacer's choice, and its explanation.
// Only reached under heft with devices: ContextImpl::heft is null otherwise.
#include <algorithm>

#include "memory/buffer_state.hpp"
#include "perf/history_model.hpp"
#include "runtime/context_impl.hpp"
#include "task/kernel_task.hpp"
#include "util/log.hpp"

namespace nerve::detail {
namespace {

nlohmann::json explain(const TaskRecord& task, std::uint64_t footprint, const HeftDecision& decision,
                       const std::vector<HeftCandidate>& candidates,
                       std::span<const HeftPlacer::LeftOut> left_out, std::int64_t time_ns) {
  nlohmann::json rows = nlohmann::json::array();
  for (const HeftCandidate& candidate : candidates) {
    rows.push_back({{"device", candidate.device},
                    {"units", candidate.units},
                    {"ready_ns", candidate.ready_ns},
                    {"transfer_ns", candidate.transfer_ns},
                    {"transfer_bytes", candidate.transfer_bytes},
                    {"local_bytes", candidate.local_bytes},
                    {"host_cores", candidate.host_cores},
                    {"run_ns", candidate.run_ns},
                    {"samples", candidate.samples},
                    {"modelled", candidate.modelled},
                    {"calibrating", candidate.calibrating},
                    {"dominated", candidate.dominated},
                    {"finish_ns", candidate.finish_ns}});
  }
  return {{"schema", "nerve.decision/1"},
          {"time_ns", time_ns},
          {"task", task.trace_id},
          {"name", task.name != nullptr ? task.name : ""},
          {"kernel", model_name(task)},
          {"footprint", footprint},
          {"mode", name(decision.mode)},
          {"chosen", candidates[decision.chosen].device},
          {"reason", HeftPlacer::reason(decision, candidates, left_out)},
          {"candidates", std::move(rows)}};
}

}  // namespace

std::vector<MemoryNode*> ContextImpl::memory_nodes() {
  std::vector<MemoryNode*> nodes{&host_memory};
  for (auto& device : devices) nodes.push_back(&device->memory());
  return nodes;
}

int ContextImpl::place_heft(TaskRecord* task, int locality, const PlacementNeeds& needs) {
  // The bus is measured when the context starts (or loaded from perf.model_dir); devices added later
  // (test devices) are measured here, on first use: a few copies per node pair.
  if (!bus->covers(coherence->node_count())) {
    try {
      bus->ensure_calibrated(memory_nodes());
    } catch (const std::exception& error) {
      log::warn("bus calibration failed ({}); heft predicts transfers as free", error.what());
    }
  }
  const std::uint64_t footprint = footprint_of(*task);
  const HistoryModels& models = *perf->models();
  std::vector<HeftCandidate> candidates;
  std::size_t locality_index = 0;
  for (int device = 0; device < static_cast<int>(device_count()); ++device) {
    if (!placeable_on(*task, device, needs)) continue;
    HeftCandidate candidate;
    candidate.device = device;
    // A device runs one kernel at a time in its queue order; the CPU workers run one per slot.
    candidate.units = device == 0 ? scheduler.slot_count() : 1;
    if (device != 0) {
      const DeviceInfo& info = devices[static_cast<std::size_t>(device) - 1]->info();
      if (info.shares_host_cores)
        candidate.host_cores = std::clamp(info.compute_units, 1u, scheduler.slot_count());
    }
    const std::string key = model_device(device);
    if (const auto estimate = models.estimate(model_name(*task), key, footprint)) {
      candidate.modelled = true;
      candidate.calibrating = estimate->calibrating;
      candidate.run_ns = estimate->mean_ns;
      candidate.samples = estimate->samples;
    }
    const unsigned node = device == 0 ? 0 : devices[static_cast<std::size_t>(device) - 1]->memory().index();
    for (std::size_t i = 0; i < task->access_count; ++i) {
      const AccessRecord& access = task->accesses[i];
      if (!reads(access.mode) || access.size == 0) continue;
      const std::size_t valid = coherence->valid_bytes(*access.buffer, access.offset, access.size, node);
      candidate.local_bytes += valid;
      const std::size_t missing = access.size - valid;
      if (missing == 0) continue;
      // The coherence layer copies from the host when it holds the bytes, else from a device.
      unsigned source = 0;
      if (coherence->valid_bytes(*access.buffer, access.offset, access.size, 0) == 0) {
        std::size_t most = 0;
        for (unsigned other = 1; other < coherence->node_count(); ++other) {
          if (other == node) continue;
          const std::size_t there = coherence->valid_bytes(*access.buffer, access.offset, access.size, other);
          if (there > most) {
            most = there;
            source = other;
          }
        }
      }
      candidate.transfer_bytes += missing;
      candidate.transfer_ns += bus->transfer_ns(source, node, missing);
    }
    if (device == locality) locality_index = candidates.size();
    candidates.push_back(candidate);
  }
  if (candidates.empty()) return locality;  // check_placeable() makes this unreachable
  const HeftDecision decision = heft->decide(task, candidates, locality_index);
  if (decisions != nullptr && decisions->explains()) {
    // Implementing the kernel, yet no candidate: say so, and why, when one remains.
    std::vector<HeftPlacer::LeftOut> left_out;
    for (int device = 0; decision.mode == HeftMode::only && device < static_cast<int>(device_count());
         ++device) {
      if (device == candidates[0].device || !can_run_on(*task, device)) continue;
      left_out.push_back({device, why_left_out(*task, device, needs)});
    }
    decisions->record(
        recorder != nullptr ? task->trace_id : 0, decision.number,
        explain(*task, footprint, decision, candidates, left_out, decision.decided_ns - perf->epoch_ns()));
  }
  return candidates[decision.chosen].device;
}

void ContextImpl::heft_finished(const TaskRecord* task) noexcept {
  try {
    heft->done(heft->take(task));
  } catch (...) {  // the map's erase does not throw; the lock could only in a broken state
  }
}

}  // namespace nerve::detail
