#include "perf/history_model.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string_view>

#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "perf/model_schema.hpp"
#include "util/fnv1a.hpp"
#include "util/json_text.hpp"
#include "util/log.hpp"
#include "util/regular_file.hpp"
#include "util/replace_file.hpp"

namespace nerve::detail {
namespace {

constexpr double recent_weight = 0.1;   // EWMA weight of a new sample
constexpr double outlier_sigmas = 3.0;  // clamp beyond mean ± 3σ once calibrated
constexpr double min_sigma_share = 0.05;
constexpr double drift_share = 0.5;         // a raw sample off the mean by over 50 % counts to drift
constexpr double calibration_spread = 4.0;  // calibration samples are clamped to median ÷ 4 .. median × 4
// More samples than any run could take (2^48: 9 years of one every microsecond): a stored count
// beyond it is damage, and counting on from it could wrap.
constexpr std::uint64_t max_samples = std::uint64_t{1} << 48;

double lower_median(std::vector<double> values) {
  const auto middle = values.begin() + static_cast<std::ptrdiff_t>((values.size() - 1) / 2);
  std::nth_element(values.begin(), middle, values.end());
  return *middle;
}

// absorb(): one more sample in the entry's count, mean and variance (Welford) and recent average.
void absorb(ModelEntry& entry, double ns) {
  entry.recent_ns = entry.samples == 0 ? ns : (1 - recent_weight) * entry.recent_ns + recent_weight * ns;
  ++entry.samples;
  const double delta = ns - entry.mean_ns;
  entry.mean_ns += delta / static_cast<double>(entry.samples);
  entry.m2 += delta * (ns - entry.mean_ns);
}

// The entry's statistics taken afresh from its calibration samples, each clamped to the spread
// around their median.
void settle_calibration(ModelEntry& entry) {
  const double median = lower_median(entry.calibrating);
  const double low = median / calibration_spread, high = median * calibration_spread;
  ModelEntry settled;
  settled.recalibrations = entry.recalibrations;
  settled.outliers = entry.outliers;
  for (double ns : entry.calibrating) {
    if (ns < low || ns > high) ++settled.outliers;
    absorb(settled, std::clamp(ns, low, high));
  }
  entry = std::move(settled);
}

// count(): a count as the file holds it, a whole number from 0 to max_samples; nullopt for anything
// else. Converted as it is, a float beyond the integers (1e20) was undefined behaviour (it read as 0),
// a fraction (3.7) lost its part, and a negative number became 2^64 - n.
std::optional<std::uint64_t> count(const nlohmann::json& value) {
  if (!value.is_number_unsigned() || value.get<std::uint64_t>() > max_samples) return std::nullopt;
  return value.get<std::uint64_t>();
}

// plausible(): the entry's times are times and its counts agree (count() took care of their range).
bool plausible(const ModelEntry& entry) {
  const auto time = [](double ns) { return std::isfinite(ns) && ns >= 0; };
  return time(entry.mean_ns) && time(entry.m2) && time(entry.recent_ns) && entry.outliers <= entry.samples &&
         std::all_of(entry.calibrating.begin(), entry.calibrating.end(), time) &&
         (entry.calibrating.empty() || entry.calibrating.size() == entry.samples);
}

// A kernel name as a file name, one to one (two kernels never share a file): letters, digits, '-',
// '_' and '.' kept, except a leading '.'; every other byte, '%' included, as %XX. (It used to map the
// rest to '_', so "a/b" and "a_b" overwrote each other's models.)
std::string percent_encoded(const std::string& kernel) {
  std::string stem;
  for (std::size_t i = 0; i < kernel.size(); ++i) {
    const char c = kernel[i];
    const bool keep = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                      c == '-' || c == '_' || (c == '.' && i != 0);
    stem += keep ? std::string(1, c) : fmt::format("%{:02X}", static_cast<unsigned char>(c));
  }
  return stem;
}

// The inverse of percent_encoded(); nullopt for text it cannot have made.
std::optional<std::string> percent_decoded(std::string_view text) {
  std::string name;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      name += text[i];
      continue;
    }
    unsigned value = 0;
    if (i + 2 >= text.size()) return std::nullopt;
    const auto [end, error] = std::from_chars(text.data() + i + 1, text.data() + i + 3, value, 16);
    if (error != std::errc{} || end != text.data() + i + 3) return std::nullopt;
    name += static_cast<char>(value);
    i += 2;
  }
  return name;
}

