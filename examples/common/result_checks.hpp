// result_checks.hpp — the examples' comparisons of a result with its reference, written so that a NaN
// or an infinity fails them. Every comparison with NaN is false: `difference > tolerance` lets a NaN
// through as "close enough", and std::max(worst, NaN) keeps `worst`, so a result full of NaNs would
// check as exact.
#pragma once

#include <cmath>
#include <concepts>
#include <limits>

namespace nerve_examples {

// larger_difference(): the larger of two differences, a difference that is not finite (NaN included)
// counting as +infinity, so that a running maximum cannot lose it.
template <std::floating_point T>
T larger_difference(T worst, T difference) {
  if (!std::isfinite(difference)) return std::numeric_limits<T>::infinity();
  return worst < difference ? difference : worst;
}

// close_enough(): `result` is within `relative_tolerance` · (1 + |expected|) of `expected`; false
// whenever the difference is not finite (either is NaN or infinite).
template <std::floating_point T>
bool close_enough(T result, T expected, T relative_tolerance) {
  const T difference = std::abs(result - expected);
  return std::isfinite(difference) && difference <= relative_tolerance * (1 + std::abs(expected));
}

}  // namespace nerve_examples
