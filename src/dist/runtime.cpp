// runtime.cpp — the distributed runtime: buffers, task plans, waiting and failure (see runtime_impl.hpp).
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <string_view>
#include <thread>

#include <fmt/format.h>

#include "nerve/error.hpp"

#include "dist/runtime_impl.hpp"
#include "dist/wire.hpp"
#include "runtime/context_impl.hpp"
#include "util/exception_text.hpp"

namespace nerve::distributed::detail {
namespace {

// ranks_started_by_mpirun() is the world size an MPI launcher announced to this process (0: none).
int ranks_started_by_mpirun() {
  for (const char* variable : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"}) {
    if (const char* value = std::getenv(variable)) return std::atoi(value);
  }
  return 0;
}

std::unique_ptr<Transport> make_transport(const Config::Distributed& config) {
  if (config.compression == Compression::zstd && !zstd_available()) {
    throw Error(ErrorCode::not_supported,
                "distributed.compression: zstd is not built in (install libzstd-dev and reconfigure)");
  }
  switch (config.communication_backend) {
    case CommunicationBackend::none:
      if (const int ranks = ranks_started_by_mpirun(); ranks > 1) {
        throw Error(
            ErrorCode::invalid_config,
            fmt::format("distributed.communication_backend is 'none', but mpirun started this process as "
                        "one of {} ranks: set distributed.communication_backend: mpi "
                        "(NERVE_DISTRIBUTED_COMMUNICATION_BACKEND=mpi), or run one process",
                        ranks));
      }
      return nullptr;
    case CommunicationBackend::mpi:
#if NERVE_WITH_MPI
      return make_mpi_transport(config);
#else
      throw Error(ErrorCode::not_supported,
                  "distributed.communication_backend: mpi is not built in (install libopenmpi-dev and "
                  "reconfigure with NERVE_WITH_MPI=ON)");
#endif
  }
  return nullptr;
}

const char* display(const char* name) noexcept { return name != nullptr ? name : "(unnamed)"; }

}  // namespace

std::string describe(const BufferEntry& entry) {
  return entry.name.empty() ? fmt::format("buffer {}", entry.number)
                            : fmt::format("buffer {} '{}'", entry.number, entry.name);
}

void throw_empty_handle(const char* what) {
  throw Error(
      ErrorCode::buffer_misuse,
      fmt::format("{} of an empty distributed buffer handle (default-constructed or moved from)", what));
}

RuntimeImpl::RuntimeImpl(Context& owner, std::unique_ptr<Transport> link)
    : context(owner), transport(std::move(link)), trace_limit(owner.config().perf.max_task_records) {
  if (transport) {
    rank = transport->rank();
    size = transport->size();
    transport->barrier();
  }
  next_sequence.assign(static_cast<std::size_t>(size) * static_cast<std::size_t>(size), 0);
  epoch = std::chrono::steady_clock::now();
  if (transport) (void)context.impl()->submitter_waits.listen(this);  // another Runtime may hear already
}

const std::string* RuntimeImpl::intern(const char* name) {
  if (name == nullptr) return nullptr;
  const std::string_view view(name);
  auto found = trace_names.find(view);
  if (found == trace_names.end()) found = trace_names.emplace(view).first;
  return &*found;
}

void RuntimeImpl::throw_if_failed() const {
  std::optional<std::string> failure;
  if (transport) {
    failure = transport->failure();
  } else {
    std::lock_guard lock(failure_mutex);
    failure = local_failure;
  }
  if (failure) throw Error(ErrorCode::task_failed, fmt::format("distributed run failed: {}", *failure));
}

RuntimeImpl* runtime_create(Context& context) {
  return new RuntimeImpl(context, make_transport(context.config().distributed));
}

void runtime_destroy(RuntimeImpl* runtime) noexcept {
  // Destroyed by an exception leaving the Runtime's scope: on this rank only, the others may wait for
  // it for ever (in a barrier, for a payload), and MPI_Finalize would then wait for them.
  const bool unwinding = std::uncaught_exceptions() > 0;
  nerve::detail::ContextImpl& context = *runtime->context.impl();
  // First: a thread still submitting to the context must not tell a transport that is going away.
  context.submitter_waits.stop_listening(runtime);
  try {
    // Waited for as ~Context waits, inside another context's task too (the public wait_all()
    // refuses there): the transport must not go while this rank's tasks still use it.
    {
      const WaitingForTasks waiting(*runtime);
      context.wait_for_all_tasks();
    }
    context.report_root_errors();
    if (runtime->transport) runtime->transport->flush();
  } catch (...) {
  }
  if (runtime->transport) {
    bool left = false;
    try {
      left = !runtime->transport->failure() && runtime->transport->leave(unwinding);
    } catch (const std::exception& error) {  // MPI refused the barrier: the failure ends the job below
      try {
        runtime->transport->report_failure(
            fmt::format("rank {}: leaving the run: {}", runtime->rank, error.what()));
      } catch (...) {
      }
    }
    if (!left && !runtime->transport->failure()) {
      if (unwinding) {
        std::fprintf(stderr,
                     "nerve: rank %d: the distributed Runtime was destroyed by an exception leaving its "
                     "scope, and not every rank left the run within %lld s (they may wait for this rank "
                     "for ever); ending every rank (MPI_Abort)\n",
                     runtime->rank, static_cast<long long>(leave_limit.count()));
      } else {
        std::fprintf(stderr,
                     "nerve: rank %d: could not leave the distributed run; ending every rank (MPI_Abort)\n",
                     runtime->rank);
      }
      std::fflush(stderr);
      runtime->transport->abort(1);
    }
    if (auto failure = runtime->transport->failure()) {
      // MPI cannot be finalised safely with transfers cut off mid-flight, and a peer may still wait for
      // this rank: end the job, every rank, now.
      std::fprintf(stderr, "nerve: rank %d: distributed run failed: %s; ending every rank (MPI_Abort)\n",
                   runtime->rank, failure->c_str());
      std::fflush(stderr);
      // A moment for the other ranks to receive the failure and report it themselves.
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      runtime->transport->abort(1);
    }
    runtime->transport->shutdown();
  } else {
    // One rank, no MPI job: nothing to end, but a failure nobody may have seen is still said
    // (printed under the lock: a copy of the text could fail to allocate here, in a noexcept path).
    std::lock_guard lock(runtime->failure_mutex);
    if (runtime->local_failure) {
      std::fprintf(stderr, "nerve: rank 0: distributed run failed: %s\n", runtime->local_failure->c_str());
      std::fflush(stderr);
    }
  }
  delete runtime;
}

int runtime_rank(const RuntimeImpl* runtime) noexcept { return runtime->rank; }
int runtime_size(const RuntimeImpl* runtime) noexcept { return runtime->size; }
Context& runtime_context(RuntimeImpl* runtime) noexcept { return runtime->context; }

BufferEntry* register_buffer(RuntimeImpl* runtime, int owner, std::size_t count, std::size_t element_size,
                             const std::string& name) {
  if (owner < 0 || owner >= runtime->size) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("distributed buffer {} is given owner rank {}, but the run has ranks 0..{}",
                            runtime->buffers_created, owner, runtime->size - 1));
  }
  // Checked here, on every rank, before the buffer exists: a byte size that wrapped registered a tiny
  // buffer everywhere, and only the owner then failed (to allocate it), so the ranks' bookkeeping
  // disagreed from then on.
  if (element_size != 0 && count > SIZE_MAX / element_size) {
    throw Error(
        ErrorCode::invalid_argument,
        fmt::format("distributed buffer {} of {} elements of {} bytes is larger than the address space",
                    runtime->buffers_created, count, element_size));
  }
  auto entry = std::make_unique<BufferEntry>();
  entry->runtime_buffers = runtime->buffer_count;
  entry->number = runtime->buffers_created;
  entry->name = name;
  entry->owner = owner;
  entry->bytes = count * element_size;
  entry->held.assign(static_cast<std::size_t>(runtime->size), no_version);
  entry->held[static_cast<std::size_t>(owner)] = 0;
  ++runtime->buffers_created;
  entry->runtime_buffers->live.fetch_add(1, std::memory_order_relaxed);
  return entry.release();
}

