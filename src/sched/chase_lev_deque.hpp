// chase_lev_deque.hpp — the per-worker work-stealing deque.
//
// Chase–Lev dynamic circular deque with the C11 memory orders of Lê, Pop, Cohen and Zappa Nardelli,
// "Correct and Efficient Work-Stealing for Weak Memory Models" (PPoPP'13). Where the paper uses
// stand-alone fences we use the equivalent seq_cst operations on top/bottom instead: the code is as
// fast on x86-64 (the same instructions) and ThreadSanitizer understands it.
//
// Batches: steal_batch() takes up to max_batch of the oldest items with one compare-and-swap of top
// (half of what is there, rounded up, like the steal-half queues of Hendler and Shavit). A thief may
// have read bottom before the owner's latest pops, so the owner takes its newest item without a
// compare-and-swap only when at least max_batch items lie between it and top; nearer the top it
// claims the rest with a compare-and-swap and pushes back all but the newest. With max_batch 1
// this is exactly the original algorithm.
//
// Threads: push() and pop() only by the owner; steal() and steal_batch() by any thread. Ownership may move to
// another thread if the hand-over itself is a release/acquire pair (the master slot's occupant changes so).
// Memory ordering: an item pushed happens-before the pop() or steal() that returns it.
// Old arrays are kept until destruction, so a thief reading a stale array pointer stays safe.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace nerve {

template <class T>
class ChaseLevDeque {
  static_assert(std::is_pointer_v<T>, "the deque stores pointers; nullptr means empty");

 public:
  // `max_batch`: the most items one steal_batch() may take (1: steal one at a time).
  explicit ChaseLevDeque(std::size_t initial_capacity = 256, std::size_t max_batch = 1)
      : max_batch_(static_cast<std::int64_t>(std::max<std::size_t>(max_batch, 1))) {
    std::size_t capacity = 1;
    while (capacity < initial_capacity) capacity <<= 1;
    arrays_.push_back(std::make_unique<Array>(capacity));
    array_.store(arrays_.back().get(), std::memory_order_relaxed);
  }
  ChaseLevDeque(const ChaseLevDeque&) = delete;
  ChaseLevDeque& operator=(const ChaseLevDeque&) = delete;

  // push() adds an item at the bottom (owner only). Returns true if the deque was empty before: only
  // then must sleeping thieves be woken (see Scheduler::notify_work).
  bool push(T item) {
    const std::int64_t bottom = bottom_.load(std::memory_order_relaxed);
    Array* array = array_.load(std::memory_order_relaxed);
    // Reading top_ pulls the thieves' cache line over; a stale lower bound is enough unless the
    // array looks full (top only grows), so re-read it only then.
    if (bottom - top_cache_ > static_cast<std::int64_t>(array->mask)) {
      top_cache_ = top_.load(std::memory_order_acquire);
      if (bottom - top_cache_ > static_cast<std::int64_t>(array->mask))
        array = grow(array, top_cache_, bottom);
    }
    array->put(bottom, item);
    bottom_.store(bottom + 1, std::memory_order_release);
    // top_cache_ is a lower bound of top: "empty" by it is certain; "non-empty" is checked against
    // the real top, which thieves may have moved.
    // Acquire: the capacity check of a later push trusts top_cache_, and the slots a thief's CAS gave
    // up are overwritten only after its read of them (Lê et al. load top with acquire here too).
    return bottom <= top_cache_ || bottom <= (top_cache_ = top_.load(std::memory_order_acquire));
  }

  // pop() takes the most recently pushed item (owner only); nullptr when empty.
  T pop() {
    const std::int64_t bottom = bottom_.load(std::memory_order_relaxed) - 1;
    Array* array = array_.load(std::memory_order_relaxed);
    bottom_.store(bottom, std::memory_order_seq_cst);
    std::int64_t top = top_.load(std::memory_order_seq_cst);
    top_cache_ = top;
    // No thief can take `bottom` here: a batch that succeeds starts at `top` or later (it compares
    // and swaps top) and holds at most max_batch items.
    if (bottom - top >= max_batch_) return array->get(bottom);
    // Within a batch of the top (with max_batch 1: the last item): claim everything left with one
    // compare-and-swap, as a thief would, keep the newest and push the others back (oldest first),
    // so that the owner still takes the newest and thieves the oldest.
    while (top <= bottom) {
      if (top_.compare_exchange_strong(top, bottom + 1, std::memory_order_seq_cst,
                                       std::memory_order_relaxed)) {
        bottom_.store(bottom + 1, std::memory_order_relaxed);
        top_cache_ = bottom + 1;
        if (top < bottom) [[unlikely]]
          push_back_claimed(array, top, bottom);
        return array->get(bottom);
      }
    }
    bottom_.store(bottom + 1, std::memory_order_relaxed);
    return nullptr;
  }

