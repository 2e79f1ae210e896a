#include "perf/history_model.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "util/fnv1a.hpp"
#include "util/json_text.hpp"
#include "util/log.hpp"

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

bool plausible(const ModelEntry& entry) {
  const auto time = [](double ns) { return std::isfinite(ns) && ns >= 0; };
  return entry.samples <= max_samples && time(entry.mean_ns) && time(entry.m2) && time(entry.recent_ns) &&
         entry.outliers <= entry.samples &&
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

std::filesystem::path HistoryModels::default_directory() {
  if (const char* cache = std::getenv("XDG_CACHE_HOME"); cache != nullptr && cache[0] != '\0')
    return std::filesystem::path(cache) / "nerve" / "perfmodels";
  if (const char* home = std::getenv("HOME"); home != nullptr && home[0] != '\0')
    return std::filesystem::path(home) / ".cache" / "nerve" / "perfmodels";
  return std::filesystem::temp_directory_path() / "nerve-perfmodels";
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

void HistoryModels::load() {
  if (directory_.empty()) return;
  std::error_code error;
  if (!std::filesystem::is_directory(directory_, error)) return;
  std::lock_guard lock(mutex_);
  for (const auto& file : std::filesystem::directory_iterator(directory_, error)) {
    // bus.json is the bus model's (BusModel), not a kernel's: a kernel named "bus" is kept in %62us.json.
    if (file.path().extension() != ".json" || file.path().filename() == "bus.json") continue;
    try {
      std::ifstream in(file.path());
      const nlohmann::json json = nlohmann::json::parse(in);
      if (json.value("schema", "") != "nerve.perfmodel/1") continue;
      // "kernel" is for people: bytes that are not UTF-8 read U+FFFD there. "kernel_bytes" (written
      // since) holds the name itself, percent-encoded, so such a kernel finds its model again.
      std::string kernel = json.at("kernel");
      if (json.contains("kernel_bytes")) {
        const std::optional<std::string> exact = percent_decoded(json.at("kernel_bytes").get<std::string>());
        if (!exact) throw std::runtime_error("kernel_bytes is not a percent-encoded name");
        kernel = *exact;
      }
      // A file another name maps to (an older version's name for a kernel with other characters)
      // would shadow, or be shadowed by, the kernel's own: only the kernel's own file counts.
      if (file.path().filename() != file_stem(kernel) + ".json") {
        log::debug("performance model {} skipped: kernel '{}' is kept in {}.json", file.path().string(),
                   kernel, file_stem(kernel));
        continue;
      }
      for (const auto& row : json.at("entries")) {
        ModelEntry entry;
        entry.samples = row.at("samples");
        entry.mean_ns = row.at("mean_ns");
        entry.m2 = row.at("m2");
        entry.recent_ns = row.value("recent_ns", entry.mean_ns);
        entry.outliers = row.value("outliers", std::uint64_t{0});
        entry.recalibrations = row.value("recalibrations", std::uint64_t{0});
        // A calibrating entry's raw samples: its estimate (their median) and the clamping at the end of
        // calibration need them, in a later process as in this one.
        if (row.contains("calibration_ns"))
          entry.calibrating = row.at("calibration_ns").get<std::vector<double>>();
        if (!plausible(entry)) {
          log::warn(
              "performance model {}: entry for '{}' on {} skipped: impossible values (samples {}, "
              "mean_ns {}, m2 {}, recent_ns {}, outliers {}, {} calibration samples{})",
              file.path().string(), kernel, row.at("device").get<std::string>(), entry.samples, entry.mean_ns,
              entry.m2, entry.recent_ns, entry.outliers, entry.calibrating.size(),
              std::all_of(entry.calibrating.begin(), entry.calibrating.end(),
                          [](double ns) { return std::isfinite(ns) && ns >= 0; })
                  ? ""
                  : ", one of them negative or not finite");
          continue;
        }
        entries_[Key{kernel, row.at("device").get<std::string>(), row.at("footprint").get<std::uint64_t>()}] =
            entry;
      }
    } catch (const std::exception& failure) {
      log::warn("performance model {} skipped: {}", file.path().string(), failure.what());
    }
  }
}

void HistoryModels::save() const noexcept {
  if (directory_.empty()) return;
  try {
    std::map<std::string, nlohmann::json> by_kernel;
    for (const ModelRow& row : rows()) {
      nlohmann::json entry = {{"device", row.device},
                              {"footprint", row.footprint},
                              {"samples", row.entry.samples},
                              {"mean_ns", row.entry.mean_ns},
                              {"m2", row.entry.m2},
                              {"recent_ns", row.entry.recent_ns},
                              {"outliers", row.entry.outliers},
                              {"recalibrations", row.entry.recalibrations}};
      if (!row.entry.calibrating.empty()) entry["calibration_ns"] = row.entry.calibrating;
      by_kernel[row.kernel].push_back(std::move(entry));
    }
    if (by_kernel.empty()) return;
    std::filesystem::create_directories(directory_);
    for (const auto& [kernel, entries] : by_kernel) {
      const auto path = directory_ / (file_stem(kernel) + ".json");
      const auto temporary = std::filesystem::path(path.string() + ".tmp");
      {
        std::ofstream out(temporary);
        out << json_text(nlohmann::json{{"schema", "nerve.perfmodel/1"},
                                        {"kernel", kernel},
                                        {"kernel_bytes", percent_encoded(kernel)},
                                        {"entries", entries}},
                         2)
            << '\n';
        if (!out) throw std::runtime_error("cannot write " + temporary.string());
      }
      std::filesystem::rename(temporary, path);
    }
  } catch (const std::exception& failure) {
    log::warn("performance models not saved to {}: {}", directory_.string(), failure.what());
  }
}

}  // namespace nerve::detail