std::string file_stem(const std::string& kernel) {
  std::string stem = percent_encoded(kernel);
  // bus.json is the bus model's (BusModel::file(), in the same directory): a kernel named "bus"
  // encodes its first letter, so neither overwrites the other.
  if (stem == "bus") stem = "%62us";
  // File names end at 255 bytes: a longer name keeps its start and a hash of the whole (the file
  // holds the full name; "%%" never comes out of the encoding above).
  constexpr std::size_t longest = 200;
  if (stem.size() > longest) {
    stem = fmt::format("{}%%{:016x}", stem.substr(0, longest - 18), fnv1a(kernel));
  }
  return stem;
}

}  // namespace

double ModelEntry::stddev_ns() const noexcept {
  return samples > 1 ? std::sqrt(std::max(0.0, m2 / static_cast<double>(samples - 1))) : 0.0;
}

HistoryModels::HistoryModels(std::filesystem::path directory) : directory_(std::move(directory)) {}

std::string HistoryModels::usable_directory() const {
  if (directory_.empty()) return {};
  std::error_code error;
  std::filesystem::create_directories(directory_, error);
  if (error) return fmt::format("cannot create directory '{}': {}", directory_.string(), error.message());
  if (!std::filesystem::is_directory(directory_, error))
    return fmt::format("'{}' is not a directory", directory_.string());
  if (::access(directory_.c_str(), W_OK | X_OK) != 0)
    return fmt::format("cannot write to directory '{}': {}", directory_.string(), std::strerror(errno));
  return {};
}

std::filesystem::path HistoryModels::default_directory() {
  if (const char* cache = std::getenv("XDG_CACHE_HOME"); cache != nullptr && cache[0] != '\0')
    return std::filesystem::path(cache) / "nerve" / "perfmodels";
  if (const char* home = std::getenv("HOME"); home != nullptr && home[0] != '\0')
    return std::filesystem::path(home) / ".cache" / "nerve" / "perfmodels";
  // Neither (a service, a bare container): the temporary directory as nerve-run picks it, $TMPDIR,
  // else /tmp. Not temp_directory_path(), which also reads TMP, TEMP and TEMPDIR, and throws when the
  // directory it picks is not one.
  const char* temporary = std::getenv("TMPDIR");
  return std::filesystem::path(temporary != nullptr && temporary[0] != '\0' ? temporary : "/tmp") /
         "nerve-perfmodels";
}

void HistoryModels::add(const std::string& kernel, const std::string& device, std::uint64_t footprint,
                        double ns) {
  std::lock_guard lock(mutex_);
  ModelEntry& entry = entries_[Key{kernel, device, footprint}];
  const double raw = ns;
  const double mean_before = entry.mean_ns;
  if (entry.samples >= calibration_samples) {
    const double sigma = std::max(entry.stddev_ns(), min_sigma_share * entry.mean_ns);
    const double low = entry.mean_ns - outlier_sigmas * sigma;
    const double high = entry.mean_ns + outlier_sigmas * sigma;
    if (ns < low || ns > high) {
      ++entry.outliers;
      ns = std::clamp(ns, low, high);
    }
  }
  if (entry.samples >= max_samples) return;  // a count no run reaches: nothing more to learn
  // Calibrating from scratch in this process: keep the raw samples; the last one settles them.
  const bool from_scratch = entry.samples == entry.calibrating.size();
  if (entry.samples < calibration_samples && from_scratch) entry.calibrating.push_back(ns);
  absorb(entry, ns);
  if (entry.samples == calibration_samples && entry.calibrating.size() == calibration_samples) {
    settle_calibration(entry);
  } else if (entry.samples >= calibration_samples) {
    entry.calibrating.clear();
  }
  // Drift is judged once calibrated, on the raw samples: a run of them all off the mean the same
  // way. A few slow runs (interference, a page fault) break the run and stay mere outliers.
  if (entry.samples > calibration_samples) {
    const int way = raw > (1 + drift_share) * mean_before   ? 1
                    : raw < (1 - drift_share) * mean_before ? -1
                                                            : 0;
    const bool continues =
        way != 0 && !entry.drifting.empty() && (entry.drifting.front() > mean_before ? 1 : -1) == way;
    if (!continues) entry.drifting.clear();
    if (way != 0) entry.drifting.push_back(raw);
    if (entry.drifting.size() >= drift_run) {
      // The times changed: calibrate afresh, robustly, from the run that showed it.
      const std::vector<double> run = std::move(entry.drifting);
      ModelEntry fresh;
      fresh.recalibrations = entry.recalibrations + 1;
      for (const double sample : run) {
        fresh.calibrating.push_back(sample);
        absorb(fresh, sample);
      }
      entry = std::move(fresh);
    }
  }
}

