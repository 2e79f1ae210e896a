#include "backend/opencl/engine.hpp"

#include <algorithm>
#include <chrono>
#include <utility>

#include <fmt/format.h>

#include "util/log.hpp"
#include "util/monotonic_clock.hpp"
#include "util/start_thread.hpp"

namespace nerve::detail::opencl {

Engine::Engine(const PlatformDevice& device, unsigned queue_count, unsigned max_pending_transfers)
    : device_(device),
      context_(Platforms::instance().context(device)),
      max_transfers_(max_pending_transfers) {
  counters_.per_queue = std::vector<std::atomic<std::uint64_t>>(queue_count);
  auto make_queue = [&] {
    cl_int status = CL_SUCCESS;
    cl_command_queue queue = clCreateCommandQueue(context_, device_.device, 0, &status);
    check(status, fmt::format("creating a queue on OpenCL device '{}'", device_.name));
    return queue;
  };
  try {
    for (unsigned i = 0; i < queue_count; ++i) queues_.push_back(make_queue());
    sync_queue_ = make_queue();
    thread_ = start_thread("an OpenCL device's completion thread", [this] { run(); });
  } catch (...) {
    for (cl_command_queue queue : queues_) clReleaseCommandQueue(queue);
    if (sync_queue_ != nullptr) clReleaseCommandQueue(sync_queue_);
    throw;
  }
}

Engine::~Engine() {
  drain();
  for (cl_command_queue queue : queues_) clReleaseCommandQueue(queue);
  if (sync_queue_ != nullptr) clReleaseCommandQueue(sync_queue_);
}

cl_command_queue Engine::next_queue(std::size_t* index) noexcept {
  const std::size_t chosen = next_.fetch_add(1, std::memory_order_relaxed) % queues_.size();
  if (index != nullptr) *index = chosen;
  return queues_[chosen];
}

Operation* Engine::acquire() noexcept {
  Operation* op = nullptr;
  {
    std::lock_guard lock(pool_mutex_);
    if (free_ != nullptr) {
      op = free_;
      free_ = op->next;
    } else {
      records_.push_back(std::make_unique<Operation>());
      op = records_.back().get();
    }
  }
  {
    std::lock_guard lock(mutex_);
    ++in_flight_;
    ++started_;
  }
  op->home = this;
  op->next = nullptr;
  return op;
}

void Engine::recycle(Operation* op) noexcept {
  for (cl_mem mem : op->sub_buffers) clReleaseMemObject(mem);
  op->sub_buffers.clear();  // keeps its capacity: the next launch reuses it
  op->finish = nullptr;
  op->event = nullptr;
  op->status = CL_COMPLETE;
  op->owner = nullptr;
  op->task = nullptr;
  op->completion = nullptr;
  op->source_mem = op->destination_mem = nullptr;
  op->source_offset = op->destination_offset = op->bytes = op->done_bytes = 0;
  op->host_source = nullptr;
  op->host_destination = nullptr;
  op->staging = nullptr;
  op->queue = nullptr;
  op->enqueued_ns = 0;
  op->queue_free_ns = 0;
  op->peer = nullptr;
  op->counts_as_transfer = false;
  op->error.clear();
  {
    std::lock_guard lock(pool_mutex_);
    op->next = free_;
    free_ = op;
  }
  std::lock_guard lock(mutex_);
  if (--in_flight_ == 0) idle_.notify_all();
}

void Engine::watch(Operation* op) noexcept {
  counters_.events_created.fetch_add(1, std::memory_order_relaxed);
  // Everything read from `op` is read before the release: the callback may run (and the operation be
  // finished and recycled) before clSetEventCallback returns.
  cl_event event = op->event;
  op->handoff.fetch_add(1, std::memory_order_release);
  const cl_int status = clSetEventCallback(event, CL_COMPLETE, &Engine::on_event, op);
  if (status != CL_SUCCESS) {
    // No callback will come, but the command is enqueued and may still be queued or running: finishing
    // the operation now would free a copy's staging memory and unpin replicas under the transfer, or
    // report a kernel over before it ran. So this thread waits for the command instead, and the
    // operation ends with the command's own status.
    log::warn("OpenCL device '{}': clSetEventCallback failed ({}); waiting for the command on this thread",
              device_.name, error_name(status));
    op->status = wait_for(event);
    op->queue = nullptr;  // its completion time is unknown (it may have completed before the wait)
    completed(op);
  }
}

cl_int Engine::wait_for(cl_event event) noexcept {
  // clWaitForEvents may itself fail (out of host memory, or CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST
  // when the command failed): the command's execution status is what counts, so it is polled until the
  // command is over, whatever the wait returned.
  for (;;) {
    (void)clWaitForEvents(1, &event);
    cl_int execution = CL_QUEUED;
    const cl_int query =
        clGetEventInfo(event, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof execution, &execution, nullptr);
    if (query != CL_SUCCESS) return query;  // a valid event the driver cannot describe: nothing to wait on
    if (execution <= CL_COMPLETE) return execution;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void Engine::fail(Operation* op, std::string error) noexcept {
  op->error = std::move(error);
  if (op->status >= 0) op->status = CL_INVALID_OPERATION;
  completed(op);
}

void CL_CALLBACK Engine::on_event(cl_event /*event*/, cl_int status, void* user) noexcept {
  auto* op = static_cast<Operation*>(user);
  (void)op->handoff.load(std::memory_order_acquire);  // pairs with watch()'s release
  op->status = status;
  op->home->completed(op);
}

void Engine::completed(Operation* op) noexcept {
  std::lock_guard lock(mutex_);
  const std::int64_t now = monotonic_ns();
  op->completed_ns = now;
  if (op->queue != nullptr && op->status >= 0) {
    auto found = std::find_if(queue_done_.begin(), queue_done_.end(),
                              [&](const QueueDone& entry) { return entry.queue == op->queue; });
    if (found == queue_done_.end()) {
      try {
        found = queue_done_.insert(queue_done_.end(), QueueDone{op->queue, 0, 0});
      } catch (...) {  // no memory for the entry: no adjustment for this operation
      }
    }
    if (found != queue_done_.end() && found->enqueued_ns <= op->enqueued_ns) {
      op->queue_free_ns = found->completed_ns;  // its predecessor (or earlier) on the queue
      *found = QueueDone{op->queue, op->enqueued_ns, now};
    }
  }
  op->next = nullptr;
  if (done_tail_ != nullptr) {
    done_tail_->next = op;
  } else {
    done_head_ = op;
  }
  done_tail_ = op;
  wake_.notify_one();
}

void Engine::run() {
  std::unique_lock lock(mutex_);
  while (true) {
    wake_.wait(lock, [&] { return done_head_ != nullptr || (stopping_ && in_flight_ == 0); });
    if (done_head_ == nullptr) return;
    Operation* op = done_head_;
    done_head_ = op->next;
    if (done_head_ == nullptr) done_tail_ = nullptr;
    lock.unlock();
    finish(op);
    lock.lock();
  }
}

void Engine::finish(Operation* op) noexcept {
  release_event(std::exchange(op->event, nullptr));
  if (op->finish(*this, *op)) recycle(op);
}

bool Engine::begin_transfer(Operation* op) {
  std::lock_guard lock(mutex_);
  op->counts_as_transfer = true;
  if (transfers_ < max_transfers_ && waiting_.empty()) {
    ++transfers_;
    peak_transfers_ = std::max<std::uint64_t>(peak_transfers_, transfers_);
    return true;
  }
  waiting_.push_back(op);
  counters_.copies_deferred.fetch_add(1, std::memory_order_relaxed);
  return false;
}

void Engine::end_transfer() {
  Operation* next = nullptr;
  {
    std::lock_guard lock(mutex_);
    --transfers_;
    if (!waiting_.empty()) {
      next = waiting_.front();
      waiting_.pop_front();
      ++transfers_;
      peak_transfers_ = std::max<std::uint64_t>(peak_transfers_, transfers_);
    }
  }
  if (next != nullptr) start_transfer_(next);
}

std::uint64_t Engine::wait_idle() noexcept {
  std::unique_lock lock(mutex_);
  idle_.wait(lock, [&] { return in_flight_ == 0; });
  return started_;
}

void Engine::drain() noexcept {
  {
    std::unique_lock lock(mutex_);
    idle_.wait(lock, [&] { return in_flight_ == 0; });
    stopping_ = true;
    wake_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
  for (cl_command_queue queue : queues_) clFinish(queue);
}

void Engine::release_event(cl_event event) noexcept {
  if (event == nullptr) return;
  clReleaseEvent(event);
  counters_.events_released.fetch_add(1, std::memory_order_relaxed);
}

void Engine::count_launch(std::size_t queue) noexcept {
  counters_.launches.fetch_add(1, std::memory_order_relaxed);
  counters_.per_queue[queue].fetch_add(1, std::memory_order_relaxed);
}

DeviceCounters Engine::snapshot() const {
  DeviceCounters out;
  out.launches = counters_.launches.load();
  for (const auto& each : counters_.per_queue) out.launches_per_queue.push_back(each.load());
  out.copies = counters_.copies.load();
  out.copies_deferred = counters_.copies_deferred.load();
  out.peer_copies = counters_.peer_copies.load();
  out.staged_copies = counters_.staged_copies.load();
  out.events_live = counters_.events_created.load() - counters_.events_released.load();
  {
    std::lock_guard lock(pool_mutex_);
    out.operation_records = records_.size();
  }
  {
    std::lock_guard lock(mutex_);
    out.peak_copies_in_flight = peak_transfers_;
  }
  return out;
}

}  // namespace nerve::detail::opencl
