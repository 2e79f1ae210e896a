// parallel.hpp — data-parallel loops on top of tasks.
//
// parallel_for(context, begin, end, grain, fn) calls fn(i) for every i in [begin, end) — or
// fn(chunk_begin, chunk_end) once per chunk if fn takes two indices — splitting the range in halves
// until a piece holds at most `grain` indices (grain 0: about four pieces per worker). The calling
// thread works on the range too and returns when every piece is done; the first exception thrown by
// fn is rethrown (other pieces still finish first).
//
// parallel_reduce(context, begin, end, grain, identity, map, reduce) returns
// reduce(... reduce(map(b0, e0), map(b1, e1)) ...) over the same halving tree: the tree depends only
// on the range and grain, never on timing or the worker count, so for a given grain the result has
// the same bits on every run and every number of workers. `reduce` must be associative; `identity`
// is returned for an empty range. With grain 0 the grain depends on the worker count (about four
// pieces per worker) — unless parallel.deterministic_mode is on, which fixes it (grain = count / 64,
// so the halving tree has 64 to 128 leaves whatever the workers), so a floating-point reduction gives
// the same bits on every run and every worker count.
#pragma once

#include <cstddef>
#include <optional>
#include <type_traits>
#include <utility>

#include "nerve/context.hpp"

namespace nerve {
namespace detail {

inline std::size_t auto_grain(const ContextImpl* context, std::size_t count) noexcept {
  const std::size_t pieces = context_auto_pieces(context);
  const std::size_t grain = count / (pieces == 0 ? 1 : pieces);
  return grain == 0 ? 1 : grain;
}

template <class F>
void call_chunk(F& fn, std::size_t begin, std::size_t end) {
  if constexpr (std::is_invocable_v<F&, std::size_t, std::size_t>) {
    fn(begin, end);
  } else {
    for (std::size_t i = begin; i < end; ++i) fn(i);
  }
}

// Waits for `group` even when the calling frame is unwinding: spawned pieces reference this frame.
inline void wait_before_unwind(ContextImpl* context, GroupState& group) noexcept {
  try {
    group_wait(context, &group);
  } catch (...) {
  }
}

template <class F>
void parallel_for_range(ContextImpl* context, std::size_t begin, std::size_t end, std::size_t grain, F& fn) {
  if (end - begin <= grain) {
    call_chunk(fn, begin, end);
    return;
  }
  GroupState group;
  try {
    while (end - begin > grain) {
      const std::size_t middle = begin + (end - begin) / 2;
      submit(context, nullptr, &group, nullptr, false,
             [context, middle, end, grain, &fn] { parallel_for_range(context, middle, end, grain, fn); });
      end = middle;
    }
    call_chunk(fn, begin, end);
  } catch (...) {
    wait_before_unwind(context, group);
    throw;
  }
  group_wait(context, &group);
}

template <class T, class Map, class Reduce>
T parallel_reduce_range(ContextImpl* context, std::size_t begin, std::size_t end, std::size_t grain, Map& map,
                        Reduce& reduce) {
  if (end - begin <= grain) return map(begin, end);
  const std::size_t middle = begin + (end - begin) / 2;
  GroupState group;
  std::optional<T> right;  // T need not be default-constructible
  std::optional<T> left;
  try {
    submit(context, nullptr, &group, nullptr, false, [&, middle, end] {
      right.emplace(parallel_reduce_range<T>(context, middle, end, grain, map, reduce));
    });
    left.emplace(parallel_reduce_range<T>(context, begin, middle, grain, map, reduce));
  } catch (...) {
    wait_before_unwind(context, group);
    throw;
  }
  group_wait(context, &group);
  return reduce(std::move(*left), std::move(*right));
}

}  // namespace detail

template <class F>
void parallel_for(Context& context, std::size_t begin, std::size_t end, std::size_t grain, F&& fn) {
  detail::require_context(context.impl());  // a moved-from Context: Error(invalid_argument)
  if (begin >= end) return;
  if (grain == 0) grain = detail::auto_grain(context.impl(), end - begin);
  detail::parallel_for_range(context.impl(), begin, end, grain, fn);
}

template <class T, class Map, class Reduce>
T parallel_reduce(Context& context, std::size_t begin, std::size_t end, std::size_t grain, T identity,
                  Map&& map, Reduce&& reduce) {
  static_assert(std::is_invocable_r_v<T, Map&, std::size_t, std::size_t>, "map(begin, end) must return T");
  static_assert(std::is_invocable_r_v<T, Reduce&, T, T>, "reduce(T, T) must return T");
  detail::require_context(context.impl());  // a moved-from Context: Error(invalid_argument)
  if (begin >= end) return identity;
  if (grain == 0) grain = detail::auto_grain(context.impl(), end - begin);
  return detail::parallel_reduce_range<T>(context.impl(), begin, end, grain, map, reduce);
}

}  // namespace nerve
