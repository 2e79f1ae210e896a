// engine.hpp — one OpenCL device's queues, operations in flight, and the thread that completes them.
//
// Every asynchronous thing the device does — a copy, a staged copy's step, a kernel launch — is an
// Operation: a record from a pool (records are recycled, never allocated per task) holding the
// cl_event the enqueue returned and what to do when it completes. The driver's completion callback
// only appends the operation to a list; the engine's own completion thread then runs its `finish`
// step. That thread, not the driver's callback thread, calls back into the runtime, because the
// runtime may then do what the OpenCL specification forbids inside callbacks (blocking reads when an
// eviction writes a replica back, creating buffers, releasing the last reference to objects). Every
// event is released by the completion thread as soon as its operation finishes: nothing holds events
// across tasks, and no user events are created.
//
// When an operation's callback comes, it takes the time at which the previous operation on its queue
// completed (queue_free_ns): a kernel enqueued behind earlier work on an in-order queue starts only
// then, so its run time — what heft's models learn — counts from there, not from the enqueue. OpenCL
// does not order callbacks, so "previous" is judged by enqueue time: a completion reported earlier
// for work enqueued later is no predecessor (no adjustment then, rather than a wrong one).
//
// Copies pass a gate: at most `max_pending_transfers` are in flight; further ones wait in FIFO order
// and start as earlier ones finish.
//
// Thread safety: every member may be called from any thread, except where stated.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backend/device.hpp"
#include "backend/opencl/cl.hpp"
#include "backend/opencl/platform.hpp"
#include "memory/pool/staging_pool.hpp"

namespace nerve::detail {
struct TaskRecord;
class CopyCompletion;
}  // namespace nerve::detail

namespace nerve::detail::opencl {

class Engine;

struct Operation {
  // finish(): runs on the completion thread once `event` completed (status < 0: it failed). It
  // returns true when the operation is over (the record goes back to the pool), false when it
  // started another step on the same record (a staged copy's next piece).
  bool (*finish)(Engine& engine, Operation& op) = nullptr;
  cl_event event = nullptr;
  cl_int status = CL_COMPLETE;
  Engine* home = nullptr;                // the engine whose pool it came from
  void* owner = nullptr;                 // the memory node or device that enqueued it
  TaskRecord* task = nullptr;            // a launch's task
  CopyCompletion* completion = nullptr;  // a copy's completion
  std::vector<cl_mem> sub_buffers;       // a launch's argument slices, released when it ends
  // A copy's description (also kept while it waits for the gate).
  int direction = 0;
  cl_mem source_mem = nullptr, destination_mem = nullptr;
  std::size_t source_offset = 0, destination_offset = 0, bytes = 0, done_bytes = 0;
  const std::byte* host_source = nullptr;
  std::byte* host_destination = nullptr;
  std::byte* staging = nullptr;          // host staging memory in use (staging_buffer's, or temporary)
  memory::StagingBuffer staging_buffer;  // pinned, from the memory layer's staging pool
  cl_command_queue queue = nullptr;      // where its event was enqueued (launches and copies), on success
  std::int64_t enqueued_ns = 0;          // just before it was enqueued
  std::int64_t queue_free_ns = 0;        // at completion: when the queue's previous operation completed
  std::int64_t completed_ns = 0;         // when its completion was seen (the driver's callback)
  Engine* peer = nullptr;                // the other device of a device-to-device copy
  bool counts_as_transfer = false;       // holds a place under max_pending_transfers
  std::string error;                     // why it failed, when not from `status`
  // watch() releases, the driver's callback acquires: what the enqueuing thread wrote is visible to the
  // callback thread by the C++ memory model alone, not only through the driver's own (unspecified,
  // uninstrumented) synchronisation; ThreadSanitizer sees the edge too.
  std::atomic<std::uint32_t> handoff{0};
  Operation* next = nullptr;  // free list / completion list link
};

class Engine {
 public:
  Engine(const PlatformDevice& device, unsigned queue_count, unsigned max_pending_transfers);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const PlatformDevice& device() const noexcept { return device_; }
  cl_context context() const noexcept { return context_; }
  unsigned queue_count() const noexcept { return static_cast<unsigned>(queues_.size()); }
  unsigned max_pending_transfers() const noexcept { return max_transfers_; }
  // next_queue(): queues are used round robin, so consecutive copies and kernels overlap.
  cl_command_queue next_queue(std::size_t* index = nullptr) noexcept;
  // sync_queue(): a queue of its own for blocking copies, so they wait only for themselves.
  cl_command_queue sync_queue() const noexcept { return sync_queue_; }

