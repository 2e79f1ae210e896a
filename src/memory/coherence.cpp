#include "memory/coherence.hpp"

#include <algorithm>
#include <memory>
#include <new>
#include <span>

#include <fmt/format.h>

#include "nerve/error.hpp"

#include "memory/buffer_state.hpp"
#include "task/task_record.hpp"
#include "util/monotonic_clock.hpp"

namespace nerve::detail {

// A copy in flight into node `to`, and the tasks waiting for it. It holds a reference on its
// buffer and pins the source replica until it lands.
struct PendingCopy final : CopyCompletion {
  CoherenceEngine* engine;
  BufferState* buffer;
  unsigned from;
  unsigned to;
  std::size_t begin;
  std::size_t end;
  std::uint64_t start_epoch;
  std::int64_t start_ns = 0;  // with a TransferObserver
  // The task it was started for, whose bytes_moved counts it (null: a HOST_CACHED copy-back, started
  // for no task). Tasks that join it wait for it too, but moved nothing themselves.
  TaskRecord* started_for = nullptr;
  std::vector<TaskRecord*> waiters;  // they need its bytes: a failed copy fails them
  // Writers that wait only for it to be over (wait_for_copies_touching): they need none of its bytes,
  // so its failure is not theirs.
  std::vector<TaskRecord*> orderers;
  // Copies into the same node over the same bytes land in the order they were queued: a later one
  // waits for `blockers` earlier ones, and each earlier one lists the later ones it holds back.
  unsigned blockers = 0;
  std::vector<PendingCopy*> followers;

