// Formatting helpers shared by the text and JSON renderers.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "report.hpp"

namespace nerve::info {

std::string format_bytes(std::uint64_t bytes) {
  constexpr double kib = 1024.0, mib = kib * 1024, gib = mib * 1024;
  const auto value = static_cast<double>(bytes);
  // One decimal below 10 units keeps "1.2 MiB" (common L2 sizes) without cluttering "48 KiB".
  const auto scaled = [](double amount, const char* unit) {
    return amount < 10 && amount != static_cast<std::uint64_t>(amount)
               ? fmt::format("{:.1f} {}", amount, unit)
               : fmt::format("{:.0f} {}", amount, unit);
  };
  if (value >= gib) return scaled(value / gib, "GiB");
  if (value >= mib) return scaled(value / mib, "MiB");
  if (value >= kib) return scaled(value / kib, "KiB");
  return fmt::format("{} B", bytes);
}

std::string format_cpu_list(std::vector<int> cpus) {
  std::ranges::sort(cpus);
  std::string text;
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t end = i;
    while (end + 1 < cpus.size() && cpus[end + 1] == cpus[end] + 1) ++end;
    if (!text.empty()) text += ',';
    text += end == i ? fmt::format("{}", cpus[i]) : fmt::format("{}-{}", cpus[i], cpus[end]);
    i = end + 1;
  }
  return text;
}

std::string affinity_name(ThreadAffinity affinity) {
  switch (affinity) {
    case ThreadAffinity::none: return "none";
    case ThreadAffinity::compact: return "compact";
    case ThreadAffinity::scatter: return "scatter";
  }
  return "unknown";
}

}  // namespace nerve::info
