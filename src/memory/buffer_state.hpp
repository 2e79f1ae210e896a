// buffer_state.hpp — the runtime side of a Buffer: its bytes, its home, its dependency state.
//
// A BufferState lives while Buffer handles (and the C API's pins) reference it, counted in `refs`,
// and while tasks that access it have not finished, counted apart (accesses_begun / accesses_ended). It holds
// a reference on its context, so the context's memory outlives it. The data itself is released when both
// counts are done, or when the context is destroyed (live buffers are then reported), or never used again
// after an explicit free (C API): later use of the handle is then a BufferMisuse error, not undefined
// behaviour.
//
// Contents of a new buffer are not zeroed: the first task that writes it touches the pages, which
// places them on that worker's NUMA node (first touch).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "nerve/buffer.hpp"

#include "memory/coherence.hpp"
#include "memory/host_memory_node.hpp"
#include "task/dependency_tracker.hpp"
#include "task/task_record.hpp"
#include "util/cpu.hpp"

namespace nerve::detail {

struct ContextImpl;

enum class BufferLife : int {
  alive = 0,
  freed = 1,         // explicitly freed; the data goes when the last task using it finishes
  context_gone = 2,  // the context was destroyed while the handle lived
};

// A buffer's host copy: bytes from a host pool, given back when the buffer goes or earlier at
// context destruction (release()).
class HostStorage {
 public:
  HostStorage(HostMemoryNode& node, std::size_t bytes, int numa_node, int worker_numa)
      : node_(node),
        bytes_(bytes),
        block_(bytes == 0 ? HostBlock{} : node.allocate_buffer(bytes, numa_node, worker_numa)) {}
  ~HostStorage() { release(); }
  HostStorage(const HostStorage&) = delete;
  HostStorage& operator=(const HostStorage&) = delete;

  std::byte* data() const noexcept { return block_.data; }
  void release() noexcept {
    node_.free_buffer(block_, bytes_);
    block_.data = nullptr;
  }

 private:
  HostMemoryNode& node_;
  std::size_t bytes_;
  HostBlock block_;
};

// describe_buffer(): how messages name a buffer, "buffer 7 'name' (4096 bytes)" ("buffer 7 (4096
// bytes)" unnamed); also for one whose creation failed.
std::string describe_buffer(std::uint64_t id, std::string_view name, std::size_t bytes);
std::string describe_buffer(const BufferLabel& label);

struct BufferState {
  // `worker_numa`: the NUMA node of the creating thread's worker, or -1 (see HostMemoryNode).
  BufferState(ContextImpl* owner, HostMemoryNode& host_node, int worker_numa, std::size_t size_bytes,
              std::size_t element_bytes, const BufferOptions& options, std::uint64_t buffer_id);
  ~BufferState();
  BufferState(const BufferState&) = delete;
  BufferState& operator=(const BufferState&) = delete;

  // check_usable() throws BufferMisuse if the buffer was freed or its context destroyed, naming
  // `operation` with its preposition ("slice of", "a read map of") and the bytes it was for.
  void check_usable(const char* operation, std::size_t offset, std::size_t size) const;
  std::string describe() const;  // "buffer 7 'name' (4096 bytes)": describe_buffer()
  // describe(offset, size): "bytes [16, 32) of buffer 7 'name' (4096 bytes)".
  std::string describe(std::size_t offset, std::size_t size) const;

