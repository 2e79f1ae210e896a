// available_cpu_count(): the affinity mask capped by the cgroup CPU bandwidth quota.
//
// Containers commonly limit CPU time (docker --cpus=1.5) without limiting the CPUs a process may run
// on; a pool sized by the affinity mask alone would then oversubscribe its quota and be throttled.
#include <algorithm>
#include <charconv>
#include <fstream>
#include <string>
#include <system_error>

#include "topology/affinity.hpp"

namespace nerve::topology {
namespace {

namespace fs = std::filesystem;

std::optional<long long> parse_integer(const std::string& text) {
  long long value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::optional<unsigned> cpus_from_quota(long long quota, long long period) {
  if (quota <= 0 || period <= 0) return std::nullopt;
  // A partial CPU still needs a thread: the quotient rounded up, without `quota + period - 1`, which
  // overflows for a quota near the largest long long (cpu.max is a file, and may say anything).
  const long long cpus = quota / period + (quota % period != 0 ? 1 : 0);
  return static_cast<unsigned>(std::clamp<long long>(cpus, 1, 1 << 20));
}

// cgroup v2: cpu.max holds "<quota> <period>" or "max <period>".
std::optional<unsigned> read_v2(const fs::path& directory) {
  std::ifstream file(directory / "cpu.max");
  std::string quota, period;
  if (!(file >> quota >> period) || quota == "max") return std::nullopt;
  const auto quota_value = parse_integer(quota);
  const auto period_value = parse_integer(period);
  if (!quota_value || !period_value) return std::nullopt;
  return cpus_from_quota(*quota_value, *period_value);
}

std::optional<long long> read_integer_file(const fs::path& path) {
  std::ifstream file(path);
  std::string text;
  if (!(file >> text)) return std::nullopt;
  return parse_integer(text);
}

// cgroup v1: cpu.cfs_quota_us (-1 = unlimited) over cpu.cfs_period_us.
std::optional<unsigned> read_v1(const fs::path& directory) {
  const auto quota = read_integer_file(directory / "cpu.cfs_quota_us");
  const auto period = read_integer_file(directory / "cpu.cfs_period_us");
  if (!quota || !period) return std::nullopt;
  return cpus_from_quota(*quota, *period);
}

void take_minimum(std::optional<unsigned>& limit, std::optional<unsigned> candidate) {
  if (candidate && (!limit || *candidate < *limit)) limit = candidate;
}

// limit_along_path() is the smallest quota from `mount`/`relative` up to `mount`: a parent cgroup's
// quota limits all its children. Directories that do not exist (a host path seen from inside a
// container's own cgroup mount) are skipped.
std::optional<unsigned> limit_along_path(const fs::path& mount, const fs::path& relative) {
  std::optional<unsigned> limit;
  std::error_code error;
  fs::path directory = mount;
  take_minimum(limit, cgroup_cpu_limit(directory));
  for (const fs::path& component : relative.relative_path().lexically_normal()) {
    if (component.empty() || component == "." || component == "..") continue;
    directory /= component;
    if (!fs::is_directory(directory, error)) break;
    take_minimum(limit, cgroup_cpu_limit(directory));
  }
  return limit;
}

bool has_cpu_controller(const std::string& controllers) {
  std::size_t start = 0;
  while (start <= controllers.size()) {
    const std::size_t end = std::min(controllers.find(',', start), controllers.size());
    if (controllers.compare(start, end - start, "cpu") == 0) return true;
    start = end + 1;
  }
  return false;
}

// process_cgroup_limit() follows /proc/self/cgroup: "0::<path>" for cgroup v2 (mounted at
// /sys/fs/cgroup), "<id>:<controllers>:<path>" with a cpu controller for v1.
std::optional<unsigned> process_cgroup_limit() {
  std::optional<unsigned> limit;
  std::ifstream file("/proc/self/cgroup");
  for (std::string line; std::getline(file, line);) {
    const std::size_t first = line.find(':');
    const std::size_t second = first == std::string::npos ? first : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const fs::path path = line.substr(second + 1);
    if (line.compare(0, first, "0") == 0 && controllers.empty()) {
      take_minimum(limit, limit_along_path("/sys/fs/cgroup", path));
    } else if (has_cpu_controller(controllers)) {
      take_minimum(limit, limit_along_path("/sys/fs/cgroup/cpu,cpuacct", path));
      take_minimum(limit, limit_along_path("/sys/fs/cgroup/cpu", path));
    }
  }
  return limit;
}

unsigned capped(std::optional<unsigned> limit) {
  const auto cpus = static_cast<unsigned>(current_thread_cpus().size());
  const unsigned count = limit ? std::min(cpus, *limit) : cpus;
  return std::max(count, 1u);
}

}  // namespace

std::optional<unsigned> cgroup_cpu_limit(const fs::path& cgroup_dir) {
  std::error_code error;
  if (fs::exists(cgroup_dir / "cpu.max", error)) return read_v2(cgroup_dir);
  return read_v1(cgroup_dir);
}

unsigned available_cpu_count() { return capped(process_cgroup_limit()); }

unsigned available_cpu_count(const fs::path& cgroup_dir) { return capped(cgroup_cpu_limit(cgroup_dir)); }

}  // namespace nerve::topology