void release_buffer(BufferEntry* entry) noexcept {
  if (entry == nullptr) return;
  entry->runtime_buffers->live.fetch_sub(1, std::memory_order_relaxed);
  delete entry;
}

int buffer_owner(const BufferEntry* entry) noexcept { return entry->owner; }
std::uint64_t buffer_number(const BufferEntry* entry) noexcept { return entry->number; }

TaskPlan plan_task(RuntimeImpl* runtime, const AccessDescription* accesses, std::size_t count,
                   const TaskOptions& options) {
  runtime->throw_if_failed();
  // Every rank must submit the same distributed tasks in the same order; a task body runs on one
  // rank only, so a submission from inside one was made by that rank alone: the others never ran the
  // task, and the run silently gave wrong results on more than one rank (black-box audit).
  if (nerve::detail::running_task_record() != nullptr) {
    throw Error(ErrorCode::invalid_argument,
                fmt::format("distributed task '{}' submitted from inside a task: every rank submits the "
                            "same distributed tasks from its one submitting thread, and a task body runs on "
                            "one rank only (submit plain tasks to the context there)",
                            display(options.name)));
  }
  for (std::size_t i = 0; i < count; ++i) {
    if (accesses[i].buffer == nullptr) {
      throw Error(ErrorCode::buffer_misuse,
                  fmt::format("distributed task '{}' accesses an empty distributed buffer handle (access {}: "
                              "default-constructed or moved from)",
                              display(options.name), i));
    }
    // Checked by every rank before anything is planned: only the rank running the task found out. By
    // the Runtime's buffer count, which the entry keeps alive: a later Runtime may reuse the address
    // of one that is gone, while its buffers' handles live on.
    if (accesses[i].buffer->runtime_buffers != runtime->buffer_count) {
      throw Error(ErrorCode::buffer_misuse,
                  fmt::format("distributed task '{}' accesses {} of another distributed Runtime (access {})",
                              display(options.name), describe(*accesses[i].buffer), i));
    }
  }
  TaskPlan plan;
  int rank = -1;
  for (std::size_t i = 0; i < count; ++i) {
    if (accesses[i].mode == Access::read) continue;
    const int owner = accesses[i].buffer->owner;
    if (rank != -1 && rank != owner) {
      throw Error(
          ErrorCode::invalid_argument,
          fmt::format("distributed task '{}' writes buffers owned by ranks {} and {}: a task runs on the "
                      "rank that owns what it writes, so all of it must have one owner",
                      display(options.name), rank, owner));
    }
    rank = owner;
  }
  if (options.rank < -1) {
    throw Error(
        ErrorCode::invalid_argument,
        fmt::format("distributed task '{}' asks for rank {}: a rank is 0..{}, or -1 (where its data is)",
                    display(options.name), options.rank, runtime->size - 1));
  }
  if (options.rank >= 0) {
    if (options.rank >= runtime->size || (rank != -1 && rank != options.rank)) {
      throw Error(
          ErrorCode::invalid_argument,
          fmt::format("distributed task '{}' asks for rank {}, but {}", display(options.name), options.rank,
                      options.rank >= runtime->size
                          ? fmt::format("the run has ranks 0..{}", runtime->size - 1)
                          : fmt::format("it writes buffers owned by rank {}", rank)));
    }
    rank = options.rank;
  }
  if (rank == -1) rank = count > 0 ? accesses[0].buffer->owner : 0;
  plan.rank = rank;
  const auto destination = static_cast<std::size_t>(rank);
  // A read whose version the destination lacks moves the whole buffer there.
  const auto needs_transfer = [&](std::size_t i) {
    const BufferEntry& entry = *accesses[i].buffer;
    return accesses[i].mode != Access::write && entry.held[destination] != entry.version;
  };
  // A payload MPI cannot count is refused here, on every rank alike, before anything changes: found
  // by the sending rank's transport alone, it left the receiving rank waiting forever.
  for (std::size_t i = 0; i < count; ++i) {
    const BufferEntry& entry = *accesses[i].buffer;
    if (needs_transfer(i) && entry.bytes > static_cast<std::size_t>(INT32_MAX)) {
      throw Error(
          ErrorCode::not_supported,
          fmt::format("distributed task '{}' on rank {} reads {} ({} bytes) from rank {}: payloads "
                      "are limited to 2 GiB - 1 byte ({} bytes, MPI's int count); split the buffer",
                      display(options.name), rank, describe(entry), entry.bytes, entry.owner, INT32_MAX));
    }
  }
  for (std::size_t i = 0; i < count; ++i) {
    if (!needs_transfer(i)) continue;
    BufferEntry& entry = *accesses[i].buffer;
    const auto from = static_cast<std::size_t>(entry.owner);
    const std::uint64_t sequence =
        runtime->next_sequence[from * static_cast<std::size_t>(runtime->size) + destination]++;
    plan.transfers.push_back(Transfer{i, entry.owner, rank, sequence});
    entry.held[destination] = entry.version;
  }
  for (std::size_t i = 0; i < count; ++i) {
    BufferEntry& entry = *accesses[i].buffer;
    if (accesses[i].mode == Access::read) continue;
    // A buffer written twice by one task still gets one new version per access: harmless.
    ++entry.version;
    entry.held[static_cast<std::size_t>(entry.owner)] = entry.version;
  }
  (rank == runtime->rank ? runtime->tasks_run : runtime->tasks_skipped)
      .fetch_add(1, std::memory_order_relaxed);
  return plan;
}

