// Formatting helpers shared by the text and JSON renderers.
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
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

namespace {

// utf8_sequence_length() is the length of the well-formed UTF-8 sequence at the start of `text`
// (RFC 3629: no overlong forms, no surrogates, nothing past U+10FFFF), or 0 when none starts there.
std::size_t utf8_sequence_length(std::string_view text) {
  const auto byte = [&text](std::size_t i) { return static_cast<unsigned char>(text[i]); };
  const auto continues = [&](std::size_t i, unsigned char low = 0x80, unsigned char high = 0xbf) {
    return i < text.size() && byte(i) >= low && byte(i) <= high;
  };
  const unsigned char lead = byte(0);
  if (lead < 0x80) return 1;
  if (lead >= 0xc2 && lead <= 0xdf) return continues(1) ? 2 : 0;
  if (lead >= 0xe0 && lead <= 0xef) {
    const unsigned char low = lead == 0xe0 ? 0xa0 : 0x80, high = lead == 0xed ? 0x9f : 0xbf;
    return continues(1, low, high) && continues(2) ? 3 : 0;
  }
  if (lead >= 0xf0 && lead <= 0xf4) {
    const unsigned char low = lead == 0xf0 ? 0x90 : 0x80, high = lead == 0xf4 ? 0x8f : 0xbf;
    return continues(1, low, high) && continues(2) && continues(3) ? 4 : 0;
  }
  return 0;
}

}  // namespace

// layout_control(): a code point that reorders or breaks the line around it on a terminal (bidi marks,
// embeddings, overrides and isolates; line and paragraph separators): a value could turn its row round.
bool layout_control(std::uint32_t code) {
  return code == 0x061c || code == 0x200e || code == 0x200f || code == 0x2028 || code == 0x2029 ||
         (code >= 0x202a && code <= 0x202e) || (code >= 0x2066 && code <= 0x2069);
}

// code_point(): the code point of a valid UTF-8 sequence of 2 or 3 bytes.
std::uint32_t code_point(std::string_view sequence) {
  const auto at = [&](std::size_t i) {
    return static_cast<std::uint32_t>(static_cast<unsigned char>(sequence[i]));
  };
  if (sequence.size() == 2) return ((at(0) & 0x1fu) << 6) | (at(1) & 0x3fu);
  return ((at(0) & 0x0fu) << 12) | ((at(1) & 0x3fu) << 6) | (at(2) & 0x3fu);
}

std::string printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const auto byte = static_cast<unsigned char>(text[i]);
    const std::size_t length = utf8_sequence_length(text.substr(i));
    if (length == 0) {  // not UTF-8: the byte's value
      out += fmt::format("\\x{:02x}", byte);
      ++i;
    } else if (byte == '\\') {  // so that a "\n" in the text cannot pass for an escaped newline
      out += "\\\\";
      ++i;
    } else if (byte == '\n' || byte == '\t' || byte == '\r') {
      out += byte == '\n' ? "\\n" : byte == '\t' ? "\\t" : "\\r";
      ++i;
    } else if (byte < 0x20 || byte == 0x7f) {  // C0 controls and DEL: ESC would start a sequence
      out += fmt::format("\\x{:02x}", byte);
      ++i;
    } else if (length == 2 && byte == 0xc2 && static_cast<unsigned char>(text[i + 1]) <= 0x9f) {
      // C1 controls (U+0080-U+009F): some terminals read U+009B as ESC [ too.
      out += fmt::format("\\u{:04x}", static_cast<unsigned char>(text[i + 1]));
      i += 2;
    } else if ((length == 2 || length == 3) && layout_control(code_point(text.substr(i, length)))) {
      out += fmt::format("\\u{:04x}", code_point(text.substr(i, length)));
      i += length;
    } else {
      out.append(text.substr(i, length));
      i += length;
    }
  }
  return out;
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
