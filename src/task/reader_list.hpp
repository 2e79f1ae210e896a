// reader_list.hpp — the readers a dependency-tracker segment lists since its last write.
//
// Most data is read by one or two tasks between writes (a wavefront cell by its two neighbours, a
// tile by the next step's few kernels), so the first two readers live inside the segment: no heap
// block per buffer to allocate on its first read, and none to fetch — a dependent cache miss on
// every access to a buffer that other cores touched last. More readers move to the heap, which the
// list then keeps (capacity only grows until the segment goes).
//
// Thread safety: none of its own; the tracker's lock guards it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>

namespace nerve::detail {

struct TaskRecord;

class ReaderList {
 public:
  static constexpr std::size_t inline_capacity = 2;

  ReaderList() noexcept = default;
  ReaderList(const ReaderList& other) { assign(other); }
  ReaderList(ReaderList&& other) noexcept { take(other); }
  ReaderList& operator=(const ReaderList& other) {
    if (this != &other) {
      ReaderList copy(other);
      *this = std::move(copy);
    }
    return *this;
  }
  ReaderList& operator=(ReaderList&& other) noexcept {
    if (this != &other) {
      heap_.reset();
      capacity_ = inline_capacity;
      take(other);
    }
    return *this;
  }
  ~ReaderList() = default;

  TaskRecord** begin() noexcept { return data(); }
  TaskRecord** end() noexcept { return data() + size_; }
  TaskRecord* const* begin() const noexcept { return data(); }
  TaskRecord* const* end() const noexcept { return data() + size_; }
  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  std::size_t capacity() const noexcept { return capacity_; }

  void clear() noexcept { size_ = 0; }
  // The length at which the tracker next prunes finished readers: twice what the last prune kept (at
  // least `first`), so that pruning stays linear overall and a list keeps at most about twice its
  // live readers. Kept where the inline readers would be, which a list that long no longer uses.
  std::size_t prune_at(std::size_t first) const noexcept {
    return heap_ ? std::max(prune_at_, first) : first;
  }
  void set_prune_at(std::size_t length) noexcept {
    if (heap_) prune_at_ = length;
  }
  // reserve() makes room for `count` readers in all; throws std::bad_alloc, leaving the list as it was.
  void reserve(std::size_t count) {
    if (count <= capacity_) return;
    auto grown = std::make_unique<TaskRecord*[]>(count);
    if (heap_) {
      std::copy(heap_.get(), heap_.get() + size_, grown.get());
    } else {
      std::copy(std::begin(inline_), std::end(inline_), grown.get());  // count > inline_capacity
    }
    const bool was_inline = !heap_;
    heap_ = std::move(grown);
    capacity_ = static_cast<std::uint32_t>(count);
    if (was_inline) prune_at_ = 0;  // the inline readers are copied out: the slot is the mark's now
  }
  // push_back() after reserve() (the tracker makes every allocation before it registers anything);
  // without room it grows, and may throw.
  void push_back(TaskRecord* task) {
    if (size_ == capacity_) reserve(std::max<std::size_t>(std::size_t{2} * capacity_, inline_capacity));
    data()[size_++] = task;
  }
  // erase_from() drops [first, end()): the tail std::remove_if leaves.
  void erase_from(TaskRecord** first) noexcept { size_ = static_cast<std::uint32_t>(first - data()); }

 private:
  TaskRecord** data() noexcept { return heap_ ? heap_.get() : inline_; }
  TaskRecord* const* data() const noexcept { return heap_ ? heap_.get() : inline_; }

  void assign(const ReaderList& other) {
    reserve(other.size_);
    std::copy(other.begin(), other.end(), data());
    size_ = other.size_;
  }
  void take(ReaderList& other) noexcept {
    if (other.heap_) {
      heap_ = std::move(other.heap_);
      capacity_ = other.capacity_;
      prune_at_ = other.prune_at_;
    } else {
      std::copy(std::begin(other.inline_), std::end(other.inline_), inline_);  // fixed size: no overread
    }
    size_ = other.size_;
    other.size_ = 0;
    other.capacity_ = inline_capacity;
  }

  std::unique_ptr<TaskRecord*[]> heap_;
  std::uint32_t size_ = 0;
  std::uint32_t capacity_ = inline_capacity;
  union {
    TaskRecord* inline_[inline_capacity] = {};  // while heap_ is null
    std::size_t prune_at_;                      // once it is not (see prune_at())
  };
};

}  // namespace nerve::detail
