#include "config/suggest.hpp"

#include <algorithm>
#include <numeric>
#include <vector>

#include <fmt/format.h>

namespace nerve::config {
namespace {

char lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

}  // namespace

std::string to_lower_ascii(std::string_view text) {
  std::string result(text);
  for (char& c : result) c = lower(c);
  return result;
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  // Classic two-row dynamic programme; inputs are short (keys, enum words), so O(|a|·|b|) is fine.
  std::vector<std::size_t> previous(b.size() + 1);
  std::vector<std::size_t> current(b.size() + 1);
  std::iota(previous.begin(), previous.end(), std::size_t{0});
  for (std::size_t i = 1; i <= a.size(); ++i) {
    current[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t substitution = previous[j - 1] + (lower(a[i - 1]) == lower(b[j - 1]) ? 0 : 1);
      current[j] = std::min({previous[j] + 1, current[j - 1] + 1, substitution});
    }
    std::swap(previous, current);
  }
  return previous[b.size()];
}

std::optional<std::string> closest_match(std::string_view word, std::span<const std::string> candidates) {
  const std::size_t allowed = std::max<std::size_t>(2, word.size() / 3);
  std::optional<std::string> best;
  std::size_t best_distance = allowed + 1;
  for (const std::string& candidate : candidates) {
    const std::size_t distance = edit_distance(word, candidate);
    // A candidate that would have to be rewritten entirely is not a typo of `word`, and `word`
    // itself is no suggestion: its problem is not its spelling (another letter case still is).
    if (distance < best_distance && distance < candidate.size() && candidate != word) {
      best = candidate;
      best_distance = distance;
    }
  }
  return best;
}

std::string did_you_mean(std::string_view word, std::span<const std::string> candidates) {
  if (auto match = closest_match(word, candidates)) return fmt::format(" (did you mean '{}'?)", *match);
  return {};
}

}  // namespace nerve::config
