// mpi_transport.cpp — the MPI transport: one communication thread per rank makes every MPI call.
//
// Why a communication thread (MPI_THREAD_SERIALIZED) rather than MPI_THREAD_MULTIPLE calls from the
// workers: Open MPI's ob1 layer only progresses inside MPI calls, so someone must poll anyway while
// large (rendezvous) messages are in flight; a task that blocked in MPI_Wait would hold a worker;
// and Open MPI 4.1 takes a global lock per call under THREAD_MULTIPLE. docs/DISTRIBUTED.md has the
// measurement (NERVE_MPI_THREAD_LEVEL=multiple selects the other level for it).
//
// The thread's loop: take what tasks queued (sends, receives, calls from the submitting thread),
// probe for arriving messages (MPI_Improbe, so that a payload whose receive is already posted goes
// straight into the replica), test the requests in flight, send batches older than sync_interval;
// then spin briefly or sleep on a condition variable that queued work wakes.
// The C API only: Open MPI's deprecated C++ bindings would need libmpi_cxx.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <span>
#include <string_view>
#include <thread>
#include <utility>

#include <fmt/format.h>
#include <mpi.h>

#include "nerve/error.hpp"

#include "dist/transport.hpp"
#include "dist/wire.hpp"
#include "util/log.hpp"
#include "util/start_thread.hpp"

namespace nerve::distributed::detail {
namespace {

using Clock = std::chrono::steady_clock;
using nerve::detail::complete_deferred;
using nerve::detail::TaskRecord;

// Payloads up to this size (after compression) are batched when distributed.batch_size > 1.
constexpr std::size_t batch_item_limit = std::size_t{64} * 1024;

struct OutgoingSend {
  int to;
  std::uint64_t sequence;
  const void* data;
  std::size_t bytes;
  TaskRecord* task;
};

struct PostedReceive {
  void* data;
  std::size_t bytes;
  TaskRecord* task;
  std::string what;  // the replica, for errors (Transport::receive)
};

struct IncomingReceive {
  int from;
  std::uint64_t sequence;
  PostedReceive posted;
};

// A request in flight.
struct Active {
  enum class What { send, receive_direct, receive_staged };
  What what = What::send;
  MPI_Request request = MPI_REQUEST_NULL;
  TaskRecord* task = nullptr;     // completed with the request (direct sends and receives)
  std::vector<std::byte> buffer;  // owned bytes: a compressed or batched send, a staged receive
  int peer = 0;
  Kind kind = Kind::raw;
  std::uint64_t sequence = 0;
  std::size_t payload_bytes = 0;
};

struct Batch {
  std::vector<std::byte> bytes;
  std::uint32_t count = 0;
  std::uint64_t first_sequence = 0;
  Clock::time_point started;
};

// One MPI transport alive at a time in a process: each has a communication thread calling MPI, which
// MPI_THREAD_SERIALIZED does not allow from two threads at once. MPI is per process, so this claim is
// too (the one piece of process-wide state here). A second Runtime over another context was accepted
// and the two threads' calls raced.
std::atomic<bool> transport_alive{false};

class SoleTransport {
 public:
  SoleTransport() {
    if (transport_alive.exchange(true, std::memory_order_acq_rel)) {
      throw Error(ErrorCode::not_supported,
                  "distributed: another Runtime with the mpi backend is alive in this process (over another "
                  "context): one at a time, as each has a thread calling MPI; destroy it first");
    }
  }
  ~SoleTransport() { transport_alive.store(false, std::memory_order_release); }
  SoleTransport(const SoleTransport&) = delete;
  SoleTransport& operator=(const SoleTransport&) = delete;
};

class MpiTransport final : public Transport {
 public:
  explicit MpiTransport(const Config::Distributed& config) : config_(config) {
    int initialized = 0, finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (finalized != 0) {  // MPI cannot start twice in a process: say so instead of letting it abort
      throw Error(
          ErrorCode::not_supported,
          "distributed: MPI was already finalised in this process (by an earlier Runtime that "
          "initialised it): one Runtime per process, or initialise MPI yourself with "
          "MPI_Init_thread (MPI_THREAD_SERIALIZED or MULTIPLE) and finalise it after the last Runtime");
    }
    if (initialized == 0) {
      // Set but empty (a variable that expanded to nothing) counts as unset, the default, as an empty
      // NERVE_MPIRUN does for nerve-run and an empty NERVE_CONFIG for the configuration.
      const char* level_name = std::getenv("NERVE_MPI_THREAD_LEVEL");
      const std::string_view level = level_name != nullptr ? level_name : "";
      if (!level.empty() && level != "serialized" && level != "multiple") {
        throw Error(
            ErrorCode::invalid_config,
            fmt::format("NERVE_MPI_THREAD_LEVEL is '{}', not 'serialized' (the default) or 'multiple'",
                        level));
      }
      const bool multiple = level == "multiple";
      int provided = 0;
      MPI_Init_thread(nullptr, nullptr, multiple ? MPI_THREAD_MULTIPLE : MPI_THREAD_SERIALIZED, &provided);
      initialized_here_ = true;
      thread_level_ = provided;
    } else {
      MPI_Query_thread(&thread_level_);
    }
    if (thread_level_ < MPI_THREAD_SERIALIZED) {
      if (initialized_here_) MPI_Finalize();
      throw Error(
          ErrorCode::not_supported,
          fmt::format("distributed: MPI provides {} only; nerve's communication thread needs "
                      "MPI_THREAD_SERIALIZED (initialise MPI with it)",
                      thread_level_ == MPI_THREAD_SINGLE ? "MPI_THREAD_SINGLE" : "MPI_THREAD_FUNNELED"));
    }
    MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    // Errors come back as codes (checked below) rather than aborting inside MPI.
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_dup(comm_, &leave_comm_);  // after the handler: a duplicate inherits it
    void* tag_upper_bound = nullptr;
    int found = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_upper_bound, &found);
    const std::uint64_t tag_ub =
        found != 0 ? static_cast<std::uint64_t>(*static_cast<int*>(tag_upper_bound)) : 32767;
    sequence_mask_ = (tag_ub >> kind_bits);
    // Round down to 2^k - 1 so that masking is a reduction modulo 2^k.
    std::uint64_t mask = 1;
    while ((mask << 1 | 1) <= sequence_mask_) mask = mask << 1 | 1;
    sequence_mask_ = mask;
    try {
      batches_.resize(static_cast<std::size_t>(size_));
      thread_ = nerve::detail::start_thread("the distributed runtime's MPI communication thread",
                                            [this] { run(); });
    } catch (...) {
      MPI_Comm_free(&comm_);
      MPI_Comm_free(&leave_comm_);
      if (initialized_here_) MPI_Finalize();
      throw;
    }
  }

