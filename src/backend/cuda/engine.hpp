// engine.hpp — one CUDA device's streams, operations in flight, and the thread that completes them.
//
// Every asynchronous thing the device does — a copy, a step of a staged copy, a kernel launch — is an
// Operation: a record from a pool (recycled, never allocated per task) that arm() ends with an event
// from the EventPool and, in CompletionMode::flag, with a write of a fresh sequence number into the
// operation's slot of a completion-flag array in pinned, host-mapped memory (seeds/000 §3.3: the GPU
// signals, the runtime polls a memory word; no driver call on the fast path). The engine's completion
// thread polls the operations in flight — the flag word (flag mode; the event is queried too, every
// millisecond, to learn of failures) or the event (event mode) — and runs each finished one's
// `finish` step, which calls back into the runtime. Idle, the thread sleeps on a condition variable;
// with work in flight it spins for `spin` and then polls every 20 µs.
//
// Each operation remembers its stream; when the completion thread finishes one, it gives it the time
// at which the stream's earlier work was seen done (stream_free_ns, from an earlier polling pass): a
// kernel launched behind a backlog starts on the device only then, so its run time — what heft's
// models learn — counts from there, not from the launch (on an H200 a 50 µs tile gemm behind a queue
// was learnt as 224 µs). Operations of one stream found done in the same pass are finished in the
// order they were armed (the stream's order); each later one began after its predecessor was last
// seen running, which bounds its start when no pass saw the predecessor done (a loaded machine's
// completion thread can miss whole kernels).
//
// Copies pass a gate per direction (into the device, out of it): at most `max_pending_transfers` of
// each are in flight; later ones wait in FIFO order and start (on the completion thread) as earlier
// ones of their direction finish. (One gate for both let a burst of uploads hold back every download
// behind it, so the two directions of a streaming pipeline took turns instead of overlapping.)
//
// Which completion mode: NERVE_CUDA_COMPLETION = flag (default) | event; scripts/gpu-check.sh
// measures both next to cudaStreamSynchronize and cudaEventSynchronize.
//
// Thread safety: every member may be called from any thread, except where stated. Memory ordering:
// watch() publishes an operation under the engine's mutex; the completion thread takes it under the
// same mutex; a flag is read with acquire, and written by the device after the stream's prior work.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backend/cuda/driver.hpp"
#include "backend/cuda/event_pool.hpp"
#include "backend/cuda/stream_set.hpp"
#include "backend/device.hpp"
#include "memory/pool/staging_pool.hpp"

namespace nerve::detail {
struct TaskRecord;
class CopyCompletion;
}  // namespace nerve::detail

namespace nerve::detail::cuda {

enum class CompletionMode { flag, event };
// completion_mode_from_environment(): NERVE_CUDA_COMPLETION, default flag.
CompletionMode completion_mode_from_environment();

class Engine;

struct Operation {
  // finish(): on the completion thread, once the operation's work completed (`failed`: the driver
  // reported an error, in `error`). True: the operation is over; false: it armed a next step.
  bool (*finish)(Engine& engine, Operation& op) = nullptr;
  Event event = nullptr;
  std::uint32_t* flag = nullptr;  // this record's completion-flag slot (nullptr: none left)
  std::uint32_t flag_value = 0;   // the value the device writes when done
  bool failed = false;
  std::string error;
  void* owner = nullptr;                 // the memory node or device that started it
  TaskRecord* task = nullptr;            // a launch's task
  CopyCompletion* completion = nullptr;  // a copy's completion
  // A copy's description (kept while it waits for the gate).
  const std::byte* source = nullptr;
  std::byte* destination = nullptr;
  std::size_t bytes = 0;
  int step = 0;                           // staged copies: which half
  std::byte* host_destination = nullptr;  // device -> pageable host through staging: copied at the end
  bool pinned_host = false;               // the host side is page-locked: DMA in place, no staging
  Stream stream = nullptr;                // where arm() ended it
  std::int64_t stream_free_ns = 0;        // at finish: when the stream's earlier work was seen done
  std::uint64_t armed = 0;                // arm() order: the stream's order among one stream's ops
  std::int64_t seen_running_ns = 0;       // the last polling pass that found it not done (0: none)
  memory::StagingBuffer staging;          // pinned, from the memory node's staging pool
  // Staged device-to-device, in pieces through two staging buffers taking turns (memory.hpp): the
  // second buffer; per buffer, the event of its piece's copy out (recorded on the source's stream, so
  // from the source device's pool) and the event of its piece's copy in (on the destination's stream,
  // from this engine's pool), after which the buffer takes the next piece.
  memory::StagingBuffer staging_next;
  Event handoff[2] = {};
  EventPool* handoff_pool = nullptr;
  Event drained[2] = {};
  std::exception_ptr launch_error;  // a launch that failed after enqueueing work: reported at its end
  Engine* peer = nullptr;           // the other engine of a device-to-device copy
  void* peer_node = nullptr;
  bool counts_as_transfer = false;
  bool outbound = false;      // a copy out of the device (its gate and stream are the outbound ones)
  Operation* next = nullptr;  // free list link
};

class Engine {
 public:
  Engine(std::shared_ptr<Driver> driver, int ordinal, unsigned stream_count, unsigned reserved_high_streams,
         unsigned max_pending_transfers, CompletionMode mode,
         std::chrono::microseconds spin = std::chrono::microseconds{200});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  Driver& driver() noexcept { return driver_; }
  int ordinal() const noexcept { return ordinal_; }
  StreamSet& streams() noexcept { return streams_; }
  EventPool& events() noexcept { return events_; }
  CompletionMode mode() const noexcept { return mode_; }
  unsigned max_pending_transfers() const noexcept { return max_transfers_; }

