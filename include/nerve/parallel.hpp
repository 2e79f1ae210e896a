// parallel.hpp — data-parallel loops on top of tasks.
//
// parallel_for(context, begin, end, grain, fn) calls fn(i) for every i in [begin, end) — or
// fn(chunk_begin, chunk_end) once per chunk if fn takes two indices — splitting the range in halves
// until a piece holds at most `grain` indices (grain 0: about four pieces per worker). The calling
// thread works on the range too and returns when every piece is done; the first exception thrown by
// fn, in time, is rethrown (other pieces still finish first), whichever piece — the calling thread's
// own or a spawned one — threw it; how many more fn threw is logged as one warning. begin, end and
// grain may be of any integer type (or unscoped enumerators); the indices fn gets are std::size_t,
// so a negative one is Error(invalid_argument) (converted, -5 would be a huge index and the loop
// silently empty).
//
// parallel_reduce(context, begin, end, grain, identity, map, reduce) returns
// reduce(... reduce(map(b0, e0), map(b1, e1)) ...) over the same halving tree: the tree depends only
// on the range and grain, never on timing or the worker count, so for a given grain the result has
// the same bits on every run and every number of workers. `reduce` must be associative; `identity`
// is returned for an empty range. With grain 0 the grain depends on the worker count (about four
// pieces per worker: grain = count / (4 × workers) rounded up, so the halving tree has at most 2^k
// leaves for the smallest 2^k ≥ 4 × workers, and fewer when halves fall below the grain) — unless
// parallel.deterministic_mode is on, which fixes it (grain = count / 64 rounded up, so the halving
// tree has at most 64 leaves — 33 to 64 from 64 items up — or `count` below 64, whatever the
// workers), so a floating-point reduction gives
// the same bits on every run and every worker count. As with parallel_for, the first exception
// thrown by map or reduce, in time, is rethrown once every piece has finished, and the count of the
// others is logged as one warning.
#pragma once

#include <atomic>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "nerve/context.hpp"
#include "nerve/error.hpp"

namespace nerve {
namespace detail {

// Rounded up: with count / pieces rounded down, halves one index larger than the grain were split
// once more, nearly doubling the pieces of a count that is not a multiple of a power of two.
inline std::size_t auto_grain(const ContextImpl* context, std::size_t count) noexcept {
  const std::size_t pieces = context_auto_pieces(context) == 0 ? 1 : context_auto_pieces(context);
  const std::size_t grain = count / pieces + (count % pieces != 0 ? 1 : 0);
  return grain == 0 ? 1 : grain;
}

// FirstError: the first exception that one parallel_for or parallel_reduce call's user code threw.
// A failure also unwinds through its piece's task and each enclosing group, which report in the order
// they are waited for, not the order of the throws: the calling thread's own chunk would win over a
// spawned piece that threw long before it. The others are counted, and logged as one line when the
// loop ends rather than one line per piece by the groups they unwind through.
struct FirstError {
  std::atomic<bool> set{false};
  std::exception_ptr error;  // written once, by the thread that set `set`; read after every piece ended
  std::atomic<std::uint64_t> others{0};