void start_send(RuntimeImpl* runtime, int to, std::uint64_t sequence, const void* data, std::size_t bytes) {
  nerve::detail::TaskRecord* task = nerve::detail::defer_current_task();
  runtime->transport->send(to, sequence, data, bytes, task);
}

void start_receive(RuntimeImpl* runtime, int from, std::uint64_t sequence, void* data, std::size_t bytes,
                   const BufferEntry* entry, const char* task_name) {
  // The transport knows payloads, not buffers or tasks: it gets the replica's description ready-made,
  // for the error it raises when a payload does not fit (the ranks disagree on the buffer's size).
  std::string what = fmt::format("{} for task '{}'", describe(*entry), display(task_name));
  nerve::detail::TaskRecord* task = nerve::detail::defer_current_task();
  runtime->transport->receive(from, sequence, data, bytes, task, std::move(what));
}

std::uint64_t task_started(RuntimeImpl* runtime) noexcept {
  return static_cast<std::uint64_t>(runtime->now_ns());
}

void task_finished(RuntimeImpl* runtime, const char* name, std::uint64_t started) noexcept {
  static std::atomic<unsigned> next_thread{0};
  thread_local const unsigned thread = next_thread.fetch_add(1, std::memory_order_relaxed);
  const std::int64_t end = runtime->now_ns();
  try {
    std::lock_guard lock(runtime->trace_mutex);
    if (runtime->trace.size() >= runtime->trace_limit) {
      ++runtime->trace_dropped;
      return;
    }
    runtime->trace.push_back(
        TraceEvent{runtime->intern(name), static_cast<std::int64_t>(started), end, thread});
  } catch (...) {
  }
}