  Operation* acquire();
  void recycle(Operation* op) noexcept;  // an operation never watched

  // arm(): end `op` in `stream` with its event (and its flag write in flag mode). Throws what the
  // driver throws (the operation is then not watched).
  void arm(Operation* op, Stream stream);
  // watch(): complete `op` (armed) on the completion thread.
  void watch(Operation* op);
  // fail(): complete `op` (not armed) with `error`, on the completion thread like any other.
  void fail(Operation* op, std::string error) noexcept;

  // Copies under the gate of their direction (Operation::outbound): begin_transfer() returns false
  // when the copy must wait (it is queued and later handed to the starter, on the completion thread);
  // end_transfer() frees its place.
  void set_transfer_starter(std::function<void(Operation*)> start) { start_transfer_ = std::move(start); }
  bool begin_transfer(Operation* op);
  void end_transfer(bool outbound);

  // drain(): wait until no operation is in flight or waiting, then stop the completion thread; an
  // operation started later is refused (acquire() throws), never left unfinished.
  void drain() noexcept;
  // wait_idle(): waits as drain() does, without stopping; the operations started so far.
  std::uint64_t wait_idle() noexcept;

  void count_launch(std::size_t stream) noexcept;
  void count_peer_copy() noexcept { peer_copies_.fetch_add(1, std::memory_order_relaxed); }
  void count_staged_copy() noexcept { staged_copies_.fetch_add(1, std::memory_order_relaxed); }
  void count_pinned_copy() noexcept { pinned_copies_.fetch_add(1, std::memory_order_relaxed); }
  DeviceCounters snapshot() const;
  std::uint64_t flag_completions() const noexcept {
    return flag_completions_.load(std::memory_order_relaxed);
  }
  std::uint64_t event_completions() const noexcept {
    return event_completions_.load(std::memory_order_relaxed);
  }

 private:
  void run();                  // the completion thread
  void free_flags() noexcept;  // the pinned completion flags (CompletionMode::flag)
  bool poll(Operation& op, bool query_events) noexcept;
  void finish(Operation* op) noexcept;
  void release_step_events(Operation& op) noexcept;  // a staged copy's handoff and drained events

  const std::shared_ptr<Driver> driver_owner_;  // the driver outlives everything made with it
  Driver& driver_;
  const int ordinal_;
  StreamSet streams_;
  EventPool events_;
  const unsigned max_transfers_;
  const CompletionMode mode_;
  const std::chrono::microseconds spin_;

  // Completion flags: one pinned, host-mapped array; slot i belongs to operation record i.
  static constexpr std::size_t flag_slots = 1024;
  std::uint32_t* flags_ = nullptr;
  std::uint32_t next_flag_value_ = 0;  // under pool_mutex_
  std::atomic<std::uint64_t> next_armed_{0};

  mutable std::mutex pool_mutex_;
  Operation* free_ = nullptr;
  std::vector<std::unique_ptr<Operation>> records_;

  mutable std::mutex mutex_;
  std::condition_variable wake_, idle_;
  std::vector<Operation*> incoming_;  // watched, not yet taken by the completion thread
  // Completion thread only: per stream, when its last operation was seen done in an earlier pass.
  std::vector<std::pair<Stream, std::int64_t>> stream_done_;
  std::int64_t& stream_done(Stream stream);
  std::size_t in_flight_ = 0;  // acquired and not yet back in the pool
  std::uint64_t started_ = 0;  // operations ever acquired
  bool stopping_ = false;
  struct Gate {
    unsigned in_flight = 0;
    std::deque<Operation*> waiting;
  };
  Gate gates_[2];                     // [outbound]
  std::uint64_t peak_transfers_ = 0;  // in one direction
  std::function<void(Operation*)> start_transfer_;

  std::atomic<std::uint64_t> launches_{0}, copies_{0}, copies_deferred_{0}, peer_copies_{0},
      staged_copies_{0}, pinned_copies_{0};
  std::atomic<std::uint64_t> flag_completions_{0}, event_completions_{0};
  std::vector<std::atomic<std::uint64_t>> per_stream_;
  std::thread thread_;
};

}  // namespace nerve::detail::cuda