  ~MpiTransport() override { shutdown(); }

  int rank() const noexcept override { return rank_; }
  int size() const noexcept override { return size_; }

  void send(int to, std::uint64_t sequence, const void* data, std::size_t bytes, TaskRecord* task) override {
    if (bytes > static_cast<std::size_t>(INT32_MAX)) {
      complete_deferred(
          task,
          std::make_exception_ptr(Error(
              ErrorCode::not_supported,
              fmt::format("distributed: a payload of {} bytes is over MPI's int count (at most {} bytes)",
                          bytes, INT32_MAX))));
      return;
    }
    {
      std::lock_guard lock(mutex_);
      sends_.push_back(OutgoingSend{to, sequence, data, bytes, task});
    }
    wake_.notify_one();
  }

  void receive(int from, std::uint64_t sequence, void* data, std::size_t bytes, TaskRecord* task,
               std::string what) override {
    {
      std::lock_guard lock(mutex_);
      receives_.push_back(IncomingReceive{from, sequence, PostedReceive{data, bytes, task, std::move(what)}});
    }
    wake_.notify_one();
  }

  void report_failure(const std::string& message) override {
    {
      std::lock_guard lock(mutex_);
      if (failure_) return;
      failure_ = message;
      broadcast_failure_ = true;
    }
    wake_.notify_one();
  }

  std::optional<std::string> failure() const override {
    std::lock_guard lock(mutex_);
    return failure_;
  }

