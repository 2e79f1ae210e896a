// history_model.hpp — HistoryModels: measured run times per (kernel, device, data footprint).
//
// Each entry keeps the count, mean and variance of its samples (Welford). Robust to outliers: once
// calibrated, a sample beyond mean ± 3σ (σ at least 5 % of the mean) is clamped to that bound and
// counted as an outlier, so a few slow runs move the mean by little (StarPU's failure mode: one
// slow run sends every task elsewhere). Drift: `drift_run` samples in a row, as measured (before
// clamping), that leave the mean by more than half of it in the same direction mean the device or
// the kernel changed; the entry restarts (calibrating again) from those samples and counts a
// recalibration. Judged on raw samples: clamped ones stay within mean ± 3σ, which for a steady
// kernel is far less than half the mean, so an average of them could never show a lasting change.
// An entry with fewer than `calibration_samples` samples is *calibrating*: its estimate is marked
// so, and placement must not trust it alone. Calibration is robust too: while it lasts, the estimate
// is the median of its samples, kept in the model file too (a first call that paid for a program build or
// cold caches does not make a fast device look slow), and when it completes, samples beyond 4× or
// below ¼ of that median are clamped there (counted as outliers) before the mean and variance are
// taken. Entries loaded from a file carry on from their stored mean (and calibration samples). For a
// footprint not yet seen, estimate() fits a least-squares line through the known footprints' means of that
// kernel and device.
//
// Persistence: load()/save() read and write one JSON file per kernel, `<dir>/<kernel>.json`
// (schema "nerve.perfmodel/1"), written to a temporary file and renamed.
//
// Thread safety: every member may be called from any thread (one mutex).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace nerve::detail {

struct ModelEntry {
  std::uint64_t samples = 0;
  double mean_ns = 0;
  double m2 = 0;         // sum of squared deviations (Welford)
  double recent_ns = 0;  // EWMA of the clamped samples
  std::uint64_t outliers = 0;
  std::uint64_t recalibrations = 0;
  std::vector<double> calibrating;  // the raw samples while calibrating (persisted as calibration_ns)
  std::vector<double> drifting;     // the current run of raw samples off the mean one way (not persisted)
  double stddev_ns() const noexcept;
};

struct ModelEstimate {
  double mean_ns = 0;
  double stddev_ns = 0;
  std::uint64_t samples = 0;
  bool calibrating = true;
  bool interpolated = false;  // from the regression over other footprints
};

// model_device(): how the models name device `device` of a context ("cpu" for the CPU workers,
// "device:<index>" otherwise): one spelling for the samples and for heft's lookups.
inline std::string model_device(int device) {
  return device == 0 ? std::string("cpu") : "device:" + std::to_string(device);
}

struct ModelRow {
  std::string kernel;
  std::string device;
  std::uint64_t footprint = 0;
  ModelEntry entry;
};

class HistoryModels {
 public:
  static constexpr std::uint64_t calibration_samples = 10;
  static constexpr std::size_t drift_run = 5;  // raw samples in a row off the mean one way: drift

  // `directory` empty: not persisted.
  explicit HistoryModels(std::filesystem::path directory);

  void add(const std::string& kernel, const std::string& device, std::uint64_t footprint, double ns);
  std::optional<ModelEstimate> estimate(const std::string& kernel, const std::string& device,
                                        std::uint64_t footprint) const;
  std::vector<ModelRow> rows() const;
  const std::filesystem::path& directory() const noexcept { return directory_; }

  // load(): every `<dir>/*.json` model file (unreadable, misshapen or foreign files, and entries with
  // impossible values — negative or non-finite times, a count that is not a whole number or that no
  // run reaches — are skipped, logged: a misshapen file's warning names the entry and field).
  void load();
  // save(): the kernels with entries, merged with what others saved since load(); a failure is
  // logged, never thrown. Once, at the end (a second save would count this one's samples twice).
  void save() const noexcept;

  // usable_directory(): creates the directory if need be; empty when it is there and writable, else
  // why not. Asked when the context starts, so that models that could never be saved are known then,
  // not at the end of the run whose learning would be lost.
  std::string usable_directory() const;

  // default_directory(): $XDG_CACHE_HOME/nerve/perfmodels, else $HOME/.cache/nerve/perfmodels, else
  // $TMPDIR/nerve-perfmodels, else /tmp/nerve-perfmodels (a variable that is empty counts as unset).
  static std::filesystem::path default_directory();

 private:
  using Key = std::tuple<std::string, std::string, std::uint64_t>;  // kernel, device, footprint
  mutable std::mutex mutex_;
  std::map<Key, ModelEntry> entries_;
  // The entries as load() found them: save() tells from them what another context or process saved
  // meanwhile (kept, and merged where both learnt the same entry) from what this one learnt.
  std::map<Key, ModelEntry> loaded_;
  std::filesystem::path directory_;
};

}  // namespace nerve::detail