  template <class Call>
  decltype(auto) guard(Call&& call) {
    try {
      return call();
    } catch (...) {
      if (!set.exchange(true, std::memory_order_acq_rel)) {
        error = std::current_exception();
      } else {
        others.fetch_add(1, std::memory_order_relaxed);
      }
      throw;
    }
  }
  // Called while handling what reached the top: every piece has ended (the groups were waited for),
  // so `error` is settled. What did not come from user code (a refused submission) passes through.
  [[noreturn]] void rethrow_first(const char* loop) {
    if (const std::uint64_t dropped = others.load(std::memory_order_relaxed); dropped != 0)
      log_dropped_exceptions(loop, dropped);
    if (error != nullptr) std::rethrow_exception(error);
    throw;
  }
};

// A loop's group: the body's exceptions are counted by FirstError, not logged by the group.
struct LoopGroup : GroupState {
  LoopGroup() noexcept { quiet_failures = true; }
};

// One parallel_for call's function and first error, shared by its pieces through one pointer, so that
// a piece's closure stays as small as before.
template <class F>
struct ForShared {
  F& fn;
  FirstError first;
};

template <class Map, class Reduce>
struct ReduceShared {
  Map& map;
  Reduce& reduce;
  FirstError first;
};

template <class F>
void call_chunk(F& fn, std::size_t begin, std::size_t end) {
  if constexpr (std::is_invocable_v<F&, std::size_t, std::size_t>) {
    fn(begin, end);
  } else {
    for (std::size_t i = begin; i < end; ++i) fn(i);
  }
}

// Waits for `group` even when the calling frame is unwinding: spawned pieces reference this frame.
// Not group_wait(), which refuses a wait deep in the stack (the very refusal that may be unwinding
// this frame: a submission there is refused alike) and returned with pieces still running on the
// frame: the wait of a TaskGroup's destructor, which never returns before they end.
inline void wait_before_unwind(ContextImpl* context, GroupState& group) noexcept {
  group_destroy(context, &group);
}

// wait_for_pieces(): the loop's own wait; refused (deep in the stack), it still waits before the
// frame unwinds.
inline void wait_for_pieces(ContextImpl* context, GroupState& group) {
  try {
    group_wait(context, &group);
  } catch (...) {
    wait_before_unwind(context, group);
    throw;
  }
}

template <class F>
void parallel_for_range(ContextImpl* context, std::size_t begin, std::size_t end, std::size_t grain,
                        ForShared<F>& shared) {
  if (end - begin <= grain) {
    shared.first.guard([&] { call_chunk(shared.fn, begin, end); });
    return;
  }
  LoopGroup group;
  try {
    while (end - begin > grain) {
      const std::size_t middle = begin + (end - begin) / 2;
      submit(context, nullptr, &group, nullptr, false, [context, middle, end, grain, &shared] {
        parallel_for_range(context, middle, end, grain, shared);
      });
      end = middle;
    }
    shared.first.guard([&] { call_chunk(shared.fn, begin, end); });
  } catch (...) {
    wait_before_unwind(context, group);
    throw;
  }
  wait_for_pieces(context, group);
}

template <class T, class Map, class Reduce>
T parallel_reduce_range(ContextImpl* context, std::size_t begin, std::size_t end, std::size_t grain,
                        ReduceShared<Map, Reduce>& shared) {
  if (end - begin <= grain) return shared.first.guard([&]() -> T { return shared.map(begin, end); });
  const std::size_t middle = begin + (end - begin) / 2;
  LoopGroup group;
  std::optional<T> right;  // T need not be default-constructible
  std::optional<T> left;
  try {
    submit(context, nullptr, &group, nullptr, false, [&, middle, end] {
      right.emplace(parallel_reduce_range<T>(context, middle, end, grain, shared));
    });
    left.emplace(parallel_reduce_range<T>(context, begin, middle, grain, shared));
  } catch (...) {
    wait_before_unwind(context, group);
    throw;
  }
  wait_for_pieces(context, group);
  return shared.first.guard([&]() -> T { return shared.reduce(std::move(*left), std::move(*right)); });
}

[[noreturn]] inline void throw_bad_loop_bound(const char* loop, const char* which, const std::string& value,
                                              const char* why) {
  throw Error(ErrorCode::invalid_argument,
              std::string(loop) + ": " + which + " " + why + " (" + value + "); the indices are std::size_t");
}

// loop_bound_text(): an integer in decimal, also one wider than std::to_string() takes (the 128-bit
// integers that GNU modes count as integral).
template <class I>
std::string loop_bound_text(I value) {
  if constexpr (sizeof(I) <= sizeof(long long)) {
    return std::to_string(value);
  } else {
    bool negative = false;
    if constexpr (std::is_signed_v<I>) negative = value < 0;
    std::string reversed;
    do {
      const int digit = static_cast<int>(value % 10);
      reversed.push_back(static_cast<char>('0' + (digit < 0 ? -digit : digit)));
      value /= 10;
    } while (value != 0);
    if (negative) reversed.push_back('-');
    return std::string(reversed.rbegin(), reversed.rend());
  }
}

// loop_index(): a loop bound (an integer, or an unscoped enumerator) as the std::size_t index it
// stands for; a negative one, or one past std::size_t, is Error(invalid_argument).
template <class I>
std::size_t loop_index(I value, const char* loop, const char* which) {
  if constexpr (std::is_enum_v<I>) {
    return loop_index(+value, loop, which);  // the enumeration's promoted integer
  } else {
    if constexpr (std::is_signed_v<I>) {
      if (value < 0) throw_bad_loop_bound(loop, which, loop_bound_text(value), "is negative");
    }
    if (!std::in_range<std::size_t>(value)) {
      throw_bad_loop_bound(loop, which, loop_bound_text(value), "does not fit std::size_t");
    }
    return static_cast<std::size_t>(value);
  }
}

}  // namespace detail

// LoopBound: what begin, end and grain may be — an integer type (bool and characters aside; in GNU
// modes the 128-bit integers too) or an unscoped enumeration (which converts to one).
// (The character types are what std::in_range(), which checks the bounds, refuses: char, wchar_t,
// char8_t, char16_t, char32_t; signed char and unsigned char are integers.)
template <class T>
concept LoopBound = (std::integral<T> && !std::is_same_v<std::remove_cv_t<T>, bool> &&
                     !std::is_same_v<std::remove_cv_t<T>, char> &&
                     !std::is_same_v<std::remove_cv_t<T>, wchar_t> &&
                     !std::is_same_v<std::remove_cv_t<T>, char8_t> &&
                     !std::is_same_v<std::remove_cv_t<T>, char16_t> &&
                     !std::is_same_v<std::remove_cv_t<T>, char32_t>) ||
                    (std::is_enum_v<T> && std::is_convertible_v<T, long long>);

template <class F, LoopBound B, LoopBound E, LoopBound G>
void parallel_for(Context& context, B first, E last, G grain_bound, F&& fn) {
  detail::require_context(context.impl());  // a moved-from Context: Error(invalid_argument)
  const std::size_t begin = detail::loop_index(first, "parallel_for", "begin");
  const std::size_t end = detail::loop_index(last, "parallel_for", "end");
  std::size_t grain = detail::loop_index(grain_bound, "parallel_for", "grain");
  if (begin >= end) return;
  if (grain == 0) grain = detail::auto_grain(context.impl(), end - begin);
  detail::ForShared<F> shared{fn, {}};
  try {
    detail::parallel_for_range(context.impl(), begin, end, grain, shared);
  } catch (...) {
    shared.first.rethrow_first("parallel_for");
  }
}

template <class T, class Map, class Reduce, LoopBound B, LoopBound E, LoopBound G>
T parallel_reduce(Context& context, B first, E last, G grain_bound, T identity, Map&& map, Reduce&& reduce) {
  static_assert(std::is_invocable_r_v<T, Map&, std::size_t, std::size_t>, "map(begin, end) must return T");
  static_assert(std::is_invocable_r_v<T, Reduce&, T, T>, "reduce(T, T) must return T");
  detail::require_context(context.impl());  // a moved-from Context: Error(invalid_argument)
  const std::size_t begin = detail::loop_index(first, "parallel_reduce", "begin");
  const std::size_t end = detail::loop_index(last, "parallel_reduce", "end");
  std::size_t grain = detail::loop_index(grain_bound, "parallel_reduce", "grain");
  if (begin >= end) return identity;
  if (grain == 0) grain = detail::auto_grain(context.impl(), end - begin);
  detail::ReduceShared<Map, Reduce> shared{map, reduce, {}};
  try {
    return detail::parallel_reduce_range<T>(context.impl(), begin, end, grain, shared);
  } catch (...) {
    shared.first.rethrow_first("parallel_reduce");
  }
}

}  // namespace nerve