  void set_waiting(bool waiting) noexcept override {
    waiting_.fetch_add(waiting ? 1 : -1, std::memory_order_acq_rel);
    if (!waiting) return;
    // Through the mutex: the communication thread checks waiting_ in its wait's predicate under it,
    // so the change is seen either there or by the notification (it was lost for a pause of up to 2 ms).
    { std::lock_guard lock(mutex_); }
    wake_.notify_one();
  }

  void flush() override {
    call([this] {
      for (int to = 0; to < size_; ++to) send_batch(to, false);
    });
  }

  // barrier() is non-blocking underneath (MPI_Ibarrier, tested by the loop), so that a failure reported
  // by a rank that will never arrive ends the barrier with that failure instead of a hang.
  void barrier() override {
    std::promise<void> done;
    std::future<void> arrived = done.get_future();
    call([&] {
      check(MPI_Ibarrier(comm_, &barrier_request_), "MPI_Ibarrier");
      barrier_done_ = &done;
    });
    arrived.get();
  }

  std::vector<std::string> gather(const std::string& mine, int root, std::string_view what) override {
    std::vector<std::string> all;
    call([&] {
      // Every rank learns every length, in 64 bits, and decides alike whether the gather can be done
      // before any of them commits to it (see collective_size_error()).
      const std::uint64_t length = mine.size();
      std::vector<std::uint64_t> lengths(static_cast<std::size_t>(size_));
      check(MPI_Allgather(&length, 1, MPI_UINT64_T, lengths.data(), 1, MPI_UINT64_T, comm_), "MPI_Allgather");
      if (auto error = collective_size_error(what, lengths, limit())) {
        throw Error(ErrorCode::not_supported, *error);
      }
      // From here every count and offset fits in an int.
      std::vector<int> counts(static_cast<std::size_t>(size_));
      std::vector<int> offsets(static_cast<std::size_t>(size_));
      std::size_t total = 0;
      for (std::size_t r = 0; r < counts.size(); ++r) {
        counts[r] = static_cast<int>(lengths[r]);
        offsets[r] = static_cast<int>(total);
        total += static_cast<std::size_t>(lengths[r]);
      }
      // The root allocates everything before the gather, the pieces included: nothing may throw on
      // the root alone once the others are past agree() (they would wait for its broadcast for ever).
      std::string joined;
      bool allocated = true;
      if (rank_ == root) {
        allocated = allocate(joined, total);
        try {
          all.resize(counts.size());
        } catch (...) {
          allocated = false;
        }
        for (std::size_t r = 0; allocated && r < counts.size(); ++r) {
          allocated = allocate(all[r], static_cast<std::size_t>(counts[r]));
        }
      }
      agree(allocated, what, total, root);
      check(MPI_Gatherv(mine.data(), static_cast<int>(length), MPI_CHAR, joined.data(), counts.data(),
                        offsets.data(), MPI_CHAR, root, comm_),
            "MPI_Gatherv");
      for (std::size_t r = 0; r < all.size(); ++r) {
        if (counts[r] > 0)
          std::memcpy(all[r].data(), joined.data() + offsets[r], static_cast<std::size_t>(counts[r]));
      }
    });
    return all;
  }

  std::string broadcast(const std::string& text, int root, std::string_view what) override {
    std::string result = rank_ == root ? text : std::string();
    call([&] {
      std::uint64_t length = result.size();
      check(MPI_Bcast(&length, 1, MPI_UINT64_T, root, comm_), "MPI_Bcast");
      if (auto error = collective_size_error(what, std::span<const std::uint64_t>(&length, 1), limit())) {
        throw Error(ErrorCode::not_supported, *error);
      }
      agree(allocate(result, static_cast<std::size_t>(length)), what, length, -1);
      check(MPI_Bcast(result.data(), static_cast<int>(length), MPI_CHAR, root, comm_), "MPI_Bcast");
    });
    return result;
  }

