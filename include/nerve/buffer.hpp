// buffer.hpp — typed handles to logical data that tasks read and write.
//
// A Buffer<T> names `size()` elements of trivially copyable T (alignof(T) at most 64: buffer data is
// 64-byte aligned in every memory) owned by a Context. Handles are cheap
// to copy (a reference count); the data is released when the last handle and the last task using it
// are gone. (Its bookkeeping, about 450 bytes, stays with the context for the next buffer made, until
// the context is destroyed: buffers made one after the other lie one after the other, whatever the
// heap went through, which keeps sweeps over many small buffers fast.) slice(offset, count) gives a
// view of a sub-range; tasks that access disjoint slices of one buffer do not depend on each other
// (on a device, though, a task on a slice needs a replica of the whole buffer: docs/MEMORY.md). A
// buffer made from a span copies it in before the constructor returns; from 16 MiB on the context's
// idle workers share that copy (the calling thread copies too and runs no other task meanwhile),
// except under memory.numa_policy `local` on a machine of several NUMA nodes, where the calling
// thread writes every page itself and so places them.
//
// Host access goes through map(): a mapping waits until every task that conflicts with it (writers
// for a read mapping, readers and writers for a write mapping) has finished, and tasks submitted
// while the mapping is alive that conflict with it wait for unmap(). Mapped<T> unmaps when destroyed.
// Writing through a read mapping is a bug (the runtime assumes the data did not change).
//
// Errors (nerve::Error with ErrorCode::buffer_misuse): a slice outside the buffer, any use of a
// buffer whose context has been destroyed or that was freed, unmap of a mapping already unmapped, a
// map that conflicts with a mapping the calling thread still holds (it would wait for itself).
// For that check, and the waits' (context.hpp), a mapping is held by the thread that made it until
// it is unmapped — also while its Mapped<T> is in another thread's hands: unmap a mapping on the
// thread that made it, or expect that thread's waits for what the mapping blocks to be refused (and
// another thread's to wait).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "nerve/detail/runtime_api.hpp"
#include "nerve/error.hpp"

namespace nerve {

class Context;

struct BufferOptions {
  // The NUMA node whose memory should hold the data and whose workers should run the tasks that use
  // it (scheduler.numa_affinity). -1: the node of the first worker that writes it (first touch).
  int numa_node = -1;
  // A name for messages (errors and warnings say "buffer 7 'name'"); traces and statistics count
  // copies and bytes per node, not per buffer, and do not show it.
  std::string name;
  // STICKY: under memory pressure on a device, this buffer's replica is evicted last.
  bool sticky = false;
  // HOST_CACHED: after a device writes the buffer, the written bytes are copied back to the host at
  // once (asynchronously), so the host keeps a valid copy and host reads need no transfer.
  bool host_cached = false;
};

namespace detail {
NERVE_API ContextImpl* context_impl(Context& context) noexcept;
}

// Mapped<T> is a host view of a buffer range, valid until unmap() or destruction; once unmapped (or
// moved from, or default-constructed) it is empty: size() 0, data() null. A mapping still
// held when its Context is destroyed keeps its data (the destruction warns); unmap() then ends it and
// throws buffer_misuse, the destructor ends it quietly. If a pending task waits for that mapping and
// the destroying thread holds it, the destruction would wait forever: a fatal error, reported.
template <class T>
class Mapped {
 public:
  Mapped() = default;
  Mapped(const Mapped&) = delete;
  Mapped& operator=(const Mapped&) = delete;
  Mapped(Mapped&& other) noexcept
      : mapping_(std::exchange(other.mapping_, {})),
        count_(other.count_),
        label_(other.label_),
        offset_(other.offset_) {}
  Mapped& operator=(Mapped&& other) noexcept {
    if (this != &other) {
      unmap_quietly();
      mapping_ = std::exchange(other.mapping_, {});
      count_ = other.count_;
      label_ = other.label_;
      offset_ = other.offset_;
    }
    return *this;
  }
  ~Mapped() { unmap_quietly(); }

  T* data() const noexcept { return static_cast<T*>(mapping_.data); }
  // count_ outlives the mapping (unmap()'s message names the range); the view does not.
  std::size_t size() const noexcept { return mapping_.record != nullptr ? count_ : 0; }
  std::span<T> span() const noexcept { return {data(), size()}; }
  T& operator[](std::size_t i) const noexcept { return data()[i]; }
  T* begin() const noexcept { return data(); }
  T* end() const noexcept { return data() + size(); }

  // unmap() ends the mapping; tasks waiting for it may start.
  void unmap() {
    if (mapping_.record == nullptr) detail::throw_unmap_without_map(label_, offset_, offset_ + count_);
    detail::buffer_unmap(std::exchange(mapping_, {}));
  }