std::optional<ModelEstimate> HistoryModels::estimate(const std::string& kernel, const std::string& device,
                                                     std::uint64_t footprint) const {
  std::lock_guard lock(mutex_);
  if (const auto it = entries_.find(Key{kernel, device, footprint}); it != entries_.end()) {
    const ModelEntry& entry = it->second;
    const bool calibrating = entry.samples < calibration_samples;
    const double mean =
        calibrating && !entry.calibrating.empty() ? lower_median(entry.calibrating) : entry.mean_ns;
    return ModelEstimate{mean, entry.stddev_ns(), entry.samples, calibrating, false};
  }
  // Least squares over the calibrated footprints of this kernel on this device: time = a + b × bytes.
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (auto it = entries_.lower_bound(Key{kernel, device, 0}); it != entries_.end(); ++it) {
    const auto& [k, d, f] = it->first;
    if (k != kernel || d != device) break;
    if (it->second.samples < calibration_samples) continue;
    const double x = static_cast<double>(f);
    n += 1;
    sx += x;
    sy += it->second.mean_ns;
    sxx += x * x;
    sxy += x * it->second.mean_ns;
  }
  if (n < 2 || n * sxx - sx * sx == 0) return std::nullopt;
  const double slope = (n * sxy - sx * sy) / (n * sxx - sx * sx);
  const double intercept = (sy - slope * sx) / n;
  const double mean = std::max(0.0, intercept + slope * static_cast<double>(footprint));
  return ModelEstimate{mean, 0.0, 0, false, true};
}

std::vector<ModelRow> HistoryModels::rows() const {
  std::lock_guard lock(mutex_);
  std::vector<ModelRow> rows;
  for (const auto& [key, entry] : entries_) {
    rows.push_back(ModelRow{std::get<0>(key), std::get<1>(key), std::get<2>(key), entry});
  }
  return rows;
}