  bool leave(bool unwinding) override {
    if (!unwinding && !initialized_here_) return true;
    MPI_Request request = MPI_REQUEST_NULL;
    call([&] { check(MPI_Ibarrier(leave_comm_, &request), "MPI_Ibarrier"); });
    const auto deadline = Clock::now() + leave_limit;
    while (true) {
      int arrived = 0;
      call([&] { check(MPI_Test(&request, &arrived, MPI_STATUS_IGNORE), "MPI_Test"); });
      if (arrived != 0) return true;
      if (failure() || (unwinding && Clock::now() >= deadline)) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  void shutdown() noexcept override {
    if (!thread_.joinable()) return;
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_one();
    thread_.join();
    MPI_Comm_free(&comm_);
    MPI_Comm_free(&leave_comm_);
    if (initialized_here_) {
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (finalized == 0) MPI_Finalize();
    }
  }

  [[noreturn]] void abort(int code) noexcept override {
    // The communication thread may be inside MPI; MPI_Abort is the one call allowed regardless.
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);
  }

  void add_stats(DistributedStats& stats) const override {
    stats.rank = rank_;
    stats.size = size_;
    stats.payloads_sent = payloads_sent_.load(std::memory_order_relaxed);
    stats.payloads_received = payloads_received_.load(std::memory_order_relaxed);
    stats.bytes_sent = bytes_sent_.load(std::memory_order_relaxed);
    stats.bytes_received = bytes_received_.load(std::memory_order_relaxed);
    stats.wire_bytes_sent = wire_bytes_sent_.load(std::memory_order_relaxed);
    stats.messages_sent = messages_sent_.load(std::memory_order_relaxed);
    stats.batches_sent = batches_sent_.load(std::memory_order_relaxed);
    stats.batch_flushes_by_interval = flushes_by_interval_.load(std::memory_order_relaxed);
    stats.compressed_payloads = compressed_payloads_.load(std::memory_order_relaxed);
  }

 private:
  using Key = std::pair<int, std::uint64_t>;  // (peer, sequence within the tag space)

  // call() runs `fn` on the communication thread and waits for it (rethrowing its exception).
  void call(std::function<void()> fn) {
    std::packaged_task<void()> task(std::move(fn));
    std::future<void> done = task.get_future();
    {
      std::lock_guard lock(mutex_);
      calls_.push_back(std::move(task));
    }
    wake_.notify_one();
    done.get();
  }

  void limit_collectives(std::uint64_t bytes) noexcept override {
    collective_limit_.store(std::min(bytes, collective_bytes_max), std::memory_order_relaxed);
  }
  std::uint64_t limit() const noexcept { return collective_limit_.load(std::memory_order_relaxed); }

  // allocate() sizes `text` to `bytes`; false when the memory is not there (a collective must not
  // throw on one rank only: the others would wait in it for ever).
  static bool allocate(std::string& text, std::size_t bytes) noexcept {
    try {
      text.resize(bytes);
      return true;
    } catch (...) {
      return false;
    }
  }

  // agree() tells every rank whether every rank could allocate its side of a collective on text, and
  // throws the same Error(out_of_memory) on every rank if one could not (`root`: the rank that
  // allocates, or -1 for every rank).
  void agree(bool allocated, std::string_view what, std::uint64_t bytes, int root) const {
    int all = allocated ? 1 : 0;
    check(MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT, MPI_MIN, comm_), "MPI_Allreduce");
    if (all != 0) return;
    throw Error(ErrorCode::out_of_memory,
                root >= 0 ? fmt::format("{}: rank {} cannot allocate its {} bytes", what, root, bytes)
                          : fmt::format("{}: a rank cannot allocate its {} bytes", what, bytes));
  }

