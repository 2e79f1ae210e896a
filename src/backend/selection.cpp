#include "backend/selection.hpp"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "config/diagnostics.hpp"

namespace nerve::detail {
namespace {

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool all_digits(std::string_view text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

std::string describe_found(const std::vector<DeviceInfo>& found) {
  if (found.empty()) return "none";
  std::string out;
  for (std::size_t i = 0; i < found.size(); ++i) {
    out += fmt::format("{}{} '{}' ({})", i == 0 ? "" : ", ", i, found[i].name, found[i].backend);
  }
  return out;
}

std::vector<std::size_t> select_devices(const std::vector<DeviceInfo>& found,
                                        const std::vector<std::string>& words, const ConfigOrigin& origin,
                                        const std::vector<BackendWithoutDevices>& without_devices) {
  constexpr std::string_view key = "gpu.devices";
  auto fail = [&](const std::string& why) {
    config::throw_config_error(
        origin, key,
        fmt::format("{}: {}; the accelerators found are (numbered for gpu.devices from 0, the CPU workers "
                    "are not among them): {}",
                    key, why, describe_found(found)));
  };
  std::vector<bool> chosen(found.size(), false);
  for (const std::string& word : words) {
    const std::string wanted = lower(word);
    if (wanted == "all" || wanted == "none") {
      if (words.size() != 1) fail(fmt::format("'{}' cannot be combined with other items", word));
      if (wanted == "all") std::fill(chosen.begin(), chosen.end(), true);
      continue;
    }
    if (all_digits(wanted)) {
      const std::size_t index = wanted.size() > 6 ? found.size() : std::stoul(wanted);
      if (index >= found.size()) fail(fmt::format("there is no accelerator {}", word));
      chosen[index] = true;
      continue;
    }
    bool matched = false;
    for (std::size_t i = 0; i < found.size(); ++i) {
      if (lower(found[i].backend) == wanted || lower(found[i].name).find(wanted) != std::string::npos) {
        chosen[i] = true;
        matched = true;
      }
    }
    if (matched) continue;
    // A backend of this build (or a loaded plugin) that found nothing: say so, with its reason, rather
    // than suggest the name is wrong.
    const auto empty =
        std::find_if(without_devices.begin(), without_devices.end(),
                     [&](const BackendWithoutDevices& each) { return lower(each.name) == wanted; });
    if (empty != without_devices.end()) {
      fail(fmt::format("the {} '{}' {} but found no device{}{}", empty->plugin ? "plugin backend" : "backend",
                       empty->name, empty->plugin ? "was loaded" : "is in this build",
                       empty->reason.empty() ? "" : ", and says why: ", empty->reason));
    }
    fail(fmt::format("no accelerator or backend is named like '{}'", word));
  }
  std::vector<std::size_t> selected;
  for (std::size_t i = 0; i < found.size(); ++i) {
    if (chosen[i]) selected.push_back(i);
  }
  return selected;
}

}  // namespace nerve::detail
