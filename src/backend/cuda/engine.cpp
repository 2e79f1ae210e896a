#include "backend/cuda/engine.hpp"

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include <fmt/format.h>

#include "nerve/error.hpp"

#include "util/log.hpp"
#include "util/monotonic_clock.hpp"
#include "util/start_thread.hpp"

namespace nerve::detail::cuda {

CompletionMode completion_mode_from_environment() {
  const char* value = std::getenv("NERVE_CUDA_COMPLETION");
  if (value != nullptr && std::string_view(value) == "event") return CompletionMode::event;
  return CompletionMode::flag;
}

Engine::Engine(std::shared_ptr<Driver> driver, int ordinal, unsigned stream_count,
               unsigned reserved_high_streams, unsigned max_pending_transfers, CompletionMode mode,
               std::chrono::microseconds spin)
    : driver_owner_(std::move(driver)),
      driver_(*driver_owner_),
      ordinal_(ordinal),
      streams_(driver_, ordinal, stream_count, reserved_high_streams),
      events_(driver_, ordinal),
      max_transfers_(max_pending_transfers == 0 ? 1 : max_pending_transfers),
      mode_(mode),
      spin_(spin),
      per_stream_(streams_.size()) {
  if (mode_ == CompletionMode::flag) {
    // In this device's context, as every pinned block (CudaBlockAllocator): the calling thread's
    // current device would otherwise own it (device 0's context, created for it on a thread with none).
    const DeviceScope scope(driver_, ordinal_);
    flags_ = static_cast<std::uint32_t*>(driver_.host_alloc(flag_slots * sizeof(std::uint32_t)));
    for (std::size_t i = 0; i < flag_slots; ++i) std::atomic_ref<std::uint32_t>(flags_[i]).store(0);
  }
  try {
    thread_ = start_thread(fmt::format("CUDA device {}'s completion thread", ordinal_), [this] { run(); });
  } catch (...) {
    free_flags();  // the destructor does not run
    throw;
  }
}

Engine::~Engine() {
  drain();
  free_flags();
}

void Engine::free_flags() noexcept {
  if (flags_ == nullptr) return;
  const QuietDeviceScope scope(driver_, ordinal_);  // as allocated
  driver_.host_free(flags_);
  flags_ = nullptr;
}

Operation* Engine::acquire() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) {  // no completion thread would ever finish it
      throw Error(ErrorCode::internal,
                  fmt::format("CUDA device {}: an operation was started after its engine stopped (context "
                              "shutdown)",
                              ordinal_));
    }
    ++in_flight_;  // first: drain() must not find the engine idle while an operation is being started
    ++started_;
  }
  try {
    std::lock_guard lock(pool_mutex_);
    if (free_ != nullptr) {
      Operation* op = free_;
      free_ = op->next;
      op->next = nullptr;
      return op;
    }
    auto record = std::make_unique<Operation>();
    if (flags_ != nullptr && records_.size() < flag_slots) record->flag = flags_ + records_.size();
    records_.push_back(std::move(record));
    return records_.back().get();
  } catch (...) {
    // No record (bad_alloc): nothing is in flight that drain() could ever see come back.
    std::lock_guard lock(mutex_);
    if (--in_flight_ == 0) idle_.notify_all();
    throw;
  }
}

void Engine::release_step_events(Operation& op) noexcept {
  for (Event& each : op.handoff) {
    if (each != nullptr) op.handoff_pool->release(each);
    each = nullptr;
  }
  for (Event& each : op.drained) {
    if (each != nullptr) events_.release(each);
    each = nullptr;
  }
}

void Engine::recycle(Operation* op) noexcept {
  events_.release(op->event);  // back to the pool: idle, the device holds no event in use
  op->event = nullptr;
  op->finish = nullptr;
  op->failed = false;
  op->error.clear();
  op->owner = nullptr;
  op->task = nullptr;
  op->completion = nullptr;
  op->source = nullptr;
  op->destination = nullptr;
  op->host_destination = nullptr;
  op->pinned_host = false;
  op->stream = nullptr;
  op->stream_free_ns = 0;
  op->armed = 0;
  op->seen_running_ns = 0;
  op->bytes = 0;
  op->step = 0;
  op->staging.release();
  op->staging_next.release();
  release_step_events(*op);
  op->handoff_pool = nullptr;
  op->launch_error = nullptr;
  op->peer = nullptr;
  op->peer_node = nullptr;
  op->counts_as_transfer = false;
  op->outbound = false;
  {
    std::lock_guard lock(pool_mutex_);
    op->next = free_;
    free_ = op;
  }
  std::lock_guard lock(mutex_);
  if (--in_flight_ == 0) idle_.notify_all();
}