  void check(int code, const char* what) const {
    if (code == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(code, text, &length);
    throw Error(ErrorCode::internal, fmt::format("distributed: {} failed on rank {}: {}", what, rank_,
                                                 std::string_view(text, static_cast<std::size_t>(length))));
  }

  std::exception_ptr failure_error() const {
    std::lock_guard lock(mutex_);
    return std::make_exception_ptr(
        Error(ErrorCode::task_failed, "distributed run failed: " + failure_.value_or("(no message)")));
  }
  bool failed() const {
    std::lock_guard lock(mutex_);
    return failure_.has_value();
  }

  Key key(int peer, std::uint64_t sequence) const noexcept { return {peer, sequence & sequence_mask_}; }

  void run() {
    unsigned idle_rounds = 0;
    while (true) {
      std::vector<OutgoingSend> sends;
      std::vector<IncomingReceive> receives;
      std::vector<std::packaged_task<void()>> calls;
      bool broadcast = false;
      bool stop = false;
      {
        std::lock_guard lock(mutex_);
        sends.swap(sends_);
        receives.swap(receives_);
        calls.swap(calls_);
        broadcast = std::exchange(broadcast_failure_, false);
        stop = stop_;
      }
      bool progress = !sends.empty() || !receives.empty() || !calls.empty() || broadcast;
      if (broadcast) broadcast_failure();
      for (const OutgoingSend& send : sends) start_send(send);
      for (IncomingReceive& receive : receives)
        post_receive(receive.from, receive.sequence, std::move(receive.posted));
      for (auto& task : calls) task();
      progress |= poll_incoming();
      progress |= poll_active();
      progress |= poll_barrier();
      progress |= flush_aged_batches();
      if (waiting_.load(std::memory_order_acquire) > 0) {  // nothing more will fill a batch meanwhile
        for (int to = 0; to < size_; ++to) {
          if (batches_[static_cast<std::size_t>(to)].count == 0) continue;
          send_batch(to, false);
          progress = true;
        }
      }
      if (stop && active_.empty()) {
        bool batched = false;
        for (const Batch& batch : batches_) batched |= batch.count != 0;
        if (!batched) return;
        for (int to = 0; to < size_; ++to) send_batch(to, false);
        continue;
      }
      if (progress) {
        idle_rounds = 0;
        continue;
      }
      // Back off: spin (yield) a little while requests are in flight, then sleep, doubling the sleep
      // from 16 us, so that a waiting rank does not take a core from the workers. Queued work wakes the
      // sleep at once; only arrivals from other ranks wait for the next poll. The ceilings: 128 us
      // while MPI requests are in flight (large messages progress only while we poll), 1 ms while
      // receives wait for data, 2 ms with nothing to do (a failure message from a peer).
      ++idle_rounds;
      const bool in_flight = !active_.empty() || barrier_done_ != nullptr;
      if (idle_rounds < 64 && in_flight) {
        std::this_thread::yield();
        continue;
      }
      const int ceiling = in_flight ? 128 : !posted_.empty() ? 1024 : 2048;
      auto pause = std::chrono::microseconds(std::min(ceiling, 16 << std::min(idle_rounds / 8, 7u)));
      if (const auto due = next_batch_due()) {
        pause = std::min(pause, std::chrono::duration_cast<std::chrono::microseconds>(*due - Clock::now()));
      }
      if (pause.count() <= 0) continue;
      std::unique_lock lock(mutex_);
      wake_.wait_for(lock, pause, [this] {
        return stop_ || broadcast_failure_ || !sends_.empty() || !receives_.empty() || !calls_.empty() ||
               (waiting_.load(std::memory_order_acquire) > 0 && batched());
      });
    }
  }

  void start_send(const OutgoingSend& send) {
    if (failed()) {
      complete_deferred(send.task, failure_error());
      return;
    }
    payloads_sent_.fetch_add(1, std::memory_order_relaxed);
    bytes_sent_.fetch_add(send.bytes, std::memory_order_relaxed);
    const std::span<const std::byte> raw(static_cast<const std::byte*>(send.data), send.bytes);
    std::vector<std::byte> frame;
    if (config_.compression == Compression::zstd && send.bytes >= config_.compression_threshold &&
        send.bytes > 0) {
      frame = compress(raw);
      if (!frame.empty()) compressed_payloads_.fetch_add(1, std::memory_order_relaxed);
    }
    const bool compressed = !frame.empty();
    const std::span<const std::byte> wire = compressed ? std::span<const std::byte>(frame) : raw;
    if (config_.batch_size > 1 && wire.size() <= batch_item_limit) {
      Batch& batch = batches_[static_cast<std::size_t>(send.to)];
      if (batch.count == 0) {
        batch.started = Clock::now();
        batch.first_sequence = send.sequence;
      }
      append_item(batch.bytes, send.sequence, wire, compressed);
      ++batch.count;
      complete_deferred(send.task, nullptr);  // the bytes are in the batch: the buffer is free
      if (batch.count >= config_.batch_size) send_batch(send.to, false);
      return;
    }
    Active active;
    active.what = Active::What::send;
    active.peer = send.to;
    if (compressed) {
      active.buffer = std::move(frame);
      complete_deferred(send.task, nullptr);
      isend(std::move(active), Kind::compressed, send.sequence);
    } else {
      active.task = send.task;
      active.payload_bytes = send.bytes;
      isend_raw(std::move(active), send.data, send.bytes, send.sequence);
    }
  }

  void isend(Active active, Kind kind, std::uint64_t sequence) {
    isend_raw(std::move(active), nullptr, 0, sequence, kind);
  }

  // isend_raw() starts one MPI message: `data` (or the active's own buffer when data is null).
  void isend_raw(Active active, const void* data, std::size_t bytes, std::uint64_t sequence,
                 Kind kind = Kind::raw) {
    if (data == nullptr) {
      data = active.buffer.data();
      bytes = active.buffer.size();
    }
    const int code = MPI_Isend(data, static_cast<int>(bytes), MPI_BYTE, active.peer,
                               make_tag(kind, sequence, sequence_mask_), comm_, &active.request);
    messages_sent_.fetch_add(1, std::memory_order_relaxed);
    wire_bytes_sent_.fetch_add(bytes, std::memory_order_relaxed);
    if (code != MPI_SUCCESS) {
      // A batch's or a compressed payload's failure has no task to tell: the run's failure tells.
      transfer_failed(active, code, "MPI_Isend",
                      fmt::format("sending {} bytes to rank {}", bytes, active.peer));
      return;
    }
    active.what = Active::What::send;
    active_.push_back(std::move(active));
  }

  void send_batch(int to, bool by_interval) {
    Batch& batch = batches_[static_cast<std::size_t>(to)];
    if (batch.count == 0) return;
    if (batch.count > 1) batches_sent_.fetch_add(1, std::memory_order_relaxed);
    if (by_interval) flushes_by_interval_.fetch_add(1, std::memory_order_relaxed);
    Active active;
    active.what = Active::What::send;
    active.peer = to;
    active.buffer = std::move(batch.bytes);
    const std::uint64_t sequence = batch.first_sequence;
    batch = Batch{};
    isend(std::move(active), Kind::batch, sequence);
  }

  // batched(): payloads wait in a batch (the communication thread's own state).
  bool batched() const noexcept {
    return std::any_of(batches_.begin(), batches_.end(), [](const Batch& batch) { return batch.count != 0; });
  }

  std::optional<Clock::time_point> next_batch_due() const {
    std::optional<Clock::time_point> due;
    for (const Batch& batch : batches_) {
      if (batch.count == 0) continue;
      const auto at = batch.started + config_.sync_interval;
      if (!due || at < *due) due = at;
    }
    return due;
  }

  bool flush_aged_batches() {
    bool sent = false;
    const auto now = Clock::now();
    for (int to = 0; to < size_; ++to) {
      const Batch& batch = batches_[static_cast<std::size_t>(to)];
      if (batch.count != 0 && now - batch.started >= config_.sync_interval) {
        send_batch(to, true);
        sent = true;
      }
    }
    return sent;
  }

  void post_receive(int from, std::uint64_t sequence, PostedReceive posted) {
    if (failed()) {
      complete_deferred(posted.task, failure_error());
      return;
    }
    const Key k = key(from, sequence);
    if (auto it = unexpected_.find(k); it != unexpected_.end()) {
      std::vector<std::byte> bytes = std::move(it->second);
      unexpected_.erase(it);
      fill(posted, bytes, from, sequence);
      return;
    }
    posted_.emplace(k, std::move(posted));
  }

  // fill() copies an arrived payload into its posted receive and completes the receive task.
  void fill(const PostedReceive& posted, const std::vector<std::byte>& bytes, int from,
            std::uint64_t sequence) {
    if (bytes.size() != posted.bytes) {
      // The program's mistake, and the run cannot go on: every rank fails (and ~Runtime ends the job).
      const std::string message = fmt::format(
          "distributed: {}: payload {} from rank {} has {} bytes; its replica on rank {} has {} (the ranks "
          "did not submit the same buffers and tasks)",
          posted.what, sequence, from, bytes.size(), rank_, posted.bytes);
      report_failure(message);
      complete_deferred(posted.task, std::make_exception_ptr(Error(ErrorCode::invalid_argument, message)));
      return;
    }
    if (!bytes.empty()) std::memcpy(posted.data, bytes.data(), bytes.size());
    payloads_received_.fetch_add(1, std::memory_order_relaxed);
    bytes_received_.fetch_add(bytes.size(), std::memory_order_relaxed);
    complete_deferred(posted.task, nullptr);
  }

  void deliver(int from, std::uint64_t sequence, std::vector<std::byte> bytes) {
    const Key k = key(from, sequence);
    if (auto it = posted_.find(k); it != posted_.end()) {
      const PostedReceive posted = std::move(it->second);
      posted_.erase(it);
      fill(posted, bytes, from, sequence);
      return;
    }
    unexpected_[k] = std::move(bytes);
  }

  bool poll_incoming() {
    bool any = false;
    while (true) {
      int flag = 0;
      MPI_Message message;
      MPI_Status status;
      if (MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, comm_, &flag, &message, &status) != MPI_SUCCESS ||
          flag == 0)
        break;
      any = true;
      int count = 0;
      MPI_Get_count(&status, MPI_BYTE, &count);
      Active active;
      active.what = Active::What::receive_staged;
      active.peer = status.MPI_SOURCE;
      active.kind = tag_kind(status.MPI_TAG);
      active.sequence = tag_sequence(status.MPI_TAG);
      void* target = nullptr;
      if (active.kind == Kind::raw) {
        if (auto it = posted_.find(key(active.peer, active.sequence));
            it != posted_.end() && it->second.bytes == static_cast<std::size_t>(count)) {
          active.what = Active::What::receive_direct;
          active.task = it->second.task;
          active.payload_bytes = it->second.bytes;
          target = it->second.data;
          posted_.erase(it);
        }
      }
      if (target == nullptr) {
        active.buffer.resize(static_cast<std::size_t>(count));
        target = active.buffer.data();
      }
      MPI_Imrecv(target, count, MPI_BYTE, &message, &active.request);
      active_.push_back(std::move(active));
    }
    return any;
  }