namespace {

// One model file's kernel and entries, keyed by (device, footprint).
struct ModelFile {
  std::string kernel;
  std::map<std::pair<std::string, std::uint64_t>, ModelEntry> entries;
};

// A file in the model directory that parses but is not this version's kernel model (another
// schema, a newer nerve's or another program's, or none): never used, and never overwritten.
struct ForeignModelFile : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// read_model_file(): the model in `path`; nullopt for another name's file; throws ForeignModelFile
// for a file of another schema, another exception, saying what is wrong, for one that cannot be read
// or parsed or is not shaped as a model file. Entries with impossible values are skipped, logged
// unless `quiet` (a save re-reads what load() reported).
std::optional<ModelFile> read_model_file(const std::filesystem::path& path, bool quiet = false) {
  const nlohmann::json json = nlohmann::json::parse(read_regular_file(path));
  if (std::optional<std::string> why = other_schema(json, "nerve.perfmodel/1")) throw ForeignModelFile(*why);
  // "kernel" is for people: bytes that are not UTF-8 read U+FFFD there. "kernel_bytes" (written
  // since) holds the name itself, percent-encoded, so such a kernel finds its model again.
  ModelFile model;
  if (!json.contains("kernel") || !json.at("kernel").is_string())
    throw std::runtime_error("\"kernel\" is missing or not a string");
  model.kernel = json.at("kernel");
  if (json.contains("kernel_bytes")) {
    const nlohmann::json& bytes = json.at("kernel_bytes");
    const std::optional<std::string> exact =
        bytes.is_string() ? percent_decoded(bytes.get<std::string>()) : std::nullopt;
    if (!exact) throw std::runtime_error("kernel_bytes is not a percent-encoded name");
    model.kernel = *exact;
  }
  // A file another name maps to (an older version's name for a kernel with other characters)
  // would shadow, or be shadowed by, the kernel's own: only the kernel's own file counts.
  if (path.filename() != file_stem(model.kernel) + ".json") {
    log::debug("performance model {} skipped: kernel '{}' is kept in {}.json", path.string(), model.kernel,
               file_stem(model.kernel));
    return std::nullopt;
  }
  const nlohmann::json& entries = model_rows(json, "entries");
  for (std::size_t index = 0; index < entries.size(); ++index) {
    const nlohmann::json& row = entries[index];
    const auto entry_field = [&](const char* name, FieldKind kind, bool required = true) {
      return row_field(row, "entries", index, name, kind, required);
    };
    const std::string device = entry_field("device", FieldKind::text)->get<std::string>();
    const nlohmann::json& footprint = *entry_field("footprint", FieldKind::number);
    const nlohmann::json& samples = *entry_field("samples", FieldKind::number);
    const nlohmann::json* outliers = entry_field("outliers", FieldKind::number, false);
    const nlohmann::json* recalibrations = entry_field("recalibrations", FieldKind::number, false);
    ModelEntry entry;
    entry.mean_ns = entry_field("mean_ns", FieldKind::number)->get<double>();
    entry.m2 = entry_field("m2", FieldKind::number)->get<double>();
    const nlohmann::json* recent = entry_field("recent_ns", FieldKind::number, false);
    entry.recent_ns = recent != nullptr ? recent->get<double>() : entry.mean_ns;
    // A calibrating entry's raw samples: its estimate (their median) and the clamping at the end of
    // calibration need them, in a later process as in this one.
    if (const nlohmann::json* calibration = entry_field("calibration_ns", FieldKind::numbers, false))
      entry.calibrating = calibration->get<std::vector<double>>();
    // A footprint is a byte count: a negative or fractional one would be read as some other number.
    if (!footprint.is_number_unsigned()) {
      if (!quiet)
        log::warn("performance model {}: entry for '{}' on {} skipped: footprint {} is not a byte count",
                  path.string(), model.kernel, device, footprint.dump());
      continue;
    }
    const auto optional_count = [](const nlohmann::json* value) {
      return value != nullptr ? count(*value) : std::optional<std::uint64_t>{0};
    };
    const std::optional<std::uint64_t> sample_count = count(samples),
                                       outlier_count = optional_count(outliers),
                                       recalibration_count = optional_count(recalibrations);
    const bool counted = sample_count && outlier_count && recalibration_count;
    if (counted) {
      entry.samples = *sample_count;
      entry.outliers = *outlier_count;
      entry.recalibrations = *recalibration_count;
    }
    if (!counted || !plausible(entry)) {
      if (quiet) continue;
      // The counts as written: 1e20, 3.7 or -1 read into an unsigned field would show as another number.
      log::warn(
          "performance model {}: entry for '{}' on {} skipped: impossible values (samples {}, "
          "mean_ns {}, m2 {}, recent_ns {}, outliers {}, recalibrations {}, {} calibration samples{}){}",
          path.string(), model.kernel, device, samples.dump(), entry.mean_ns, entry.m2, entry.recent_ns,
          outliers != nullptr ? outliers->dump() : "0",
          recalibrations != nullptr ? recalibrations->dump() : "0", entry.calibrating.size(),
          std::all_of(entry.calibrating.begin(), entry.calibrating.end(),
                      [](double ns) { return std::isfinite(ns) && ns >= 0; })
              ? ""
              : ", one of them negative or not finite",
          counted ? "" : ": a count is a whole number from 0 to 2^48");
      continue;
    }
    model.entries[{device, footprint.get<std::uint64_t>()}] = std::move(entry);
  }
  return model;
}

bool same_statistics(const ModelEntry& a, const ModelEntry& b) noexcept {
  return a.samples == b.samples && a.mean_ns == b.mean_ns && a.m2 == b.m2 &&
         a.recalibrations == b.recalibrations;
}

// merged(): `on_disk` (saved by another context or process since this one loaded `loaded`) plus what
// this one learnt on top of `loaded` to reach `learnt`: counts, means and variances combined
// (Chan et al.), as if every sample had been taken in one place.
ModelEntry merged(const ModelEntry& on_disk, const ModelEntry* loaded, const ModelEntry& learnt) {
  const ModelEntry none;
  const ModelEntry& base = loaded != nullptr ? *loaded : none;
  // Nothing new here: the disk's is the newer. Restarted here (the times changed): ours describes
  // the kernel as it runs now, which the other's older samples do not.
  if (learnt.samples <= base.samples && learnt.recalibrations == base.recalibrations) return on_disk;
  if (learnt.recalibrations != base.recalibrations || learnt.samples < base.samples) return learnt;
  // The other restarted it since: our samples are of the times it left behind.
  if (on_disk.recalibrations != base.recalibrations) return on_disk;
  // Calibration settled here, which rebuilt the statistics from clamped samples, the loaded ones
  // included: ours is no longer the loaded one plus samples of our own. The fuller side wins.
  if (base.samples < HistoryModels::calibration_samples &&
      learnt.samples >= HistoryModels::calibration_samples)
    return learnt.samples >= on_disk.samples ? learnt : on_disk;
  // Our own samples alone: the learnt statistics less the loaded ones.
  const auto n_base = static_cast<double>(base.samples);
  const auto n_learnt = static_cast<double>(learnt.samples);
  const double n_own = n_learnt - n_base;
  const double own_mean = std::max(0.0, (n_learnt * learnt.mean_ns - n_base * base.mean_ns) / n_own);
  const double own_m2 =
      std::max(0.0, learnt.m2 - base.m2 -
                        n_base * n_own / n_learnt * (base.mean_ns - own_mean) * (base.mean_ns - own_mean));
  ModelEntry result = on_disk;
  const auto n_disk = static_cast<double>(on_disk.samples);
  const double total = n_disk + n_own;
  const double delta = own_mean - on_disk.mean_ns;
  result.samples = on_disk.samples + (learnt.samples - base.samples);
  result.mean_ns = on_disk.mean_ns + delta * n_own / total;
  result.m2 = on_disk.m2 + own_m2 + delta * delta * n_disk * n_own / total;
  result.recent_ns = learnt.recent_ns;
  result.outliers = std::min(result.samples,
                             on_disk.outliers + (learnt.outliers - std::min(learnt.outliers, base.outliers)));
  result.recalibrations = std::max(on_disk.recalibrations, learnt.recalibrations);
  // Raw calibration samples: both sides' while they make up the whole count, settled once there
  // are enough; otherwise the statistics stand alone.
  result.calibrating = on_disk.calibrating;
  if (learnt.calibrating.size() >= base.calibrating.size()) {
    result.calibrating.insert(
        result.calibrating.end(),
        learnt.calibrating.begin() + static_cast<std::ptrdiff_t>(base.calibrating.size()),
        learnt.calibrating.end());
  }
  if (result.calibrating.size() != result.samples) {
    result.calibrating.clear();
  } else if (result.samples >= HistoryModels::calibration_samples) {
    settle_calibration(result);
  }
  return result;
}

}  // namespace