 private:
  template <class>
  friend class Buffer;
  Mapped(detail::Mapping mapping, std::size_t count, detail::BufferLabel label, std::size_t offset)
      : mapping_(mapping), count_(count), label_(std::move(label)), offset_(offset) {}
  void unmap_quietly() noexcept {
    if (mapping_.record == nullptr) return;
    try {
      detail::buffer_unmap(std::exchange(mapping_, {}));
    } catch (...) {  // its context was destroyed first: reported when the context went
    }
  }
  detail::Mapping mapping_{};
  std::size_t count_ = 0;
  detail::BufferLabel label_;  // for messages: which buffer, which elements
  std::size_t offset_ = 0;
};

template <class T>
class Buffer {
  static_assert(std::is_trivially_copyable_v<T>, "buffer elements are moved between memories byte-wise");
  static_assert(!std::is_const_v<T>, "use Buffer<T>; read-only access is a property of the task");
  static_assert(alignof(T) <= 64,
                "buffer data is 64-byte aligned: an over-aligned element type would be misaligned");

 public:
  using value_type = T;

  Buffer() noexcept = default;
  // Throws Error(invalid_argument) when count elements do not fit in the address space. A count of 0
  // is valid: its mappings and its tasks' spans are empty, and it still orders them like any buffer
  // (an ordering token: a read after a write depends on it, and is cancelled if the write failed; a
  // task on it waits for a write mapping of it). An empty slice of a longer buffer orders nothing.
  Buffer(Context& context, std::size_t count, const BufferOptions& options = {})
      : state_(detail::buffer_create(detail::context_impl(context), bytes_of(count), sizeof(T), options)),
        count_(count) {}
  Buffer(Context& context, std::span<const T> initial, const BufferOptions& options = {})
      : Buffer(context, initial.size(), options) {
    auto mapped = map_write();
    if (!initial.empty())  // large copies are split over the workers (a GiB: 8x faster on 16 cores)
      detail::copy_into_new_buffer(detail::context_impl(context), mapped.data(), initial.data(),
                                   initial.size_bytes());
  }
  Buffer(const Buffer& other) noexcept : state_(other.state_), offset_(other.offset_), count_(other.count_) {
    if (state_ != nullptr) detail::retain(state_);
  }
  // A moved-from Buffer is empty: size() 0, and any use but assignment and destruction is an error.
  Buffer(Buffer&& other) noexcept
      : state_(std::exchange(other.state_, nullptr)),
        offset_(std::exchange(other.offset_, 0)),
        count_(std::exchange(other.count_, 0)) {}
  Buffer& operator=(Buffer other) noexcept {
    std::swap(state_, other.state_);
    std::swap(offset_, other.offset_);
    std::swap(count_, other.count_);
    return *this;
  }
  ~Buffer() {
    if (state_ != nullptr) detail::release(state_);
  }

  explicit operator bool() const noexcept { return state_ != nullptr; }
  std::size_t size() const noexcept { return count_; }
  std::size_t size_bytes() const noexcept { return count_ * sizeof(T); }
  // offset() is this view's first element within the whole buffer.
  std::size_t offset() const noexcept { return offset_; }
  std::uint64_t id() const noexcept { return state_ != nullptr ? detail::buffer_id(state_) : 0; }

  // slice() views elements [offset, offset + count) of this view. Throws on a range outside it, and
  // like every use, on an empty handle and on a buffer that was freed or whose context is gone.
  Buffer slice(std::size_t offset, std::size_t count) const {
    if (state_ == nullptr) throw Error(ErrorCode::buffer_misuse, "slice of an empty buffer handle");
    if (offset > count_ || count > count_ - offset)
      detail::throw_slice_outside(state_, offset, count, offset_, count_);
    detail::buffer_check_range(state_, (offset_ + offset) * sizeof(T), count * sizeof(T), "slice of");
    Buffer view(*this);
    view.offset_ += offset;
    view.count_ = count;
    return view;
  }