  bool poll_barrier() {
    if (barrier_done_ == nullptr) return false;
    int flag = 0;
    MPI_Test(&barrier_request_, &flag, MPI_STATUS_IGNORE);
    if (flag != 0) {
      std::exchange(barrier_done_, nullptr)->set_value();
      return true;
    }
    if (failed()) {
      // The request stays posted: the job is ending (the runtime aborts after a failure).
      std::exchange(barrier_done_, nullptr)->set_exception(failure_error());
      return true;
    }
    return false;
  }

  bool poll_active() {
    bool any = false;
    for (std::size_t i = 0; i < active_.size();) {
      int flag = 0;
      const int code = MPI_Test(&active_[i].request, &flag, MPI_STATUS_IGNORE);
      if (code == MPI_SUCCESS && flag == 0) {
        ++i;
        continue;
      }
      any = true;
      Active done = std::move(active_[i]);
      active_[i] = std::move(active_.back());
      active_.pop_back();
      if (code == MPI_SUCCESS) {
        finished(std::move(done));
      } else {  // taken for done before: a receive's task ran on bytes that never came
        const bool send = done.what == Active::What::send;
        transfer_failed(done, code, send ? "a send (MPI_Test)" : "a receive (MPI_Test)",
                        fmt::format("{} rank {}", send ? "sending to" : "receiving from", done.peer));
      }
    }
    return any;
  }