void HistoryModels::load() {
  if (directory_.empty()) return;
  std::error_code error;
  if (!std::filesystem::is_directory(directory_, error)) return;
  std::lock_guard lock(mutex_);
  for (const auto& file : std::filesystem::directory_iterator(directory_, error)) {
    // bus.json is the bus model's (BusModel), not a kernel's: a kernel named "bus" is kept in %62us.json.
    if (file.path().extension() != ".json" || file.path().filename() == "bus.json") continue;
    try {
      std::optional<ModelFile> model = read_model_file(file.path());
      if (!model) continue;
      for (auto& [where, entry] : model->entries) {
        const Key key{model->kernel, where.first, where.second};
        entries_[key] = entry;
        loaded_[key] = std::move(entry);
      }
    } catch (const std::exception& failure) {
      log::warn("performance model {} skipped: {}", file.path().string(), failure.what());
    }
  }
}

void HistoryModels::save() const noexcept {
  if (directory_.empty()) return;
  try {
    std::map<std::string, std::map<std::pair<std::string, std::uint64_t>, ModelEntry>> by_kernel;
    std::map<Key, ModelEntry> loaded;
    {
      std::lock_guard lock(mutex_);
      for (const auto& [key, entry] : entries_) {
        by_kernel[std::get<0>(key)][{std::get<1>(key), std::get<2>(key)}] = entry;
      }
      loaded = loaded_;
    }
    if (by_kernel.empty()) return;
    std::filesystem::create_directories(directory_);
    // One saver at a time in this directory (threads and processes): each merges the other's save.
    const FileLock lock(directory_ / "models.lock");
    if (!lock.held()) {
      log::warn(
          "performance models in {}: cannot lock {} ({}); saved without the lock, so a process saving "
          "at the same time may lose the samples of one of the two",
          directory_.string(), (directory_ / "models.lock").string(), lock.failure());
    }
    for (auto& [kernel, learnt] : by_kernel) {
      const auto path = directory_ / (file_stem(kernel) + ".json");
      // Each kernel's file alone: one that cannot be written costs that kernel's model only.
      try {
        // Another context or process may have saved this kernel since it was loaded here: its
        // entries are kept, and where both learnt the same one, the samples of both count.
        std::map<std::pair<std::string, std::uint64_t>, ModelEntry> entries;
        std::error_code missing;
        if (std::filesystem::exists(path, missing)) {
          try {
            if (std::optional<ModelFile> on_disk = read_model_file(path, /*quiet=*/true);
                on_disk && on_disk->kernel == kernel)
              entries = std::move(on_disk->entries);
          } catch (const ForeignModelFile& foreign) {  // not ours to replace (load() said it was skipped)
            log::warn("performance model for '{}' not saved: {} is kept as it is ({})", kernel, path.string(),
                      foreign.what());
            continue;
          } catch (const std::exception&) {  // an unreadable file is replaced
          }
        }
        for (auto& [where, entry] : learnt) {
          const auto base = loaded.find(Key{kernel, where.first, where.second});
          const ModelEntry* loaded_entry = base != loaded.end() ? &base->second : nullptr;
          const auto disk = entries.find(where);
          if (disk == entries.end() ||
              (loaded_entry != nullptr && same_statistics(disk->second, *loaded_entry))) {
            entries[where] = std::move(entry);  // nobody else saved it meanwhile: ours is the whole story
          } else {
            disk->second = merged(disk->second, loaded_entry, entry);
          }
        }
        nlohmann::json rows = nlohmann::json::array();
        for (const auto& [where, entry] : entries) {
          nlohmann::json row = {{"device", where.first},
                                {"footprint", where.second},
                                {"samples", entry.samples},
                                {"mean_ns", entry.mean_ns},
                                {"m2", entry.m2},
                                {"recent_ns", entry.recent_ns},
                                {"outliers", entry.outliers},
                                {"recalibrations", entry.recalibrations}};
          if (!entry.calibrating.empty()) row["calibration_ns"] = entry.calibrating;
          rows.push_back(std::move(row));
        }
        replace_file(path, json_text(nlohmann::json{{"schema", "nerve.perfmodel/1"},
                                                    {"kernel", kernel},
                                                    {"kernel_bytes", percent_encoded(kernel)},
                                                    {"entries", rows}},
                                     2) +
                               '\n');
      } catch (const std::exception& failure) {
        log::warn("performance model for '{}' not saved to {}: {}", kernel, path.string(), failure.what());
      }
    }
  } catch (const std::exception& failure) {
    log::warn("performance models not saved to {}: {}", directory_.string(), failure.what());
  }
}

}  // namespace nerve::detail