namespace {

// fail_run() makes `failure` the run's (every rank hears of it); `body_error`, if given, is what the
// first wait_all() on this rank rethrows as is.
void fail_run(RuntimeImpl* runtime, const std::string& failure, const std::exception_ptr* body_error) {
  {
    std::lock_guard lock(runtime->failure_mutex);
    if (body_error != nullptr && !runtime->first_body_error) runtime->first_body_error = *body_error;
    if (!runtime->transport && !runtime->local_failure) runtime->local_failure = failure;
  }
  if (runtime->transport) runtime->transport->report_failure(failure);
}

}  // namespace

void task_failed(RuntimeImpl* runtime, const char* name, const std::exception_ptr& error) noexcept {
  try {
    fail_run(runtime,
             fmt::format("task '{}' failed on rank {}: {}", display(name), runtime->rank,
                         nerve::detail::what_of(error)),
             &error);
  } catch (...) {
  }
}

void submission_failed(RuntimeImpl* runtime, const char* name, const std::exception_ptr& error) noexcept {
  try {
    fail_run(runtime,
             fmt::format("submitting task '{}' failed on rank {}, after every rank had planned it: {}",
                         display(name), runtime->rank, nerve::detail::what_of(error)),
             nullptr);
  } catch (...) {
  }
}

void buffer_creation_failed(RuntimeImpl* runtime, const BufferEntry* entry,
                            const std::exception_ptr& error) noexcept {
  try {
    fail_run(runtime,
             fmt::format("creating {} failed on its owner, rank {}, after every rank had counted it: {}",
                         describe(*entry), runtime->rank, nerve::detail::what_of(error)),
             nullptr);
  } catch (...) {
  }
}

void runtime_wait_all(RuntimeImpl* runtime) {
  std::exception_ptr local;
  try {
    const WaitingForTasks waiting(*runtime);
    runtime->context.wait_all();
  } catch (...) {
    local = std::current_exception();
  }
  if (runtime->transport) runtime->transport->flush();
  // A local task's own failure is rethrown as is, once; otherwise a failure anywhere — including a
  // local one already reported — is task_failed, which also explains a local cancellation better than
  // the cancellation does. The body's error is taken from first_body_error, not from what the context
  // reported first: task_failed() broadcasts the failure before the context records the body's error
  // (that happens once the closure is destroyed), so the communication thread may fail a pending
  // transfer first, and the context then reported that transfer's Error(task_failed) and only logged
  // the body's exception. first_body_error is set before the broadcast, and the task has finished by
  // the time context.wait_all() returns.
  {
    std::lock_guard lock(runtime->failure_mutex);
    if (runtime->first_body_error && !runtime->body_error_rethrown) {
      runtime->body_error_rethrown = true;
      std::rethrow_exception(runtime->first_body_error);
    }
  }
  runtime->throw_if_failed();
  if (local) std::rethrow_exception(local);
}

void runtime_barrier(RuntimeImpl* runtime) {
  runtime_wait_all(runtime);
  if (runtime->transport) runtime->transport->barrier();
  runtime->throw_if_failed();
}

std::uint64_t runtime_buffers_live(const RuntimeImpl* runtime) noexcept {
  return runtime->buffer_count->live.load(std::memory_order_relaxed);
}

DistributedStats runtime_stats(const RuntimeImpl* runtime) {
  DistributedStats stats;
  if (runtime->transport) runtime->transport->add_stats(stats);
  stats.rank = runtime->rank;
  stats.size = runtime->size;
  stats.tasks_run = runtime->tasks_run.load(std::memory_order_relaxed);
  stats.tasks_skipped = runtime->tasks_skipped.load(std::memory_order_relaxed);
  return stats;
}

}  // namespace nerve::distributed::detail