void Engine::arm(Operation* op, Stream stream) {
  // Driver-level stream operations (the flag write) act in the calling thread's current context: make
  // it this device's for the call (copies are armed from whatever runtime or application thread
  // started them; an application thread keeps its own current device).
  const DeviceScope scope(driver_, ordinal_);
  if (op->event == nullptr) op->event = events_.acquire();
  if (mode_ == CompletionMode::flag && op->flag != nullptr) {
    {
      std::lock_guard lock(pool_mutex_);
      op->flag_value = ++next_flag_value_ == 0 ? ++next_flag_value_ : next_flag_value_;
    }
    // The flag is written before the event is recorded: a complete event implies a written flag.
    driver_.write_flag_async(op->flag, op->flag_value, stream);
  }
  driver_.record_event(op->event, stream);
  op->stream = stream;
  op->armed = next_armed_.fetch_add(1, std::memory_order_relaxed) + 1;
  op->seen_running_ns = 0;
}

std::int64_t& Engine::stream_done(Stream stream) {
  for (auto& [each, ns] : stream_done_)
    if (each == stream) return ns;
  stream_done_.emplace_back(stream, 0);
  return stream_done_.back().second;
}

void Engine::watch(Operation* op) {
  {
    std::lock_guard lock(mutex_);
    incoming_.push_back(op);
  }
  wake_.notify_one();
}

void Engine::fail(Operation* op, std::string error) noexcept {
  op->failed = true;
  op->error = std::move(error);
  try {
    watch(op);
  } catch (...) {  // no memory to queue it: finish it here (the caller holds no engine lock)
    finish(op);
  }
}