  void copy_done(bool ok, const std::string& error) noexcept override {
    engine->copy_finished(*this, ok, error);
  }
};

namespace {

constexpr NodeMask bit(unsigned node) noexcept { return NodeMask{1} << node; }

// A replica's size on a device node: a zero-byte buffer still takes one byte, so that it has an address.
std::size_t replica_bytes(const BufferState& buffer) noexcept { return buffer.bytes == 0 ? 1 : buffer.bytes; }

// lands_over(): `later` copies into the node `earlier` copies into, over some of the same bytes.
bool lands_over(const PendingCopy& later, const PendingCopy& earlier) noexcept {
  return earlier.to == later.to && earlier.begin < later.end && later.begin < earlier.end;
}

// make_room_for_one(): after it, one push_back cannot throw. Grows geometrically, as push_back does.
template <class T>
void make_room_for_one(std::vector<T>& values) {
  if (values.size() == values.capacity()) values.reserve(std::max<std::size_t>(4, 2 * values.size()));
}

// accesses_buffer(): `task` declares an access to `buffer`.
bool accesses_buffer(const TaskRecord& task, const BufferState* buffer) noexcept {
  for (std::size_t i = 0; i < task.access_count; ++i) {
    if (task.accesses[i].buffer == buffer) return true;
  }
  return false;
}

// describe_limit(): a node's limit for an out-of-memory message. A node without one (a plugin device
// whose size is unknown) runs out when its allocator fails, not at "limit 18446744073709551615 bytes".
std::string describe_limit(const MemoryNode& memory) {
  return memory.limit() == SIZE_MAX ? std::string("no limit") : fmt::format("limit {} bytes", memory.limit());
}

}  // namespace

BufferReplicas::BufferReplicas(std::size_t bytes, std::byte* host) : bytes_(bytes) {
  ranges_.push_back(Range{0, bytes == 0 ? 1 : bytes, bit(0), 0});
  replicas_.resize(1);
  replicas_[0].data = host;
}

std::size_t BufferReplicas::split_at(std::size_t position) {
  auto it = std::upper_bound(ranges_.begin(), ranges_.end(), position,
                             [](std::size_t value, const Range& r) { return value < r.end; });
  const auto index = static_cast<std::size_t>(it - ranges_.begin());
  if (index == ranges_.size() || ranges_[index].begin == position) return index;
  Range right = ranges_[index];
  right.begin = position;
  ranges_[index].end = position;
  ranges_.insert(ranges_.begin() + static_cast<std::ptrdiff_t>(index) + 1, right);
  return index + 1;
}

void BufferReplicas::merge() {
  std::size_t out = 0;
  for (std::size_t i = 1; i < ranges_.size(); ++i) {
    if (ranges_[i].valid == ranges_[out].valid && ranges_[i].epoch == ranges_[out].epoch) {
      ranges_[out].end = ranges_[i].end;
    } else {
      ranges_[++out] = ranges_[i];
    }
  }
  ranges_.resize(out + 1);
}

CoherenceEngine::CoherenceEngine(std::vector<MemoryNode*> nodes, DataListener& listener)
    : nodes_(std::move(nodes)),
      listener_(listener),
      residents_(new NodeResidents[max_memory_nodes]),
      transfers_(new TransferCounters[std::size_t{max_memory_nodes} * max_memory_nodes]) {
  if (nodes_.size() > max_memory_nodes) {
    throw Error(ErrorCode::not_supported,
                fmt::format("at most {} memory nodes are supported", max_memory_nodes));
  }
}

CoherenceEngine::~CoherenceEngine() = default;

unsigned CoherenceEngine::choose_source(NodeMask valid, unsigned destination) const noexcept {
  // The host when it holds the bytes (every device reaches it), else the lowest-numbered valid node.
  if ((valid & bit(0)) != 0) return 0;
  for (unsigned node = 1; node < nodes_.size(); ++node) {
    if (node != destination && (valid & bit(node)) != 0) return node;
  }
  return 0;
}

std::byte* CoherenceEngine::replica(BufferState& buffer, unsigned node) noexcept {
  std::lock_guard lock(buffer.replicas.mutex_);
  auto& replicas = buffer.replicas.replicas_;
  return node < replicas.size() ? replicas[node].data : nullptr;
}

std::size_t CoherenceEngine::valid_bytes(BufferState& buffer, std::size_t offset, std::size_t size,
                                         unsigned node) {
  std::lock_guard lock(buffer.replicas.mutex_);
  std::size_t total = 0;
  for (const auto& range : buffer.replicas.ranges_) {
    const std::size_t begin = std::max(range.begin, offset);
    const std::size_t end = std::min(range.end, offset + size);
    if (begin < end && (range.valid & bit(node)) != 0) total += end - begin;
  }
  return total;
}

bool CoherenceEngine::copy_in_flight(BufferState& buffer, std::size_t offset, std::size_t size,
                                     unsigned node) {
  std::lock_guard lock(buffer.replicas.mutex_);
  return std::any_of(
      buffer.replicas.copies_.begin(), buffer.replicas.copies_.end(), [&](const PendingCopy* copy) {
        return (copy->to == node || copy->from == node) && copy->begin < offset + size && offset < copy->end;
      });
}

bool CoherenceEngine::acquire(TaskRecord* task, unsigned node) {
  // Phase 1: every replica the task needs, allocated and pinned, before any copy is promised — so
  // that a task that must wait for memory leaves nothing behind.
  if (node != 0) {
    std::size_t pinned = 0;
    std::exception_ptr failure;
    std::vector<BufferState*> evicted;
    {
      std::lock_guard pinning(residents_[node].pinning);
      try {
        for (; pinned < task->access_count; ++pinned)
          pin_replica(*task->accesses[pinned].buffer, node, *task);
      } catch (...) {
        failure = std::current_exception();
        for (std::size_t i = 0; i < pinned; ++i) {
          BufferState& buffer = *task->accesses[i].buffer;
          std::lock_guard lock(buffer.replicas.mutex_);
          --buffer.replicas.replicas_[node].pins;
        }
      }
      evicted.swap(residents_[node].evicted);
    }
    // Outside the lock: the last reference to an evicted buffer may destroy it, which frees memory
    // and retries waiting tasks, whose acquire takes the lock.
    for (BufferState* buffer : evicted) retire_task_access(buffer);
    // Its own pins went silently: no other task counted them (see NodeResidents::pinning).
    if (failure) std::rethrow_exception(failure);
  }
  // Phase 2: copy what it reads, claim what it writes.
  task->fetches.store(1, std::memory_order_relaxed);  // a guard while copies are being started
  std::vector<PendingCopy*> started;
  try {
    for (std::size_t i = 0; i < task->access_count; ++i) {
      const AccessRecord& access = task->accesses[i];
      BufferState& buffer = *access.buffer;
      if (node == 0 && buffer.host_only.load(std::memory_order_acquire)) continue;
      std::lock_guard lock(buffer.replicas.mutex_);
      if (node != 0) buffer.replicas.replicas_[node].last_use = tick();
      if (reads(access.mode))
        fetch_range(buffer, node, access.offset, access.offset + access.size, task, started);
      if (writes(access.mode)) {
        wait_for_copies_touching(buffer, node, access.offset, access.offset + access.size, task);
        claim_for_write(buffer, node, access.offset, access.offset + access.size);
      }
    }
  } catch (...) {
    // Out of memory on the host while copies were being promised (each step leaves the state whole:
    // fetch_range() reserves before it queues). The task fails as one whose input could not be
    // brought, through the usual end, which releases its pins; the copies already queued start, as
    // their other waiters may need them.
    if (!task->cancel_pending.exchange(true, std::memory_order_acq_rel)) {
      task->cancel_cause = TaskRecord::CancelCause::data;
      task->error = std::current_exception();
    }
  }
  start_copies(started);
  return task->fetches.fetch_sub(1, std::memory_order_acq_rel) == 1;
}

std::size_t CoherenceEngine::replica_footprint(const TaskRecord& task) {
  const std::span<const AccessRecord> accesses(task.accesses, task.access_count);
  std::size_t total = 0;
  // Few accesses (nearly every task): a pairwise look is cheaper than sorting a copy.
  if (accesses.size() <= 32) {
    for (std::size_t i = 0; i < accesses.size(); ++i) {
      const BufferState* buffer = accesses[i].buffer;
      if (std::none_of(accesses.begin(), accesses.begin() + static_cast<std::ptrdiff_t>(i),
                       [&](const AccessRecord& earlier) { return earlier.buffer == buffer; }))
        total += replica_bytes(*buffer);
    }
    return total;
  }
  std::vector<const BufferState*> buffers;
  buffers.reserve(accesses.size());
  for (const AccessRecord& access : accesses) buffers.push_back(access.buffer);
  std::sort(buffers.begin(), buffers.end());
  buffers.erase(std::unique(buffers.begin(), buffers.end()), buffers.end());
  for (const BufferState* buffer : buffers) total += replica_bytes(*buffer);
  return total;
}

bool CoherenceEngine::host_holds_all(const TaskRecord& task) noexcept {
  for (std::size_t i = 0; i < task.access_count; ++i) {
    if (!task.accesses[i].buffer->host_only.load(std::memory_order_acquire)) return false;
  }
  return true;
}

void CoherenceEngine::fetch_range(BufferState& buffer, unsigned node, std::size_t begin, std::size_t end,
                                  TaskRecord* waiter, std::vector<PendingCopy*>& started) {
  auto& state = buffer.replicas;
  if (begin == end) return;
  // Ranges may have merged since a copy into this node started: split at copies' edges so that each
  // range is either wholly inside an in-flight copy (join it) or wholly outside (copy it).
  for (const PendingCopy* copy : state.copies_) {
    if (copy->to != node) continue;
    if (copy->begin > begin && copy->begin < end) state.split_at(copy->begin);
    if (copy->end > begin && copy->end < end) state.split_at(copy->end);
  }
  std::size_t first = state.split_at(begin);
  const std::size_t last = state.split_at(end);
  // A range not valid here joins the copy into here that covers it, if that copy carries its
  // current bytes. Copies into one node over the same bytes land in the order they were queued
  // (queue_copy), so the one to look at is the last: when it lands, no other is still writing there.
  auto joinable = [&](const BufferReplicas::Range& range) -> PendingCopy* {
    PendingCopy* last_covering = nullptr;
    for (PendingCopy* copy : state.copies_) {
      if (copy->to == node && copy->begin <= range.begin && range.end <= copy->end) last_covering = copy;
    }
    return last_covering != nullptr && last_covering->start_epoch >= range.epoch ? last_covering : nullptr;
  };
  for (std::size_t k = first; k < last;) {
    const auto& range = state.ranges_[k];
    if ((range.valid & bit(node)) != 0) {
      ++k;
      continue;
    }
    if (PendingCopy* copy = joinable(range)) {
      if (std::find(copy->waiters.begin(), copy->waiters.end(), waiter) == copy->waiters.end()) {
        copy->waiters.push_back(waiter);
        waiter->fetches.fetch_add(1, std::memory_order_relaxed);
      }
      ++k;
      continue;
    }
    // Coalesce the following ranges that need the same copy into one transfer.
    const unsigned source = choose_source(range.valid, node);
    std::size_t m = k + 1;
    while (m < last && (state.ranges_[m].valid & bit(node)) == 0 &&
           choose_source(state.ranges_[m].valid, node) == source && joinable(state.ranges_[m]) == nullptr) {
      ++m;
    }
    // Everything the copy needs is allocated before anything counts it: a bad_alloc leaves no copy
    // half queued (one in copies_ that never starts would block every later copy over its bytes).
    auto copy = std::make_unique<PendingCopy>();
    copy->engine = this;
    copy->buffer = &buffer;
    copy->from = source;
    copy->to = node;
    copy->begin = state.ranges_[k].begin;
    copy->end = state.ranges_[m - 1].end;
    copy->start_epoch = state.epoch_;
    copy->started_for = waiter;
    copy->waiters.reserve(1);
    reserve_queue_copy(state, *copy, started);
    copy->waiters.push_back(waiter);
    waiter->fetches.fetch_add(1, std::memory_order_relaxed);
    hold_access(&buffer);  // the waiter's own access is pending
    ++state.replicas_[source].pins;
    queue_copy(state, copy.release(), started);
    k = m;
  }
}

void CoherenceEngine::wait_for_copies_touching(BufferState& buffer, unsigned node, std::size_t begin,
                                               std::size_t end, TaskRecord* writer) {
  // A copy still landing in [begin, end) on this node would overwrite what the writer is about to
  // write there (its epoch keeps it from marking the bytes valid, but not from storing them), and one
  // still reading those bytes from this node would carry the writer's bytes instead of the ones it
  // was started for. Tasks' own copies are ordered by their dependencies; what is left is the
  // HOST_CACHED copy-back a device write starts when it ends, which nothing waits for: the next
  // writer on either end waits for it here.
  for (PendingCopy* copy : buffer.replicas.copies_) {
    if ((copy->to != node && copy->from != node) || copy->end <= begin || end <= copy->begin) continue;
    auto waits = [writer](const std::vector<TaskRecord*>& tasks) {
      return std::find(tasks.begin(), tasks.end(), writer) != tasks.end();
    };
    if (waits(copy->waiters) || waits(copy->orderers)) continue;
    copy->orderers.push_back(writer);
    writer->fetches.fetch_add(1, std::memory_order_relaxed);
  }
}

void CoherenceEngine::claim_for_write(BufferState& buffer, unsigned node, std::size_t begin,
                                      std::size_t end) {
  auto& state = buffer.replicas;
  if (begin == end) return;
  const std::size_t first = state.split_at(begin);
  const std::size_t last = state.split_at(end);
  const std::uint64_t epoch = ++state.epoch_;
  for (std::size_t k = first; k < last; ++k) {
    state.ranges_[k].valid = bit(node);
    state.ranges_[k].epoch = epoch;
  }
  state.merge();
}

void CoherenceEngine::queue_copy(BufferReplicas& state, PendingCopy* copy,
                                 std::vector<PendingCopy*>& started) {
  // Nothing orders two copies into one node by itself: HOST_CACHED copy-backs from two devices that
  // wrote in turn, or a read's fetch of bytes newer than a copy-back still in flight. The epochs keep
  // the older copy from marking those bytes valid, but its data could still land last.
  for (PendingCopy* earlier : state.copies_) {
    if (!lands_over(*copy, *earlier)) continue;
    earlier->followers.push_back(copy);
    ++copy->blockers;
  }
  state.copies_.push_back(copy);
  if (copy->blockers == 0) started.push_back(copy);
}

void CoherenceEngine::reserve_queue_copy(BufferReplicas& state, const PendingCopy& copy,
                                         std::vector<PendingCopy*>& started) {
  for (PendingCopy* earlier : state.copies_) {
    if (lands_over(copy, *earlier)) make_room_for_one(earlier->followers);
  }
  make_room_for_one(state.copies_);
  make_room_for_one(started);
}

void CoherenceEngine::start_copies(std::vector<PendingCopy*>& started) {
  for (PendingCopy* copy : started) {
    std::byte* source = nullptr;
    std::byte* destination = nullptr;
    {
      std::lock_guard lock(copy->buffer->replicas.mutex_);
      source = copy->buffer->replicas.replicas_[copy->from].data + copy->begin;
      destination = copy->buffer->replicas.replicas_[copy->to].data + copy->begin;
    }
    if (observer_ != nullptr) copy->start_ns = monotonic_ns();
    try {
      MemoryNode::copy(*nodes_[copy->from], source, *nodes_[copy->to], destination, copy->end - copy->begin,
                       *copy);
    } catch (const std::exception& error) {
      copy_finished(*copy, false, error.what());
    }
  }
  started.clear();
}

void CoherenceEngine::copy_finished(PendingCopy& copy, bool ok, const std::string& error) noexcept {
  BufferState& buffer = *copy.buffer;
  std::vector<PendingCopy*> unblocked;
  {
    std::lock_guard lock(buffer.replicas.mutex_);
    auto& state = buffer.replicas;
    // Out of memory to split the ranges at its edges (they may have merged since it was queued), the
    // bytes are not marked valid there: its waiters still read what landed, and a later task that
    // needs them copies them again.
    if (ok) {
      try {
        const std::size_t first = state.split_at(copy.begin);
        const std::size_t last = state.split_at(copy.end);
        for (std::size_t k = first; k < last; ++k) {
          // Bytes rewritten after the copy started are newer than what it carried.
          if (state.ranges_[k].epoch <= copy.start_epoch) state.ranges_[k].valid |= bit(copy.to);
        }
        state.merge();
      } catch (const std::bad_alloc&) {
      }
    }
    --state.replicas_[copy.from].pins;
    state.copies_.erase(std::find(state.copies_.begin(), state.copies_.end(), &copy));
    for (PendingCopy* follower : copy.followers) {
      if (--follower->blockers == 0) unblocked.push_back(follower);
    }
  }
  start_copies(unblocked);
  const std::size_t bytes = copy.end - copy.begin;
  // A failed copy moved nothing that counts: the statistics, the trace and the task's bytes say what
  // arrived.
  if (ok) {
    TransferCounters& counters = transfers_[copy.from * max_memory_nodes + copy.to];
    counters.copies.fetch_add(1, std::memory_order_relaxed);
    counters.bytes.fetch_add(bytes, std::memory_order_relaxed);
  }
  if (ok && observer_ != nullptr) {
    observer_->transfer_finished(copy.from, copy.to, bytes, copy.start_ns);
    // Counted once, for the task that started it: one that joined it moved nothing itself.
    if (copy.started_for != nullptr)
      copy.started_for->bytes_moved.fetch_add(bytes, std::memory_order_relaxed);
  }
  for (TaskRecord* waiter : copy.waiters) {
    if (!ok && !waiter->cancel_pending.exchange(true, std::memory_order_acq_rel)) {
      // Published to whoever runs the waiter by the fetch count's release below, as `error` is.
      waiter->cancel_cause = TaskRecord::CancelCause::data;
      waiter->error = std::make_exception_ptr(
          Error(ErrorCode::task_failed,
                fmt::format("copying {} bytes of {} from {} to {} failed: {}", bytes, buffer.describe(),
                            nodes_[copy.from]->name(), nodes_[copy.to]->name(), error)));
    }
    if (waiter->fetches.fetch_sub(1, std::memory_order_acq_rel) == 1) listener_.data_ready(waiter);
  }
  for (TaskRecord* writer : copy.orderers) {
    if (writer->fetches.fetch_sub(1, std::memory_order_acq_rel) == 1) listener_.data_ready(writer);
  }
  const unsigned source = copy.from;
  delete &copy;
  retire_task_access(&buffer);
  if (source != 0) listener_.memory_freed(source);  // the source replica is unpinned
}

void CoherenceEngine::release(TaskRecord* task, unsigned node) noexcept {
  if (node == 0) return;  // nothing is pinned on the host, and HOST_CACHED concerns devices' writes
  std::vector<PendingCopy*> started;
  std::vector<std::pair<std::size_t, std::size_t>> written;
  for (std::size_t i = 0; i < task->access_count; ++i) {
    BufferState& buffer = *task->accesses[i].buffer;
    std::lock_guard lock(buffer.replicas.mutex_);
    --buffer.replicas.replicas_[node].pins;
    // HOST_CACHED: copy what the device wrote back to the host now, so the host stays valid — once
    // per buffer (at its first access), over the union of the task's writes to it: a byte two of
    // its accesses wrote goes back in one copy, never in two that land over a reader in turn.
    if (!buffer.host_cached) continue;
    bool seen_before = false;
    for (std::size_t k = 0; k < i; ++k) seen_before |= task->accesses[k].buffer == &buffer;
    if (seen_before) continue;
    // Out of memory, a stretch is not copied back now (every allocation comes before any change):
    // what the device wrote stays valid there only, and a host access fetches it, as it would for a
    // buffer without HOST_CACHED.
    written.clear();
    try {
      for (std::size_t k = i; k < task->access_count; ++k) {
        const AccessRecord& access = task->accesses[k];
        if (access.buffer == &buffer && writes(access.mode) && access.size != 0)
          written.emplace_back(access.offset, access.offset + access.size);
      }
    } catch (const std::bad_alloc&) {
      continue;
    }
    std::sort(written.begin(), written.end());
    auto& state = buffer.replicas;
    for (std::size_t k = 0; k < written.size();) {
      auto [begin, end] = written[k];
      for (++k; k < written.size() && written[k].first <= end; ++k) end = std::max(end, written[k].second);
      std::unique_ptr<PendingCopy> copy;
      try {
        copy = std::make_unique<PendingCopy>();
        copy->engine = this;
        copy->buffer = &buffer;
        copy->from = node;
        copy->to = 0;
        copy->begin = begin;
        copy->end = end;
        copy->start_epoch = state.epoch_;
        reserve_queue_copy(state, *copy, started);
      } catch (const std::bad_alloc&) {
        continue;
      }
      hold_access(&buffer);  // the finishing task's access is still pending
      ++state.replicas_[node].pins;
      queue_copy(state, copy.release(), started);
    }
  }
  start_copies(started);
  listener_.memory_freed(node);
}

void CoherenceEngine::pin_replica(BufferState& buffer, unsigned node, const TaskRecord& task) {
  const std::size_t bytes = replica_bytes(buffer);
  {
    std::lock_guard lock(buffer.replicas.mutex_);
    auto& replicas = buffer.replicas.replicas_;
    if (replicas.size() < nodes_.size()) replicas.resize(nodes_.size());
    buffer.host_only.store(false, std::memory_order_release);
    if (replicas[node].data != nullptr) {
      ++replicas[node].pins;
      return;
    }
  }
  {
    // Room in the residents list first: once the replica is installed and pinned, listing it must
    // not fail (an unlisted replica is never evicted, and the pin would stay). Only pinners push
    // there, one at a time (`pinning`).
    std::lock_guard lock(residents_[node].mutex);
    make_room_for_one(residents_[node].buffers);
  }
  std::byte* data = allocate_evicting(node, bytes, buffer, task);
  bool installed = false;
  {
    std::lock_guard lock(buffer.replicas.mutex_);
    auto& replica = buffer.replicas.replicas_[node];
    if (replica.data == nullptr) {
      replica.data = data;
      installed = true;
    }
    ++replica.pins;
  }
  if (!installed) {
    nodes_[node]->deallocate(data, bytes);  // another task installed one meanwhile
    return;
  }
  std::lock_guard lock(residents_[node].mutex);
  residents_[node].buffers.push_back(&buffer);
}

std::byte* CoherenceEngine::allocate_evicting(unsigned node, std::size_t bytes, const BufferState& requester,
                                              const TaskRecord& task) {
  MemoryNode& memory = *nodes_[node];
  const std::size_t own = replica_footprint(task);
  auto cannot_hold = [&](const NodeCensus& census) {
    return Error(ErrorCode::out_of_memory,
                 fmt::format("memory node '{}' cannot hold {} more bytes for {}: {}, {} in use by {} "
                             "replica(s); the task needs {} bytes there in all (a replica on a device is "
                             "the whole buffer, even for a task on a slice of it)",
                             memory.name(), bytes, requester.describe(), describe_limit(memory),
                             memory.used(), census.replicas, own));
  };
  // A task that can never fit fails before it evicts anything: emptying the node (dirty replicas
  // written back, to be copied in again by the next task there) would not make it fit.
  if (own > memory.limit()) throw cannot_hold(take_census(node, task));
  // Passes that found room after the allocation failed (freed meanwhile by a task's eviction or a
  // dying buffer). Bounded: a device's allocator may fail below the limit, and then room never helps.
  int room_retries = 0;
  while (true) {
    try {
      if (std::byte* data = memory.try_allocate(bytes)) return data;
    } catch (const Error& error) {
      // The node refused the size itself (a device's largest single allocation): say which buffer
      // asked and what the node holds, as the limit's message does.
      if (error.code() != ErrorCode::out_of_memory) throw;
      throw Error(
          ErrorCode::out_of_memory,
          fmt::format("memory node '{}' cannot hold {} bytes for {}: {}; {}, {} bytes in use", memory.name(),
                      bytes, requester.describe(), error.what(), describe_limit(memory), memory.used()));
    }
    if (evict(node, bytes, task) != 0) continue;
    // Nothing more can be evicted. If other tasks hold replicas here, memory frees up when they
    // finish: the task waits.
    const NodeCensus census = take_census(node, task);
    // Bytes in use beyond the replicas listed are another task's, between its allocation and its pin.
    if (census.held_by_others || memory.used() > census.bytes)
      throw MemoryBusy{};              // their release retries it
    if (census.idle_others) continue;  // released since the eviction pass looked: evict it now
    if (memory.used() + bytes <= memory.limit() && ++room_retries < 64) continue;
    throw cannot_hold(census);
  }
}

CoherenceEngine::NodeCensus CoherenceEngine::take_census(unsigned node, const TaskRecord& task) {
  NodeCensus census;
  std::lock_guard lock(residents_[node].mutex);
  for (BufferState* buffer : residents_[node].buffers) {
    std::lock_guard buffer_lock(buffer->replicas.mutex_);
    const auto& state = buffer->replicas;
    if (state.replicas_[node].data == nullptr) continue;  // being evicted or forgotten
    ++census.replicas;
    census.bytes += replica_bytes(*buffer);
    if (accesses_buffer(task, buffer)) continue;
    const bool held = in_use_on(state, node);
    census.held_by_others |= held;
    census.idle_others |= !held;
  }
  return census;
}

// Evicts unpinned replicas from `node`, least recently used first and STICKY buffers last, until
// `wanted` bytes are free or nothing else can go. Returns the bytes freed. Never one of `task`'s own
// buffers: those not pinned yet would be allocated again at once and copied in again (a dirty one
// written back first), for the task that evicted them.
std::size_t CoherenceEngine::evict(unsigned node, std::size_t wanted, const TaskRecord& task) {
  std::vector<BufferState*> candidates;
  {
    std::lock_guard lock(residents_[node].mutex);
    for (BufferState* buffer : residents_[node].buffers) {
      if (!accesses_buffer(task, buffer) && try_hold_access(buffer)) candidates.push_back(buffer);
    }
  }
  auto key = [node](BufferState* buffer) {
    std::lock_guard lock(buffer->replicas.mutex_);
    return std::pair{buffer->sticky, buffer->replicas.replicas_[node].last_use};
  };
  std::vector<std::pair<std::pair<bool, std::uint64_t>, BufferState*>> order;
  order.reserve(candidates.size());
  for (BufferState* buffer : candidates) order.emplace_back(key(buffer), buffer);
  std::sort(order.begin(), order.end());
  std::size_t freed = 0;
  for (auto& [ignored, buffer] : order) {
    if (freed < wanted && evict_replica(*buffer, node)) freed += replica_bytes(*buffer);
    residents_[node].evicted.push_back(buffer);  // its hold ends when acquire lets `pinning` go
  }
  return freed;
}

// in_use_on(): the buffer's replica on `node` is pinned by a task or a copy reads or fills it — it
// cannot be evicted now, and it frees up (memory_freed) when that ends. Under the buffer's lock.
bool CoherenceEngine::in_use_on(const BufferReplicas& state, unsigned node) noexcept {
  if (state.replicas_[node].pins != 0) return true;
  for (const PendingCopy* copy : state.copies_) {
    if (copy->to == node || copy->from == node) return true;
  }
  return false;
}

bool CoherenceEngine::evict_replica(BufferState& buffer, unsigned node) {
  std::byte* data = nullptr;
  {
    std::lock_guard lock(buffer.replicas.mutex_);
    auto& state = buffer.replicas;
    auto& replica = state.replicas_[node];
    if (replica.data == nullptr || in_use_on(state, node)) return false;
    write_back_exclusive(buffer, node);
    for (auto& range : state.ranges_) range.valid &= ~bit(node);
    state.merge();
    data = std::exchange(replica.data, nullptr);
  }
  nodes_[node]->deallocate(data, replica_bytes(buffer));
  std::lock_guard lock(residents_[node].mutex);
  auto& list = residents_[node].buffers;
  list.erase(std::remove(list.begin(), list.end(), &buffer), list.end());
  return true;
}

// Ranges whose only valid copy is on `node` go back to the host before the replica is dropped.
// The copy is synchronous and does not go through the node's asynchronous engine, whose completion
// callbacks may need this buffer's lock (held here).
void CoherenceEngine::write_back_exclusive(BufferState& buffer, unsigned node) {
  auto& state = buffer.replicas;
  for (auto& range : state.ranges_) {
    if (range.valid != bit(node)) continue;
    nodes_[node]->copy_sync(*nodes_[node], state.replicas_[node].data + range.begin, *nodes_[0],
                            state.replicas_[0].data + range.begin, range.end - range.begin);
    range.valid |= bit(0);
    TransferCounters& counters = transfers_[std::size_t{node} * max_memory_nodes];
    counters.copies.fetch_add(1, std::memory_order_relaxed);
    counters.bytes.fetch_add(range.end - range.begin, std::memory_order_relaxed);
  }
}

void CoherenceEngine::forget(BufferState& buffer) noexcept {
  std::vector<std::pair<unsigned, std::byte*>> owned;
  {
    std::lock_guard lock(buffer.replicas.mutex_);
    auto& replicas = buffer.replicas.replicas_;
    for (unsigned node = 1; node < replicas.size(); ++node) {
      if (replicas[node].data != nullptr)
        owned.emplace_back(node, std::exchange(replicas[node].data, nullptr));
    }
  }
  for (auto [node, data] : owned) {
    nodes_[node]->deallocate(data, replica_bytes(buffer));
    std::lock_guard lock(residents_[node].mutex);
    auto& list = residents_[node].buffers;
    list.erase(std::remove(list.begin(), list.end(), &buffer), list.end());
  }
  for (auto [node, data] : owned) listener_.memory_freed(node);
}

}  // namespace nerve::detail