  // map_*() waits for the tasks the mapping conflicts with. Inside a task, a map that would wait for
  // that very task (its own accesses conflict with the mapping) or for a task ordered after it (which
  // cannot start before it ends) would never return: it throws Error(invalid_argument) naming the
  // task instead; so does one that would wait for a task this thread suspended in a wait of its own
  // to run the calling task (context.hpp), or for work ordered after that one, and try_map() there
  // too (it could never stop being busy). A blocking map in a cycle of waits across threads may
  // throw the same error (context.hpp); the mapping it asked for then ends by itself. A mapping is
  // a task on the host: one that reads data a failed task wrote (map_read, map_read_write) throws
  // TaskCancelled with that cause, and after a failed map_read_write the mapped range counts as
  // failed for later readers until a write replaces it, as after a cancelled read_write task.
  Mapped<const T> map_read() const { return map_as<const T>(Access::read, true); }
  Mapped<T> map_write() const { return map_as<T>(Access::write, true); }
  Mapped<T> map_read_write() const { return map_as<T>(Access::read_write, true); }
  Mapped<T> map(Access mode) const { return map_as<T>(mode, true); }
  // try_map() returns nothing (instead of waiting) while a conflicting task or mapping is pending —
  // also one that waits for a mapping the calling thread holds, where map() would throw: it returns
  // nothing until that mapping ends — and while data it reads must first come back from a device
  // (written there, or its copy back still in flight): it asks for that copy, without waiting for
  // it, so that a later try_map() maps the data. Like map(), it throws TaskCancelled when the mapping would
  // read data a failed task wrote. It runs no task: in a context with one worker slot (slot 0, which runs
  // only while some thread waits inside nerve: context.hpp), polling try_map() without ever waiting makes no
  // progress — wait for the writer, or map(), instead. Inside a task, a conflict with that task itself (or
  // with a task its accesses order after it) is Error(invalid_argument), as for map(): it could not clear
  // while the task runs.
  std::optional<Mapped<T>> try_map(Access mode) const {
    auto mapped = map_as<T>(mode, false);
    if (mapped.mapping_.record == nullptr) return std::nullopt;
    return mapped;
  }

  // to_vector() copies the view's contents out (waits for pending writers).
  std::vector<T> to_vector() const {
    auto mapped = map_read();
    return std::vector<T>(mapped.begin(), mapped.end());
  }

  detail::BufferState* state() const noexcept { return state_; }

 private:
  static std::size_t bytes_of(std::size_t count) {
    if (count > SIZE_MAX / sizeof(T)) {
      throw Error(ErrorCode::invalid_argument, "a buffer of " + std::to_string(count) + " elements of " +
                                                   std::to_string(sizeof(T)) +
                                                   " bytes is larger than the address space");
    }
    return count * sizeof(T);
  }

  template <class U>
  Mapped<U> map_as(Access mode, bool wait) const {
    if (state_ == nullptr) throw Error(ErrorCode::buffer_misuse, "map of an empty buffer handle");
    detail::Mapping mapping = detail::buffer_map(state_, offset_ * sizeof(T), count_ * sizeof(T), mode, wait);
    return Mapped<U>(mapping, mapping.record != nullptr ? count_ : 0, detail::buffer_label(state_), offset_);
  }

  detail::BufferState* state_ = nullptr;
  std::size_t offset_ = 0;  // elements
  std::size_t count_ = 0;   // elements
};

// A task's declared access to a buffer view. Made by read(), write() and read_write(). It holds the
// view (which bytes of which buffer), not the handle it was made from, so an access made from a
// temporary slice — `auto in = read(b.slice(0, 50));` — stays valid after that slice is gone; the
// buffer itself must stay alive, through any handle, until the task is submitted.
template <class T, Access Mode>
struct BufferAccess {
  BufferAccess(const Buffer<T>* buffer) noexcept  // NOLINT(google-explicit-constructor): {&buffer}
      : state(buffer->state()),
        offset_bytes(buffer->offset() * sizeof(T)),
        size_bytes(buffer->size() * sizeof(T)) {}
  detail::AccessSpec spec() const noexcept { return {state, offset_bytes, size_bytes, Mode}; }

  detail::BufferState* state;
  std::size_t offset_bytes;
  std::size_t size_bytes;
};

template <class T>
BufferAccess<T, Access::read> read(const Buffer<T>& buffer) noexcept {
  return {&buffer};
}
template <class T>
BufferAccess<T, Access::write> write(const Buffer<T>& buffer) noexcept {
  return {&buffer};
}
template <class T>
BufferAccess<T, Access::read_write> read_write(const Buffer<T>& buffer) noexcept {
  return {&buffer};
}

namespace detail {
template <class A>
struct is_buffer_access : std::false_type {};
template <class T, Access M>
struct is_buffer_access<BufferAccess<T, M>> : std::true_type {
  // The view a task body receives for this access.
  using view = std::conditional_t<M == Access::read, std::span<const T>, std::span<T>>;
  static view make(const AccessView& v) noexcept {
    using Pointer = std::conditional_t<M == Access::read, const T*, T*>;
    return view(static_cast<Pointer>(v.data), v.size / sizeof(T));
  }
};
}  // namespace detail

template <class A>
concept BufferAccessor = detail::is_buffer_access<std::remove_cvref_t<A>>::value;

}  // namespace nerve