  // transfer_failed(): MPI says `failed` (`doing`) failed, with `code` from `call`. The run cannot go
  // on (the peer would wait for those bytes for ever, or a task would run on bytes that never came):
  // every rank fails, as after a task's failure, and the transfer's task with it.
  void transfer_failed(Active& failed, int code, const char* call, const std::string& doing) {
    std::exception_ptr error;
    try {
      check(code, call);
    } catch (const std::exception& reported) {
      error = std::current_exception();
      report_failure(fmt::format("rank {}: {}: {}", rank_, doing, reported.what()));
    }
    if (failed.task != nullptr) complete_deferred(std::exchange(failed.task, nullptr), std::move(error));
  }

  void finished(Active done) {
    switch (done.what) {
      case Active::What::send:
        if (done.task != nullptr) complete_deferred(done.task, nullptr);
        return;
      case Active::What::receive_direct:
        payloads_received_.fetch_add(1, std::memory_order_relaxed);
        bytes_received_.fetch_add(done.payload_bytes, std::memory_order_relaxed);
        if (done.task != nullptr) complete_deferred(done.task, nullptr);
        return;
      case Active::What::receive_staged: break;
    }
    try {
      switch (done.kind) {
        case Kind::raw: deliver(done.peer, done.sequence, std::move(done.buffer)); return;
        case Kind::compressed: {
          std::vector<std::byte> bytes(decompressed_size(done.buffer));
          decompress(done.buffer, bytes);
          deliver(done.peer, done.sequence, std::move(bytes));
          return;
        }
        case Kind::batch:
          for_each_item(done.buffer,
                        [&](std::uint64_t sequence, std::span<const std::byte> wire, bool compressed) {
                          std::vector<std::byte> bytes;
                          if (compressed) {
                            bytes.resize(decompressed_size(wire));
                            decompress(wire, bytes);
                          } else {
                            bytes.assign(wire.begin(), wire.end());
                          }
                          deliver(done.peer, sequence, std::move(bytes));
                        });
          return;
        case Kind::failure: {
          const std::string message(reinterpret_cast<const char*>(done.buffer.data()), done.buffer.size());
          {
            std::lock_guard lock(mutex_);
            if (!failure_) failure_ = message;
          }
          fail_pending();
          return;
        }
      }
    } catch (const std::exception& error) {
      report_failure(fmt::format("rank {}: {}", rank_, error.what()));
    }
  }

