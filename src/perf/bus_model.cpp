#include "perf/bus_model.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <fstream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "nerve/error.hpp"

#include "memory/memory_node.hpp"
#include "perf/model_schema.hpp"
#include "util/json_text.hpp"
#include "util/log.hpp"
#include "util/monotonic_clock.hpp"
#include "util/regular_file.hpp"
#include "util/replace_file.hpp"

namespace nerve::detail {
namespace {

constexpr std::string_view bus_schema = "nerve.busmodel/1";

// One copy's completion, waited for by the calibrating thread.
struct CopyWaiter final : CopyCompletion {
  std::mutex mutex;
  std::condition_variable landed;
  bool done = false;
  bool ok = false;
  std::string error;
  void copy_done(bool success, const std::string& text) noexcept override {
    std::lock_guard lock(mutex);
    done = true;
    ok = success;
    error = text;
    landed.notify_one();
  }
};

// Storage for calibration copies on one node, from the node itself: on the host a buffer's memory,
// so that copies of it take the path real buffers take (page-locked in place from 1 MiB on). As much
// as `wanted` when the node has room for it, else the largest half, quarter, ... of it that fits,
// down to `least`: a device smaller than the usual bandwidth copy is still measured, with copies it
// can hold. bytes() is 0 when it has no room even for `least`.
class Scratch {
 public:
  Scratch(MemoryNode& node, std::size_t wanted, std::size_t least) : node_(node) {
    for (std::size_t bytes = wanted; data_ == nullptr && bytes >= least && bytes != 0; bytes /= 2) {
      try {
        data_ = node.try_allocate(bytes);
      } catch (const Error& error) {  // a size the device refuses itself: a smaller one may do
        if (error.code() != ErrorCode::out_of_memory) throw;
      }
      if (data_ != nullptr) bytes_ = bytes;
    }
    if (data_ != nullptr && node.is_host()) std::fill_n(data_, bytes_, std::byte{0x5a});
  }
  ~Scratch() {
    if (data_ != nullptr) node_.deallocate(data_, bytes_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  std::byte* data() const noexcept { return data_; }
  std::size_t bytes() const noexcept { return bytes_; }

 private:
  MemoryNode& node_;
  std::size_t bytes_ = 0;
  std::byte* data_ = nullptr;
};

// time_copy(): one asynchronous copy from start to its completion, in ns.
double time_copy(MemoryNode& from, const std::byte* source, MemoryNode& to, std::byte* destination,
                 std::size_t bytes) {
  CopyWaiter waiter;
  const std::int64_t start = monotonic_ns();
  MemoryNode::copy(from, source, to, destination, bytes, waiter);
  std::unique_lock lock(waiter.mutex);
  waiter.landed.wait(lock, [&] { return waiter.done; });
  const std::int64_t end = monotonic_ns();
  if (!waiter.ok) {
    throw Error(ErrorCode::internal,
                fmt::format("bus calibration: copying {} bytes from '{}' to '{}' failed: {}", bytes,
                            from.name(), to.name(), waiter.error));
  }
  return static_cast<double>(end - start);
}

// fastest(): the quickest of repeated copies. Noise only ever adds time (a copy thread descheduled
// on a loaded machine took 5.7 ms for 64 bytes in CI, three times out of five), so the minimum is
// the link's own cost; a median still took such a run for the latency.
double fastest(const std::vector<double>& values) { return *std::min_element(values.begin(), values.end()); }

// measure_link(): the latency and bandwidth of one ordered pair, with copies of `large_bytes` (which
// both ends have room for) for the bandwidth.
BusLink measure_link(MemoryNode& source, const Scratch& from, MemoryNode& destination, const Scratch& to,
                     const BusCalibrationSizes& sizes, std::size_t large_bytes) {
  // One untimed copy first: the first use of a path may set up queues, staging or pages.
  time_copy(source, from.data(), destination, to.data(), sizes.small_bytes);
  std::vector<double> small, large;
  for (int i = 0; i < sizes.small_copies; ++i)
    small.push_back(time_copy(source, from.data(), destination, to.data(), sizes.small_bytes));
  for (int i = 0; i < sizes.large_copies; ++i)
    large.push_back(time_copy(source, from.data(), destination, to.data(), large_bytes));
  BusLink link;
  link.latency_ns = fastest(small);
  // A large copy that was barely slower than a small one (noise): bandwidth from its whole time.
  const double streaming = fastest(large) - link.latency_ns;
  link.bytes_per_ns = static_cast<double>(large_bytes) / std::max(streaming, fastest(large) * 0.05);
  return link;
}

}  // namespace

BusModel::BusModel(std::filesystem::path directory) : directory_(std::move(directory)) {}

std::filesystem::path BusModel::file() const {
  return directory_.empty() ? directory_ : directory_ / "bus.json";
}

bool BusModel::ensure_calibrated(const std::vector<MemoryNode*>& nodes, const BusCalibrationSizes& sizes) {
  std::lock_guard lock(mutex_);
  if (names_.size() == nodes.size()) return false;  // already measured or loaded for these nodes
  if (load_locked(nodes)) return false;
  measure_locked(nodes, sizes);
  save_locked();
  return true;
}

void BusModel::calibrate(const std::vector<MemoryNode*>& nodes, const BusCalibrationSizes& sizes) {
  std::lock_guard lock(mutex_);
  measure_locked(nodes, sizes);
  save_locked();
}

void BusModel::measure_locked(const std::vector<MemoryNode*>& nodes, const BusCalibrationSizes& sizes) {
  const std::size_t n = nodes.size();
  std::vector<BusLink> links(n * n);
  std::vector<std::unique_ptr<Scratch>> scratch;
  scratch.reserve(n);
  for (MemoryNode* node : nodes) {
    scratch.push_back(std::make_unique<Scratch>(*node, sizes.large_bytes, sizes.small_bytes));
    if (scratch.back()->bytes() == 0) {
      log::warn("bus calibration: memory node '{}' has no room for {} bytes: its links are not measured",
                node->name(), sizes.small_bytes);
    } else if (scratch.back()->bytes() < sizes.large_bytes) {
      log::debug(
          "bus calibration: memory node '{}' has room for {} bytes: its bandwidth is measured with "
          "copies of that size",
          node->name(), scratch.back()->bytes());
    }
  }
  // Each pair on its own: one that cannot be measured leaves its link unmeasured (heft predicts its
  // transfers as free) and the others are kept.
  for (std::size_t from = 0; from < n; ++from) {
    for (std::size_t to = 0; to < n; ++to) {
      if (from == to || (nodes[from]->is_host() && nodes[to]->is_host())) continue;
      const std::size_t large_bytes = std::min(scratch[from]->bytes(), scratch[to]->bytes());
      if (large_bytes == 0) continue;  // said above
      try {
        links[from * n + to] =
            measure_link(*nodes[from], *scratch[from], *nodes[to], *scratch[to], sizes, large_bytes);
      } catch (const Error& error) {
        log::warn(
            "bus calibration: the link from '{}' to '{}' is not measured ({}); heft predicts its "
            "transfers as free",
            nodes[from]->name(), nodes[to]->name(), error.what());
      }
    }
  }
  adopt_locked(nodes, std::move(links));
  ++measurements_;
  log::debug("bus calibrated over {} memory nodes", n);
}

void BusModel::adopt_locked(const std::vector<MemoryNode*>& nodes, std::vector<BusLink> links) {
  names_.clear();
  for (MemoryNode* node : nodes) names_.push_back(node->name());
  links_ = std::move(links);
  node_count_.store(names_.size(), std::memory_order_release);
}

bool BusModel::load_locked(const std::vector<MemoryNode*>& nodes) {
  const auto path = file();
  std::error_code error;
  if (path.empty() || !std::filesystem::exists(path, error)) return false;
  try {
    const nlohmann::json json = nlohmann::json::parse(read_regular_file(path));
    // Another schema's file (a newer nerve's) is measured around, not replaced: save_locked() keeps it.
    if (const std::optional<std::string> why = other_schema(json, bus_schema)) {
      log::warn("bus model {} skipped: {}; the bus is measured, and the file kept as it is", path.string(),
                *why);
      return false;
    }
    // Every link is checked for shape first, so that a misshapen one is named wherever it stands.
    const nlohmann::json& rows = model_rows(json, "links");
    for (std::size_t index = 0; index < rows.size(); ++index) {
      for (const char* name : {"from", "to"}) row_field(rows[index], "links", index, name, FieldKind::text);
      for (const char* name : {"latency_ns", "bytes_per_second"})
        row_field(rows[index], "links", index, name, FieldKind::number);
    }
    const std::size_t n = nodes.size();
    std::vector<BusLink> links(n * n);
    std::size_t found = 0, wanted = 0;
    for (std::size_t from = 0; from < n; ++from) {
      for (std::size_t to = 0; to < n; ++to) {
        if (from == to || (nodes[from]->is_host() && nodes[to]->is_host())) continue;
        ++wanted;
        for (const auto& row : rows) {
          if (row["from"] == nodes[from]->name() && row["to"] == nodes[to]->name()) {
            const double latency_ns = row["latency_ns"].get<double>();
            const double bytes_per_second = row["bytes_per_second"].get<double>();
            // A day of latency or a petabyte per second is no measurement of this machine's bus.
            if (!std::isfinite(latency_ns) || latency_ns < 0 || latency_ns > 8.64e13 ||
                !std::isfinite(bytes_per_second) || bytes_per_second <= 0 || bytes_per_second > 1e15) {
              log::warn(
                  "bus model {}: link {} -> {} has impossible values (latency_ns {}, bytes_per_second "
                  "{}): the bus is measured again",
                  path.string(), nodes[from]->name(), nodes[to]->name(), latency_ns, bytes_per_second);
              return false;
            }
            links[from * n + to] = BusLink{latency_ns, bytes_per_second / 1e9};
            ++found;
            break;
          }
        }
      }
    }
    if (found != wanted) return false;
    adopt_locked(nodes, std::move(links));
    return true;
  } catch (const std::exception& failure) {
    log::warn("bus model {} ignored: {}", path.string(), failure.what());
    return false;
  }
}

std::string BusModel::save_error() const {
  std::lock_guard lock(mutex_);
  return save_error_;
}

void BusModel::save_locked() const noexcept {
  save_error_.clear();
  if (directory_.empty()) return;
  try {
    std::filesystem::create_directories(directory_);
    const FileLock lock(directory_ /
                        "models.lock");  // the old file is read, merged and replaced by one saver
    if (!lock.held()) {
      log::warn("bus model in {}: cannot lock {} ({}); saved without the lock", directory_.string(),
                (directory_ / "models.lock").string(), lock.failure());
    }
    // Keep links of nodes absent now (another device set may come back), replace the measured ones.
    nlohmann::json rows = nlohmann::json::array();
    const std::size_t n = names_.size();
    std::error_code error;
    if (std::filesystem::exists(file(), error)) {
      std::optional<nlohmann::json> old;
      try {
        old = nlohmann::json::parse(read_regular_file(file()));
      } catch (const std::exception&) {  // an unreadable old file is replaced
      }
      // Another schema's file is not ours to replace (load_locked() said it was skipped).
      if (const std::optional<std::string> why = old ? other_schema(*old, bus_schema) : std::nullopt)
        throw std::runtime_error(fmt::format("{} is kept as it is ({})", file().string(), *why));
      try {
        if (old) {
          for (const auto& row : old->at("links")) {
            const bool current = std::find(names_.begin(), names_.end(), row.at("from")) != names_.end() &&
                                 std::find(names_.begin(), names_.end(), row.at("to")) != names_.end();
            if (!current) rows.push_back(row);
          }
        }
      } catch (const std::exception&) {  // links that cannot be read are dropped
      }
    }
    for (std::size_t from = 0; from < n; ++from) {
      for (std::size_t to = 0; to < n; ++to) {
        const BusLink& link = links_[from * n + to];
        if (!link.measured()) continue;
        rows.push_back({{"from", names_[from]},
                        {"to", names_[to]},
                        {"latency_ns", link.latency_ns},
                        {"bytes_per_second", link.bytes_per_ns * 1e9}});
      }
    }
    replace_file(file(), json_text(nlohmann::json{{"schema", bus_schema}, {"links", rows}}, 2) + '\n');
  } catch (const std::exception& failure) {
    log::warn("bus model not saved to {}: {}", directory_.string(), failure.what());
    try {
      save_error_ = failure.what();
    } catch (...) {
    }
  }
}

BusLink BusModel::link(unsigned from, unsigned to) const {
  std::lock_guard lock(mutex_);
  const std::size_t n = names_.size();
  if (from >= n || to >= n) return {};
  return links_[from * n + to];
}

double BusModel::transfer_ns(unsigned from, unsigned to, std::size_t bytes) const {
  if (bytes == 0 || from == to) return 0;
  const BusLink bus = link(from, to);
  if (!bus.measured()) return 0;
  return bus.latency_ns + static_cast<double>(bytes) / bus.bytes_per_ns;
}

std::vector<std::string> BusModel::node_names() const {
  std::lock_guard lock(mutex_);
  return names_;
}

}  // namespace nerve::detail
