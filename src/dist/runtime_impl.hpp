// runtime_impl.hpp — the state behind nerve::distributed::Runtime.
//
// Every rank keeps the same bookkeeping for every distributed buffer, because every rank sees the same
// sequence of buffers and tasks: its owner, its version (writes so far) and which version each rank
// holds. plan_task() turns one task into "runs on rank r" plus the transfers it needs, identically on
// all ranks; each rank then submits only its own side (a send, a receive, the task), or nothing.
//
// Thread safety: plan_task(), register_buffer(), wait_all() and the collectives belong to the one
// submitting thread of the rank; the task hooks (task_started/finished/failed) run on workers and
// only touch the trace (under its mutex) and the transport.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "nerve/distributed.hpp"

#include "dist/transport.hpp"
#include "runtime/submitter_waits.hpp"

namespace nerve::distributed::detail {

inline constexpr std::uint64_t no_version = ~std::uint64_t{0};

// How many of a Runtime's buffers are alive: shared with their entries, which may outlive the Runtime
// (a handle kept past it).
struct BufferCount {
  std::atomic<std::uint64_t> live{0};
};

// Made by register_buffer(), freed by release_buffer() with the buffer's last handle (BufferData).
struct BufferEntry {
  // The count of live buffers of the Runtime that registered it (it tells that Runtime, unlike its
  // address, which a later Runtime may reuse).
  std::shared_ptr<BufferCount> runtime_buffers;
  std::uint64_t number = 0;
  std::string name;  // for errors: empty when the buffer has none
  int owner = 0;
  std::size_t bytes = 0;
  std::uint64_t version = 0;        // writes so far
  std::vector<std::uint64_t> held;  // per rank: the version it has a valid copy of, or no_version
};

struct TraceEvent {
  // An interned copy (RuntimeImpl::trace_names), null for an unnamed task: TaskOptions::name need only
  // outlive its task, and dump_trace() reads the names long after the tasks ended (a pointer to the
  // caller's string was read after free).
  const std::string* name;
  std::int64_t start_ns;  // since the run's common epoch
  std::int64_t end_ns;
  unsigned thread;
};

// The Runtime hears of its program's thread held back in submit() by task_queue.max_in_flight (the
// context's SubmitterWaits): batched payloads then leave at once, as while it waits in wait_all()
// (WaitingForTasks).
struct RuntimeImpl final : nerve::detail::SubmitterWaitListener {
  RuntimeImpl(Context& context, std::unique_ptr<Transport> transport);
  RuntimeImpl(const RuntimeImpl&) = delete;
  RuntimeImpl& operator=(const RuntimeImpl&) = delete;
  ~RuntimeImpl() = default;
  void submitter_waiting(bool waiting) noexcept override {
    if (transport) transport->set_waiting(waiting);
  }

  Context& context;
  std::unique_ptr<Transport> transport;  // null for communication_backend: none
  int rank = 0;
  int size = 1;
  std::uint64_t buffers_created = 0;  // the next buffer's number
  std::shared_ptr<BufferCount> buffer_count = std::make_shared<BufferCount>();
  std::vector<std::uint64_t> next_sequence;  // [from * size + to]: payloads planned so far
  std::atomic<std::uint64_t> tasks_run{0};
  std::atomic<std::uint64_t> tasks_skipped{0};
  bool failure_reported = false;
  // communication_backend none: the first task failure of this one-rank world (a transport keeps it
  // otherwise), so that submit(), wait_all() and barrier() fail as they do under MPI. Either way, the
  // exception a task body of this rank threw first: wait_all() rethrows that one as is.
  mutable std::mutex failure_mutex;
  std::optional<std::string> local_failure;
  std::exception_ptr first_body_error;
  bool body_error_rethrown = false;  // by a wait_all(): later ones throw Error(task_failed)

  // The trace: each rank's clock starts at a barrier at construction, so tracks line up to within
  // the barrier's skew (microseconds on one host, tens of microseconds across a network).
  std::chrono::steady_clock::time_point epoch;
  std::mutex trace_mutex;
  std::vector<TraceEvent> trace;
  // perf.max_task_records bounds the trace as it bounds the context's records: a rank records its
  // first that many tasks and counts the rest in trace_dropped (under trace_mutex).
  const std::uint64_t trace_limit;
  std::uint64_t trace_dropped = 0;
  // Each distinct task name once, for the run's life (nodes do not move: events point at them). A
  // program names many tasks alike ("gemm"), so millions of events cost a few strings. Looked up by
  // string_view (std::less<> compares without making a string).
  std::set<std::string, std::less<>> trace_names;
  // intern() is the stored copy of `name` (null for null); call with trace_mutex held.
  const std::string* intern(const char* name);

  std::int64_t now_ns() const noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - epoch)
        .count();
  }
  void throw_if_failed() const;
};

// WaitingForTasks: while the program's thread waits for this rank's tasks (wait_all(), the Runtime's
// destruction), as while it is held back in submit(), nothing more will fill a batch: the transport
// sends batched payloads at once.
class WaitingForTasks {
 public:
  explicit WaitingForTasks(RuntimeImpl& runtime) noexcept : runtime_(runtime) {
    runtime_.submitter_waiting(true);
  }
  ~WaitingForTasks() { runtime_.submitter_waiting(false); }
  WaitingForTasks(const WaitingForTasks&) = delete;
  WaitingForTasks& operator=(const WaitingForTasks&) = delete;

 private:
  RuntimeImpl& runtime_;
};

// describe() names a buffer in errors: "buffer 3 'tile'", or "buffer 3" without a name.
std::string describe(const BufferEntry& entry);

// trace_json() is this rank's events as Chrome trace-event objects ("X" events, pid = rank),
// comma-separated, without the enclosing array.
std::string trace_json(RuntimeImpl& runtime);

}  // namespace nerve::distributed::detail