  // broadcast_failure() sends this rank's failure to every other rank, then fails what is pending.
  void broadcast_failure() {
    std::string message;
    {
      std::lock_guard lock(mutex_);
      message = failure_.value_or("");
    }
    for (int to = 0; to < size_; ++to) {
      if (to == rank_) continue;
      Active active;
      active.what = Active::What::send;
      active.peer = to;
      active.buffer.resize(message.size());
      std::memcpy(active.buffer.data(), message.data(), message.size());
      isend(std::move(active), Kind::failure, 0);
    }
    fail_pending();
  }

  // fail_pending() ends every transfer still waiting with the run's failure, so that no task (and no
  // wait_all) waits for data that will never come.
  void fail_pending() {
    const std::exception_ptr error = failure_error();
    for (auto& [k, posted] : posted_) complete_deferred(posted.task, error);
    posted_.clear();
    for (Active& active : active_) {
      if (active.task != nullptr) complete_deferred(std::exchange(active.task, nullptr), error);
    }
    for (Batch& batch : batches_) batch = Batch{};
  }

  const SoleTransport sole_;  // first: claimed before MPI is touched, released after it is finalised
  const Config::Distributed config_;
  std::atomic<std::uint64_t> collective_limit_{collective_bytes_max};  // limit_collectives()
  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Comm leave_comm_ = MPI_COMM_NULL;  // leave() only
  int rank_ = 0;
  int size_ = 1;
  int thread_level_ = 0;
  bool initialized_here_ = false;
  std::uint64_t sequence_mask_ = 0;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<OutgoingSend> sends_;
  std::vector<IncomingReceive> receives_;
  std::vector<std::packaged_task<void()>> calls_;
  std::optional<std::string> failure_;
  bool broadcast_failure_ = false;
  bool stop_ = false;

  // Communication thread only.
  std::map<Key, PostedReceive> posted_;
  std::map<Key, std::vector<std::byte>> unexpected_;
  std::vector<Active> active_;
  std::vector<Batch> batches_;
  MPI_Request barrier_request_ = MPI_REQUEST_NULL;
  std::promise<void>* barrier_done_ = nullptr;  // a barrier() in progress

  std::atomic<int> waiting_{0};  // application threads waiting for this rank's tasks (set_waiting)
  std::atomic<std::uint64_t> payloads_sent_{0}, payloads_received_{0}, bytes_sent_{0}, bytes_received_{0},
      wire_bytes_sent_{0}, messages_sent_{0}, batches_sent_{0}, flushes_by_interval_{0},
      compressed_payloads_{0};
  std::thread thread_;
};

}  // namespace

std::unique_ptr<Transport> make_mpi_transport(const Config::Distributed& config) {
  return std::make_unique<MpiTransport>(config);
}

}  // namespace nerve::distributed::detail