  Operation* acquire() noexcept;
  void recycle(Operation* op) noexcept;  // an operation that never reached watch()

  // watch(): run op.finish on the completion thread when op.event completes. When the callback
  // cannot be registered, the calling thread waits for op.event (clWaitForEvents) and the operation
  // then completes with the command's status: never before the command is over, since its memory
  // (staging, replicas) is released when it finishes. Never called from a driver callback, and no
  // command of ours waits for the completion thread, so the wait cannot deadlock.
  void watch(Operation* op) noexcept;

  // fail(): complete `op` (not watched) with `error`, on the completion thread like any other.
  void fail(Operation* op, std::string error) noexcept;

  // Copies under the gate: begin_transfer() returns false when the copy must wait (it is queued and
  // later handed to `start`); end_transfer() frees its place and starts waiting copies.
  void set_transfer_starter(std::function<void(Operation*)> start) { start_transfer_ = std::move(start); }
  bool begin_transfer(Operation* op);
  void end_transfer();

  // drain(): wait until no operation is in flight or waiting, then stop the completion thread.
  void drain() noexcept;
  // wait_idle(): waits as drain() does, without stopping; the operations started so far.
  std::uint64_t wait_idle() noexcept;

  struct Counters {
    std::atomic<std::uint64_t> launches{0}, copies{0}, copies_deferred{0}, peer_copies{0}, staged_copies{0};
    std::atomic<std::uint64_t> events_created{0}, events_released{0};
    std::vector<std::atomic<std::uint64_t>> per_queue;
  };
  Counters& counters() noexcept { return counters_; }
  DeviceCounters snapshot() const;
  void count_launch(std::size_t queue) noexcept;
  // Events the engine does not watch (a staged copy's first half) are counted and released here.
  void event_created() noexcept { counters_.events_created.fetch_add(1, std::memory_order_relaxed); }
  void release_event(cl_event event) noexcept;

 private:
  static void CL_CALLBACK on_event(cl_event event, cl_int status, void* user) noexcept;
  void completed(Operation* op) noexcept;  // append to the completion list
  // wait_for(): blocks until `event`'s command is over; its execution status (CL_COMPLETE or an error).
  static cl_int wait_for(cl_event event) noexcept;
  void run();  // the completion thread
  void finish(Operation* op) noexcept;

  const PlatformDevice& device_;
  cl_context context_;
  std::vector<cl_command_queue> queues_;
  cl_command_queue sync_queue_ = nullptr;
  std::atomic<std::size_t> next_{0};
  const unsigned max_transfers_;
  Counters counters_;

  mutable std::mutex pool_mutex_;
  Operation* free_ = nullptr;
  std::vector<std::unique_ptr<Operation>> records_;  // every record ever made (the pool's size)

  mutable std::mutex mutex_;
  std::condition_variable wake_;    // the completion thread: a completed operation or stop
  std::condition_variable idle_;    // drain(): in_flight_ reached 0
  Operation* done_head_ = nullptr;  // completed, not yet finished (FIFO)
  Operation* done_tail_ = nullptr;
  std::size_t in_flight_ = 0;  // acquired and not yet back in the pool
  std::uint64_t started_ = 0;  // operations ever acquired
  bool stopping_ = false;
  unsigned transfers_ = 0;  // copies holding a place under the gate
  std::uint64_t peak_transfers_ = 0;
  std::deque<Operation*> waiting_;  // copies waiting for a place
  // Per queue, the latest-enqueued operation seen complete: when it was enqueued, when it completed.
  struct QueueDone {
    cl_command_queue queue;
    std::int64_t enqueued_ns, completed_ns;
  };
  std::vector<QueueDone> queue_done_;
  std::function<void(Operation*)> start_transfer_;
  std::thread thread_;
};

}  // namespace nerve::detail::opencl