  // The layout follows who touches what per task. A program over many small buffers (W4: 65,536 of
  // them) finds each buffer's lines out of cache, so a task pays for every line it touches per
  // buffer: line 0 (validated at submission, read where the task runs and becomes ready), lines 1-2
  // (the submitter's: tracker, accesses begun), line 3 (the finisher's: accesses ended); the rest is
  // cold. The submitter's lines and the finisher's are apart so that a chain on one buffer does not
  // move a line between the submitting core and the running one twice per task.
  // --- line 0: read by every task, written almost never (first touch, free, a first device replica)
  ContextImpl* const context;
  const std::size_t bytes;
  std::byte* host = nullptr;  // host_storage.data(); null once the context has freed it
  std::atomic<int> home_numa{-1};
  std::atomic<BufferLife> life{BufferLife::alive};
  // No replica off the host has ever existed: the host holds every byte, valid, and host tasks skip
  // coherence (CoherenceEngine). Cleared for good before the first replica on another node is made;
  // a host task that conflicts with that replica's users is ordered after them by its dependencies,
  // so it sees the flag cleared.
  std::atomic<bool> host_only{true};
  const bool sticky;       // BufferOptions::sticky: evicted last
  const bool host_cached;  // BufferOptions::host_cached: device writes are copied back at once
  const std::size_t element_size;
  const std::uint64_t id;
  // The buffer of this context created next (ContextImpl::register_buffer), an address to prefetch
  // and never to dereference: that buffer may be gone. Programs tend to sweep buffers in the order
  // they made them (tiles, cells, chunks), so a submission that touches this buffer asks for that
  // one's lines too, a task ahead of its use (prefetch_next_created).
  std::atomic<const BufferState*> created_next{nullptr};
  // --- lines 1-2: written by every submission over the buffer (the tracker holds its one segment
  // inline, readers included)
  alignas(64) DependencyTracker tracker;
  // Accesses of unfinished tasks (mappings included), counted without a counter that the submitter
  // and the finisher would both write: the submitter adds to `accesses_begun`, the finisher to
  // `accesses_ended`. `accesses_ended` carries `open_bias` while a handle lives; the last handle's
  // release (buffers.cpp) removes the bias and subtracts `accesses_begun`, now final (no handle is
  // left to submit with), so that `accesses_ended` reaches exactly 0 once, at the last access's end,
  // or at that release if none is pending: whoever brings it there destroys the buffer.
  static constexpr std::int64_t open_bias = std::int64_t{1} << 62;
  std::atomic<std::uint64_t> accesses_begun{0};
  std::atomic<std::int32_t> refs{1};  // handles and pins; tasks count in the accesses above
  // --- line 3: written where the buffer's tasks finish
  alignas(64) std::atomic<std::int64_t> accesses_ended{open_bias};
  // --- cold
  alignas(64) const std::shared_ptr<const std::string> name;  // null: none; shared with BufferLabel
  HostStorage host_storage;
  BufferReplicas replicas;
};

// prefetch_submission_lines() asks for the lines a submission touches (0-2, see the layout) before it
// touches any. Over many buffers they are out of cache, and the locked instructions between those
// touches (accesses_begun, the tracker's lock) keep the misses from overlapping: asked for at once,
// a task's buffers cost about one miss's latency rather than one per line (W4: 378 -> 268 ns per
// task, medians of 8 alternated runs).
inline void prefetch_submission_lines(const BufferState* buffer) noexcept {
  if (buffer == nullptr) return;
  const auto* bytes = reinterpret_cast<const char*>(buffer);
  __builtin_prefetch(bytes);
  prefetch_for_write(bytes + 64);
  prefetch_for_write(bytes + 128);
}

// prefetch_next_created() asks for the submission lines of the buffer created after `buffer` (see
// BufferState::created_next): in a sweep, the next task's buffer, whose lines would otherwise come
// from memory while that submission waits (W4: one new buffer per task).
inline void prefetch_next_created(const BufferState* buffer) noexcept {
  prefetch_submission_lines(buffer->created_next.load(std::memory_order_relaxed));
}

// A task's (or mapping's) access keeps the buffer alive until retire_task_access(), which may
// destroy it: the caller must not touch the buffer afterwards.
inline void begin_task_access(BufferState* buffer) noexcept {
  buffer->accesses_begun.fetch_add(1, std::memory_order_relaxed);
}
void retire_task_access(BufferState* buffer) noexcept;

// tracked_end(): where the dependency tracker ends an access. A buffer of zero bytes is tracked as one
// byte (an ordering token: DependencyTracker::tracked_size()), so its accesses, all empty, still meet
// each other; an empty slice of a longer buffer meets nothing.
inline std::size_t tracked_end(const AccessRecord& access) noexcept {
  return access.offset + access.buffer->tracker.tracked_size(access.size);
}

// A copy in flight (coherence) keeps the buffer alive like one more pending access, ended by
// retire_task_access(). Taken only while an access of a task is pending (the task the copy serves
// or whose results it copies back), so the count cannot be at zero: a hold without a submission.
inline void hold_access(BufferState* buffer) noexcept {
  buffer->accesses_ended.fetch_sub(1, std::memory_order_acq_rel);
}
// try_hold_access() is hold_access() for a buffer nobody is known to hold (eviction): it fails when
// the count is at zero, i.e. the buffer is being destroyed. The caller must keep the buffer from
// being deleted meanwhile (destroy() first removes it from the coherence engine's lists).
inline bool try_hold_access(BufferState* buffer) noexcept {
  std::int64_t ended = buffer->accesses_ended.load(std::memory_order_relaxed);
  while (ended != 0) {
    if (buffer->accesses_ended.compare_exchange_weak(ended, ended - 1, std::memory_order_acq_rel))
      return true;
  }
  return false;
}

}  // namespace nerve::detail
