// bus_model.hpp — BusModel: measured latency and bandwidth of copies between every ordered pair of
// memory nodes, for heft's transfer-time estimates (and `nerve-info --calibrate`).
//
// calibrate() times real copies through the nodes' asynchronous copy interface (MemoryNode::copy, the
// same path the coherence layer uses): `small_bytes` copies give the latency (the fastest one's
// time), `large_bytes` copies the bandwidth (bytes over the fastest one's time minus the latency).
// Each pair is measured on its own, with bandwidth copies that both of its nodes have room for
// (`large_bytes`, else its largest half, quarter, ... down to `small_bytes`); a pair that cannot be
// measured (no room for `small_bytes`, a copy that fails) is logged and left unmeasured, which
// heft reads as free transfers, and the other pairs are kept. Host-to-host is never copied (node 0
// is one coherence domain) and costs nothing.
//
// Persistence: `<dir>/bus.json` (schema "nerve.busmodel/1"), links keyed by the nodes' names, so a
// matrix measured with other devices present still serves the pairs it has. ensure_calibrated()
// loads it and measures only when a pair of the current nodes is missing (then saves). A bus.json of
// another schema (a newer nerve's, or none) is skipped with a warning and never overwritten: the bus
// is measured for this model alone, and save_error() says why it was not saved.
//
// Thread safety: every member may be called from any thread (one mutex); calibrate() and a measuring
// ensure_calibrated() block the caller until their copies have landed — they must not run on a
// node's copy or completion thread (the context measures when it starts, from the creating thread).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

namespace nerve::detail {

class MemoryNode;

struct BusLink {
  double latency_ns = 0;
  double bytes_per_ns = 0;  // 0: not measured
  bool measured() const noexcept { return bytes_per_ns > 0; }
};

struct BusCalibrationSizes {
  std::size_t small_bytes = 64;
  std::size_t large_bytes = std::size_t{4} << 20;
  int small_copies = 5;
  int large_copies = 3;
};

class BusModel {
 public:
  // `directory` empty: not persisted.
  explicit BusModel(std::filesystem::path directory);

  // ensure_calibrated(): load bus.json, measure the pairs still missing (all of them, if any is),
  // save. Returns true when it measured.
  bool ensure_calibrated(const std::vector<MemoryNode*>& nodes, const BusCalibrationSizes& sizes = {});
  // covers(): links are known for `node_count` nodes (no lock: heft asks before every placement).
  bool covers(std::size_t node_count) const noexcept {
    return node_count_.load(std::memory_order_acquire) == node_count;
  }
  // calibrate(): measure every pair now (nerve-info --calibrate) and save.
  void calibrate(const std::vector<MemoryNode*>& nodes, const BusCalibrationSizes& sizes = {});

  // link(): the measured link from node `from` to node `to` (zeros if not measured).
  BusLink link(unsigned from, unsigned to) const;
  // transfer_ns(): predicted time to copy `bytes` from `from` to `to` (0 for no bytes or host-host).
  double transfer_ns(unsigned from, unsigned to, std::size_t bytes) const;
  std::vector<std::string> node_names() const;
  unsigned measurements() const noexcept { return measurements_; }  // calibrate() runs, for tests
  std::filesystem::path file() const;
  // save_error(): why the last save failed (empty: saved, or not persisted).
  std::string save_error() const;

 private:
  bool load_locked(const std::vector<MemoryNode*>& nodes);
  // adopt_locked(): these nodes' links, measured or loaded, become the model's.
  void adopt_locked(const std::vector<MemoryNode*>& nodes, std::vector<BusLink> links);
  void measure_locked(const std::vector<MemoryNode*>& nodes, const BusCalibrationSizes& sizes);
  void save_locked() const noexcept;

  mutable std::mutex mutex_;
  std::filesystem::path directory_;
  std::vector<std::string> names_;
  std::atomic<std::size_t> node_count_{0};  // names_.size(), published once links_ are set
  std::vector<BusLink> links_;              // names_.size()², [from * n + to]
  unsigned measurements_ = 0;
  mutable std::string save_error_;
};

}  // namespace nerve::detail