  // steal() takes the oldest item (any thread); nullptr when empty or when it lost a race.
  T steal() {
    T item = nullptr;
    return steal_batch(std::span<T>(&item, 1)) == 1 ? item : nullptr;
  }

  // steal_batch() takes up to `out.size()` of the oldest items, at most max_batch and half of those
  // present rounded up, into `out` in their order (any thread); 0 when empty or when it lost a race.
  // One compare-and-swap for the batch: a thief that takes several tasks at a time pulls the
  // deque's lines across cores once per batch instead of once per task.
  std::size_t steal_batch(std::span<T> out) {
    std::int64_t top = top_.load(std::memory_order_seq_cst);
    const std::int64_t bottom = bottom_.load(std::memory_order_seq_cst);
    if (top >= bottom || out.empty()) return 0;
    const std::int64_t count =
        std::min({static_cast<std::int64_t>(out.size()), max_batch_, (bottom - top + 1) / 2});
    Array* array = array_.load(std::memory_order_acquire);
    for (std::int64_t i = 0; i < count; ++i) out[static_cast<std::size_t>(i)] = array->get(top + i);
    if (!top_.compare_exchange_strong(top, top + count, std::memory_order_seq_cst,
                                      std::memory_order_relaxed)) {
      return 0;
    }
    return static_cast<std::size_t>(count);
  }

  // size() is a snapshot, exact only when no other thread touches the deque.
  std::size_t size() const noexcept {
    const std::int64_t bottom = bottom_.load(std::memory_order_relaxed);
    const std::int64_t top = top_.load(std::memory_order_relaxed);
    return bottom > top ? static_cast<std::size_t>(bottom - top) : 0;
  }
  bool empty() const noexcept { return size() == 0; }

 private:
  struct Array {
    explicit Array(std::size_t capacity) : mask(capacity - 1), slots(new std::atomic<T>[capacity]) {}
    T get(std::int64_t index) const noexcept {
      return slots[static_cast<std::size_t>(index) & mask].load(std::memory_order_relaxed);
    }
    void put(std::int64_t index, T item) noexcept {
      slots[static_cast<std::size_t>(index) & mask].store(item, std::memory_order_relaxed);
    }
    std::size_t mask;
    std::unique_ptr<std::atomic<T>[]> slots;
  };

  // push_back_claimed() pushes items [first, end) of `array`, which pop() claimed, back (oldest
  // first). Claimed, those slots change only by this thread's pushes, which write past `end`. Out
  // of line: pop() stays small enough to inline into the schedulers' loops.
  __attribute__((noinline)) void push_back_claimed(const Array* array, std::int64_t first, std::int64_t end) {
    for (std::int64_t index = first; index < end; ++index) push(array->get(index));
  }

  Array* grow(Array* old, std::int64_t top, std::int64_t bottom) {
    arrays_.push_back(std::make_unique<Array>((old->mask + 1) * 2));
    Array* bigger = arrays_.back().get();
    for (std::int64_t i = top; i < bottom; ++i) bigger->put(i, old->get(i));
    array_.store(bigger, std::memory_order_release);
    return bigger;
  }

  alignas(64) std::atomic<std::int64_t> top_{0};
  alignas(64) std::atomic<std::int64_t> bottom_{0};
  std::atomic<Array*> array_{nullptr};
  const std::int64_t max_batch_;
  std::int64_t top_cache_ = 0;                  // owner-only: a lower bound of top_
  std::vector<std::unique_ptr<Array>> arrays_;  // owner-only; every array ever used
};

}  // namespace nerve
