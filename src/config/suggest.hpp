// suggest.hpp — "did you mean ...?" suggestions for misspelt keys, sections, values and variables.
//
// Pure functions over their arguments; safe to call from any thread.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace nerve::config {

// to_lower_ascii() lower-cases ASCII letters only (configuration words are ASCII; other bytes are
// left alone rather than interpreted in some locale).
std::string to_lower_ascii(std::string_view text);

// edit_distance() is the Levenshtein distance between `a` and `b`, ignoring ASCII case (a user who
// writes EAGER meant eager).
std::size_t edit_distance(std::string_view a, std::string_view b);

// closest_match() gives the candidate nearest to `word`, or nothing when none is near enough to be a
// plausible typo (distance at most a third of the word's length, and at least 2 allowed).
std::optional<std::string> closest_match(std::string_view word, std::span<const std::string> candidates);

// did_you_mean() formats closest_match() as " (did you mean 'x'?)", or "" when there is no match.
std::string did_you_mean(std::string_view word, std::span<const std::string> candidates);

}  // namespace nerve::config
