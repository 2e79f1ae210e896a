// heft.hpp — HeftPlacer: the device choice of scheduler.policy heft (Topcuoglu et al., "Performance-
// effective and low-complexity task scheduling for heterogeneous computing", IEEE TPDS 2002, applied
// online to ready tasks as StarPU's dmda does).
//
// For a ready kernel call the runtime lists every device implementing it (the CPU workers count as
// one device with `units` parallel slots) with its predicted transfer time (the bytes it lacks over
// the measured bus) and run time (the history model). The placer adds when each device frees up —
// the predicted run time of the calls already placed there and not finished, over its units — and
// picks the earliest expected finish:
//     finish = max(device free, data there) + run
// (max, not sum: the coherence layer starts the copies when the task is placed, so they overlap the
// device's queue). While a candidate's model is still calibrating (fewer than 10 samples) the
// prediction cannot be trusted: the call goes to an uncalibrated candidate that has a free unit, so
// that every device's model learns, else to the locality-aware choice (most valid input bytes) —
// unless the calibrating candidate is *dominated*: from its second sample on, even at twice the speed
// measured so far (the models' calibrating estimate is the median of the samples, so one cold first
// call does not count) it would finish after a calibrated candidate, or after another calibrating one
// (2+ samples) at half that one's measured speed. Then more samples cannot change the decision (a
// device 50x slower for a kernel is not sent ten calls to prove it, even while every device is still
// calibrating), and the others decide; the locality fallback skips it too.
//
// A device that computes on the host's cores (an OpenCL CPU device such as PoCL's) runs on the CPU
// workers' cores, so the two are not independent: its call of run time r occupies `host_cores`
// cores for r. The placer keeps the host's backlog in core time — the CPU workers' outstanding
// work plus such devices' outstanding work times their cores — and (a fluid model of time-sliced
// cores) a call cannot finish before the host's cores have worked through that backlog and it:
//     CPU workers:          finish = max(backlog / units, data there) + run
//     host-sharing device:  finish = max(max(device free, data there) + run,
//                                        (backlog + run * host_cores) / host units)
// Without it heft sees such a device as idle extra capacity, sends it calls while the workers are
// busy, and the device's threads then slow the workers down (measured on PoCL: 18 % longer).
//
// Bookkeeping: decide() charges the prediction to the chosen device and remembers it per record;
// take() (when the task starts, or fails before) removes that entry and done() credits it back.
//
// Thread safety: every member may be called from any thread (one mutex; heft only, never on the
// path of other policies).
#pragma once

#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace nerve::detail {

struct TaskRecord;

struct HeftCandidate {
  int device = 0;  // 0 = the CPU workers
  unsigned units = 1;
  // The history model for this kernel, device and footprint: absent, or its mean and samples.
  bool modelled = false;
  bool calibrating = true;
  double run_ns = 0;
  std::uint64_t samples = 0;
  double transfer_ns = 0;            // predicted time to bring the bytes it lacks
  std::uint64_t transfer_bytes = 0;  // bytes it lacks
  std::uint64_t local_bytes = 0;     // input bytes already valid there
  unsigned host_cores = 0;           // a device computing on the host's cores: the cores a call uses
  // Filled by decide():
  double ready_ns = 0;     // predicted wait until the device frees up
  double finish_ns = 0;    // predicted finish, from now
  bool dominated = false;  // calibrating (2+ samples), but later even at 2x its speed than another surely is
};

enum class HeftMode {
  only,         // a single device implements the kernel
  earliest,     // every model calibrated: earliest expected finish
  calibrating,  // an uncalibrated device with a free unit gets it, so that its model learns
  locality,     // models still calibrating, no uncalibrated device free: locality-aware fallback
};
const char* name(HeftMode mode) noexcept;

struct HeftDecision {
  std::size_t chosen = 0;  // index into the candidates
  HeftMode mode = HeftMode::only;
  // Numbered from 1 in the order decide() made them, and when (monotonic_ns()), under the placer's
  // lock: two threads placing at once log their lines in either order, each with its own place.
  std::uint64_t number = 0;
  std::int64_t decided_ns = 0;
};

struct HeftAssignment {
  int device = -1;  // -1: none (the task was not placed by heft)
  double predicted_ns = 0;
};

class HeftPlacer {
 public:
  // host_units: the CPU workers' slots, the host cores that time-shared devices compete for.
  explicit HeftPlacer(unsigned device_count, unsigned host_units = 1);

  // decide(): chooses among `candidates` (non-empty; `locality` indexes the locality-aware choice),
  // filling their ready_ns and finish_ns, and charges the chosen device with the task's prediction.
  HeftDecision decide(const TaskRecord* task, std::vector<HeftCandidate>& candidates, std::size_t locality);
  // take(): the task's assignment, removed (device -1 if it has none).
  HeftAssignment take(const TaskRecord* task);
  // done(): the task of `assignment` finished: its device frees up by the prediction.
  void done(const HeftAssignment& assignment);
  // reason(): why decision chose what it did, in words (decision logs and traces). `left_out`: the
  // devices implementing the kernel that could not take this call (not candidates), each with why.
  struct LeftOut {
    int device;
    std::string why;
  };
  static std::string reason(const HeftDecision& decision, const std::vector<HeftCandidate>& candidates,
                            std::span<const LeftOut> left_out = {});

  // Predicted work (ns) placed on `device` and not finished; tests.
  double outstanding_ns(int device) const;

 private:
  struct Load {
    double outstanding_ns = 0;
    unsigned in_flight = 0;
    unsigned host_cores = 0;  // as its last candidate said (devices computing on the host's cores)
  };
  double host_backlog_ns() const;  // core time of the work placed on the host's cores, under mutex_
  // finish(): `candidate`'s predicted finish if it ran `run_ns` there, from its ready_ns.
  double finish(const HeftCandidate& candidate, double run_ns, double backlog_ns) const;

  const unsigned host_units_;
  mutable std::mutex mutex_;
  std::vector<Load> loads_;  // per device
  std::unordered_map<const TaskRecord*, HeftAssignment> assigned_;
  std::uint64_t decisions_ = 0;
};

}  // namespace nerve::detail