bool Engine::begin_transfer(Operation* op) {
  op->counts_as_transfer = true;
  copies_.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard lock(mutex_);
  Gate& gate = gates_[op->outbound ? 1 : 0];
  if (gate.in_flight >= max_transfers_) {
    gate.waiting.push_back(op);
    copies_deferred_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  ++gate.in_flight;
  if (gate.in_flight > peak_transfers_) peak_transfers_ = gate.in_flight;
  return true;
}

void Engine::end_transfer(bool outbound) {
  Operation* next = nullptr;
  {
    std::lock_guard lock(mutex_);
    Gate& gate = gates_[outbound ? 1 : 0];
    if (gate.waiting.empty()) {
      --gate.in_flight;
      return;
    }
    next = gate.waiting.front();  // it takes over the place
    gate.waiting.pop_front();
  }
  start_transfer_(next);
}

void Engine::count_launch(std::size_t stream) noexcept {
  launches_.fetch_add(1, std::memory_order_relaxed);
  if (stream < per_stream_.size()) per_stream_[stream].fetch_add(1, std::memory_order_relaxed);
}

DeviceCounters Engine::snapshot() const {
  DeviceCounters c;
  c.launches = launches_.load(std::memory_order_relaxed);
  for (const auto& each : per_stream_) c.launches_per_queue.push_back(each.load(std::memory_order_relaxed));
  c.copies = copies_.load(std::memory_order_relaxed);
  c.copies_deferred = copies_deferred_.load(std::memory_order_relaxed);
  c.peer_copies = peer_copies_.load(std::memory_order_relaxed);
  c.staged_copies = staged_copies_.load(std::memory_order_relaxed);
  c.pinned_copies = pinned_copies_.load(std::memory_order_relaxed);
  {
    std::lock_guard lock(mutex_);
    c.peak_copies_in_flight = peak_transfers_;
  }
  c.events_live = events_.in_use();
  {
    std::lock_guard lock(pool_mutex_);
    c.operation_records = records_.size();
  }
  return c;
}

bool Engine::poll(Operation& op, bool query_events) noexcept {
  if (op.failed) return true;
  const bool by_flag = mode_ == CompletionMode::flag && op.flag != nullptr;
  const auto flag_written = [&] {
    return std::atomic_ref<std::uint32_t>(*op.flag).load(std::memory_order_acquire) == op.flag_value;
  };
  if (by_flag) {
    if (flag_written()) {
      flag_completions_.fetch_add(1, std::memory_order_relaxed);
      return true;
    }
    if (!query_events) return false;
  }
  switch (driver_.query_event(op.event)) {
    case EventState::pending: return false;
    case EventState::complete:
      // The flag is written before the event is recorded, so it is written now too; it only landed
      // between the two looks. Counting that as the flag's keeps the counters about which signal the
      // work gave, not about where the poller happened to be preempted.
      if (by_flag && flag_written()) {
        flag_completions_.fetch_add(1, std::memory_order_relaxed);
      } else {
        event_completions_.fetch_add(1, std::memory_order_relaxed);
      }
      return true;
    case EventState::failed:
      op.failed = true;
      op.error = "the device reported an error while running it (cudaEventQuery)";
      return true;
  }
  return false;
}

void Engine::finish(Operation* op) noexcept {
  const bool counted = op->counts_as_transfer;
  const bool outbound = op->outbound;
  // The operation's work is done: its events go back before the runtime hears of it, so that whoever
  // the completion wakes sees no event still in use (a next step acquires one again).
  events_.release(op->event);
  op->event = nullptr;
  release_step_events(*op);
  bool over = true;
  try {
    over = op->finish(*this, *op);
  } catch (const std::exception& error) {
    log::error("CUDA device {}: completing an operation failed: {}", ordinal_, error.what());
  }
  if (!over) return;  // it armed and watched its next step
  recycle(op);
  if (counted) end_transfer(outbound);
}

void Engine::run() {
  // The thread queries this device's events: in its context, not in the one the CUDA runtime would
  // make current for a thread that has none (device 0's, created for it).
  try {
    driver_.make_current(ordinal_);
  } catch (const std::exception& error) {
    log::warn("CUDA device {}: its completion thread could not make it current: {}", ordinal_, error.what());
  }
  std::vector<Operation*> active;
  std::vector<Operation*> done;
  std::vector<Stream> finished_streams;
  auto last_progress = std::chrono::steady_clock::now();
  auto last_event_query = last_progress;
  while (true) {
    {
      std::unique_lock lock(mutex_);
      if (active.empty()) {
        wake_.wait(lock, [&] { return !incoming_.empty() || (stopping_ && in_flight_ == 0); });
        if (incoming_.empty()) return;
      }
      active.insert(active.end(), incoming_.begin(), incoming_.end());
      incoming_.clear();
    }
    const auto now = std::chrono::steady_clock::now();
    const bool query_events =
        mode_ == CompletionMode::event || now - last_event_query >= std::chrono::milliseconds{1};
    if (query_events) last_event_query = now;
    finished_streams.clear();
    done.clear();
    const std::int64_t pass_ns = monotonic_ns();  // what this pass finds done was done by its poll
    for (std::size_t i = 0; i < active.size();) {
      Operation* op = active[i];
      if (!poll(*op, query_events)) {
        op->seen_running_ns = pass_ns;
        ++i;
        continue;
      }
      active[i] = active.back();
      active.pop_back();
      done.push_back(op);
    }
    // In stream order (the active list is not): each op's stream was free when an earlier pass saw
    // its predecessor done or, for a predecessor done in this pass, after it was last seen running.
    if (done.size() > 1)
      std::sort(done.begin(), done.end(),
                [](const Operation* a, const Operation* b) { return a->armed < b->armed; });
    for (Operation* op : done) {
      if (op->stream != nullptr) {
        std::int64_t& free_ns = stream_done(op->stream);
        op->stream_free_ns = free_ns;
        free_ns = std::max(free_ns, op->seen_running_ns);
        finished_streams.push_back(op->stream);
      }
      finish(op);
    }
    const bool progress = !done.empty();
    for (Stream stream : finished_streams) stream_done(stream) = pass_ns;
    if (progress) {
      last_progress = std::chrono::steady_clock::now();
    } else if (!active.empty()) {
      // Spin for low latency while the device is busy, then back off to a light poll.
      if (std::chrono::steady_clock::now() - last_progress < spin_) {
        std::this_thread::yield();
      } else {
        std::unique_lock lock(mutex_);
        wake_.wait_for(lock, std::chrono::microseconds{20}, [&] { return !incoming_.empty(); });
      }
    }
  }
}

std::uint64_t Engine::wait_idle() noexcept {
  std::unique_lock lock(mutex_);
  idle_.wait(lock, [&] { return in_flight_ == 0 && gates_[0].waiting.empty() && gates_[1].waiting.empty(); });
  return started_;
}

void Engine::drain() noexcept {
  {
    std::unique_lock lock(mutex_);
    idle_.wait(lock,
               [&] { return in_flight_ == 0 && gates_[0].waiting.empty() && gates_[1].waiting.empty(); });
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

}  // namespace nerve::detail::cuda
