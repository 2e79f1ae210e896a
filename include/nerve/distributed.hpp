// distributed.hpp — one task graph over many processes (MPI ranks): owner-computes, cached remote data.
//
//   nerve::Context context(settings);                       // distributed.communication_backend: mpi
//   nerve::distributed::Runtime world(context);             // MPI_Init_thread if MPI is not initialised
//   nerve::distributed::Grid grid = nerve::distributed::Grid::for_ranks(world.size());
//   auto a = world.buffer<double>(n, grid.owner(i, j));     // every rank creates every buffer
//   world.submit(body, nerve::distributed::read(a), nerve::distributed::read_write(b));
//   world.wait_all();
//
// The model is StarPU-MPI's sequential task flow: every rank runs the same program and creates the same
// buffers and submits the same tasks in the same order. Each distributed buffer has an owner rank. A task
// runs on the rank that owns the buffers it writes (all of them must have that owner), or, if it writes
// nothing, on TaskOptions::rank, else on the owner of its first buffer. For every buffer it reads that
// the executing rank does not own, the owner sends the current version asynchronously (a send task
// ordered after the last writer) and the executing rank receives it into a cached replica (a receive
// task the reading task depends on); the replica stays valid until the owner writes the buffer again,
// so a version crosses the network at most once per reader rank. Ranks that neither run the task nor
// send for it only update their bookkeeping: they do not wait. No user code sends or receives.
//
// Data reaches a rank that does not own it only as a task input: to collect results on rank 0, submit
// a task with TaskOptions::rank = 0 that reads them. On its owner, DistributedBuffer::local() is an
// ordinary nerve::Buffer (map it after wait_all()). Only a distributed task's write makes a new
// version: data changed through local() (a write mapping, a plain task) is not one, and a rank that
// already holds a replica keeps reading the old data. Fill a buffer that way only before any other
// rank has read it; change it later with Runtime::submit().
//
// Failures: an exception in a task on any rank is sent to every rank; from then on wait_all(),
// barrier() and submit() on every rank throw Error(task_failed) naming the rank, the task and the
// message — except the first wait_all() on the rank whose task threw, which rethrows that exception
// as is. Destroying a Runtime after a failure ends the whole job (MPI_Abort) rather than risking a
// hang in MPI_Finalize (with communication_backend none, a world of one process, it ends nothing).
// A rank that dies ends the job through mpirun.
//
// Thread safety: one thread per rank submits (the sequential flow is an order); stats() may be called
// from any thread. Task bodies run on the context's workers as usual. What blocks: the constructor,
// barrier(), dump_trace() (collectives) and wait_all(); submit() never waits for other ranks.
// Lifetimes: a DistributedBuffer must not be used after its Runtime is destroyed, and the Context must
// outlive the Runtime.
//
// Tuning: the distributed.* configuration keys — batch_size, sync_interval, compression
// (docs/CONFIG.md); the model, measurements and limits: docs/DISTRIBUTED.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "nerve/buffer.hpp"
#include "nerve/context.hpp"
#include "nerve/error.hpp"
#include "nerve/export.hpp"
#include "nerve/task.hpp"

namespace nerve::distributed {

// block_cyclic() is the owner of block `index` in a 1D block-cyclic distribution over `ranks`. A world
// has at least one rank: `ranks` below 1 counts as one (every block on rank 0), not a division by zero.
constexpr int block_cyclic(std::size_t index, int ranks) noexcept {
  return ranks < 1 ? 0 : static_cast<int>(index % static_cast<std::size_t>(ranks));
}

// Grid: a 2D block-cyclic distribution (ScaLAPACK's), rows × cols ranks; rank = (i % rows) * cols + j % cols.
struct Grid {
  int rows = 1;
  int cols = 1;
  // A grid with fewer than one row or column is a grid of one rank (rank 0 owns everything).
  constexpr int owner(std::size_t i, std::size_t j) const noexcept {
    if (rows < 1 || cols < 1) return 0;
    return static_cast<int>((i % static_cast<std::size_t>(rows)) * static_cast<std::size_t>(cols) +
                            j % static_cast<std::size_t>(cols));
  }
  // for_ranks() is the most square grid of exactly `ranks` ranks (rows <= cols); 1 × 1 for fewer than
  // one rank.
  static constexpr Grid for_ranks(int ranks) noexcept {
    if (ranks < 1) return Grid{1, 1};
    int rows = 1;
    for (int r = 1; r <= ranks / r; ++r) {  // r * r <= ranks, without overflowing int near INT_MAX
      if (ranks % r == 0) rows = r;
    }
    return Grid{rows, ranks / rows};
  }
};

// What one rank moved and ran. Payloads are buffer versions; messages are MPI messages (a batch
// carries several payloads; a compressed payload is smaller on the wire).
struct DistributedStats {
  int rank = 0;
  int size = 1;
  std::uint64_t tasks_run = 0;      // distributed tasks this rank executed
  std::uint64_t tasks_skipped = 0;  // submitted here but run elsewhere
  std::uint64_t payloads_sent = 0;
  std::uint64_t payloads_received = 0;
  std::uint64_t bytes_sent = 0;       // payload bytes before compression
  std::uint64_t bytes_received = 0;   // payload bytes after decompression
  std::uint64_t wire_bytes_sent = 0;  // what went to MPI: after compression, batch headers included
  std::uint64_t messages_sent = 0;
  std::uint64_t batches_sent = 0;               // messages that carried more than one payload
  std::uint64_t batch_flushes_by_interval = 0;  // batches sent because distributed.sync_interval passed
  std::uint64_t compressed_payloads = 0;
};

struct TaskOptions {
  const char* name = nullptr;  // for errors and traces; must outlive the task (the trace copies it)
  int rank = -1;  // where a task that writes nothing runs: 0..size-1, or -1 = the owner of its first
                  // buffer (rank 0 without buffers); other values are Error(invalid_argument)
  bool compute_intensive = false;
};

class Runtime;

namespace detail {
struct RuntimeImpl;
struct BufferEntry;

// The plan of one task, the same on every rank: where it runs and which transfers it needs.
struct Transfer {
  std::size_t access;  // index of the access it feeds
  int from;
  int to;
  std::uint64_t sequence;  // the n-th payload from `from` to `to`
};
struct TaskPlan {
  int rank = 0;  // where it runs
  std::vector<Transfer> transfers;
};
struct AccessDescription {
  BufferEntry* buffer;
  Access mode;
};

NERVE_API RuntimeImpl* runtime_create(Context& context);
NERVE_API void runtime_destroy(RuntimeImpl* runtime) noexcept;
NERVE_API int runtime_rank(const RuntimeImpl* runtime) noexcept;
NERVE_API int runtime_size(const RuntimeImpl* runtime) noexcept;
// register_buffer() checks the buffer (owner, byte size: throws Error on every rank alike) before it
// adds it to the bookkeeping; release_buffer() ends that once no handle or task holds the buffer
// (every rank keeps numbering buffers in creation order).
NERVE_API BufferEntry* register_buffer(RuntimeImpl* runtime, int owner, std::size_t count,
                                       std::size_t element_size, const std::string& name);
NERVE_API void release_buffer(BufferEntry* entry) noexcept;
struct ReleaseBufferEntry {
  void operator()(BufferEntry* entry) const noexcept { release_buffer(entry); }
};
NERVE_API int buffer_owner(const BufferEntry* entry) noexcept;
NERVE_API std::uint64_t buffer_number(const BufferEntry* entry) noexcept;
// throw_empty_handle() is Error(buffer_misuse) for `what` ("owner()") of an empty DistributedBuffer.
[[noreturn]] NERVE_API void throw_empty_handle(const char* what);
// plan_task() checks the task (throws Error on every rank alike) and updates the bookkeeping.
NERVE_API TaskPlan plan_task(RuntimeImpl* runtime, const AccessDescription* accesses, std::size_t count,
                             const TaskOptions& options);
// start_send()/start_receive() run inside the send/receive tasks: they defer the task's completion
// to the communication thread. receive's `data` is the replica of `entry`, `bytes` its size, and
// `task` the name of the task that reads it (for the error if the payload does not fit).
NERVE_API void start_send(RuntimeImpl* runtime, int to, std::uint64_t sequence, const void* data,
                          std::size_t bytes);
NERVE_API void start_receive(RuntimeImpl* runtime, int from, std::uint64_t sequence, void* data,
                             std::size_t bytes, const BufferEntry* entry, const char* task);
// task_started()/task_failed()/task_finished() wrap a task body: trace events, failure broadcast.
NERVE_API std::uint64_t task_started(RuntimeImpl* runtime) noexcept;
NERVE_API void task_finished(RuntimeImpl* runtime, const char* name, std::uint64_t started) noexcept;
NERVE_API void task_failed(RuntimeImpl* runtime, const char* name, const std::exception_ptr& error) noexcept;
// submission_failed(): this rank could not submit its part of a task every rank has planned (its
// replica's memory, the body's copy): the ranks' bookkeeping no longer matches what runs, so the run
// fails on every rank, as for a task failure.
NERVE_API void submission_failed(RuntimeImpl* runtime, const char* name,
                                 const std::exception_ptr& error) noexcept;
// buffer_creation_failed(): the same for a buffer every rank has counted whose data its owner could
// not allocate.
NERVE_API void buffer_creation_failed(RuntimeImpl* runtime, const BufferEntry* entry,
                                      const std::exception_ptr& error) noexcept;
NERVE_API void runtime_wait_all(RuntimeImpl* runtime);
NERVE_API std::uint64_t runtime_buffers_live(const RuntimeImpl* runtime) noexcept;
NERVE_API void runtime_barrier(RuntimeImpl* runtime);
NERVE_API DistributedStats runtime_stats(const RuntimeImpl* runtime);
NERVE_API void runtime_dump_perf_stats(RuntimeImpl* runtime, const std::filesystem::path& path);
NERVE_API void runtime_dump_trace(RuntimeImpl* runtime, const std::filesystem::path& path);
NERVE_API Context& runtime_context(RuntimeImpl* runtime) noexcept;

// Shared by the copies of one DistributedBuffer handle (and the receive tasks filling its replica):
// the bookkeeping and the local data, made on first use.
template <class T>
struct BufferData {
  std::unique_ptr<BufferEntry, ReleaseBufferEntry> entry;
  std::size_t count = 0;
  std::string name;
  Buffer<T> local;
};
}  // namespace detail

// DistributedBuffer<T>: `size()` elements with an owner rank. Copies share the same data.
// A default-constructed (or moved-from) handle is empty, as an empty nerve::Buffer is: size() 0, and
// any other use — owner(), number(), local(), data(), or an access to it in Runtime::submit() — is
// Error(buffer_misuse) naming what was used.
template <class T>
class DistributedBuffer {
 public:
  DistributedBuffer() = default;
  int owner() const { return detail::buffer_owner(entry("owner()")); }
  std::size_t size() const noexcept { return data_ != nullptr ? data_->count : 0; }
  std::size_t size_bytes() const noexcept { return size() * sizeof(T); }
  // number() is the buffer's creation index, the same on every rank.
  std::uint64_t number() const { return detail::buffer_number(entry("number()")); }
  explicit operator bool() const noexcept { return data_ != nullptr; }
  // local() is this rank's copy: the data itself on the owner (a write through it is no new version:
  // see the top of this file), the cached replica elsewhere (an empty
  // handle until one was received).
  const Buffer<T>& local() const { return data("local()").local; }
  detail::BufferData<T>& data(const char* what = "data()") const {
    if (data_ == nullptr) detail::throw_empty_handle(what);
    return *data_;
  }

 private:
  friend class Runtime;
  explicit DistributedBuffer(std::shared_ptr<detail::BufferData<T>> data) : data_(std::move(data)) {}
  const detail::BufferEntry* entry(const char* what) const { return data(what).entry.get(); }
  std::shared_ptr<detail::BufferData<T>> data_;
};

template <class T, Access Mode>
struct DistributedAccess {
  const DistributedBuffer<T>* buffer;
};
template <class T>
DistributedAccess<T, Access::read> read(const DistributedBuffer<T>& buffer) noexcept {
  return {&buffer};
}
template <class T>
DistributedAccess<T, Access::write> write(const DistributedBuffer<T>& buffer) noexcept {
  return {&buffer};
}
template <class T>
DistributedAccess<T, Access::read_write> read_write(const DistributedBuffer<T>& buffer) noexcept {
  return {&buffer};
}

namespace detail {
template <class A>
struct is_distributed_access : std::false_type {};
template <class T, Access M>
struct is_distributed_access<DistributedAccess<T, M>> : std::true_type {};

// TaskBody wraps the user's body: trace events and failure broadcast around the call.
template <class F>
struct TaskBody {
  F fn;
  RuntimeImpl* runtime;
  const char* name;
  template <class... V>
  void operator()(V... views) {
    const std::uint64_t started = task_started(runtime);
    try {
      if constexpr (std::is_invocable_v<F&, V...>) {
        std::invoke(fn, views...);
      } else {
        std::invoke(fn);
      }
    } catch (...) {
      task_failed(runtime, name, std::current_exception());
      throw;
    }
    task_finished(runtime, name, started);
  }
};
}  // namespace detail

template <class A>
concept DistributedAccessor = detail::is_distributed_access<std::remove_cvref_t<A>>::value;

class Runtime {
 public:
  // Runtime() joins the distributed run described by context.config().distributed. With
  // communication_backend `none` it is a world of one rank (no MPI); with `mpi` it initialises MPI
  // (MPI_THREAD_SERIALIZED: only nerve's communication thread calls MPI) unless the program did.
  // Collective: every rank constructs its Runtime. A backend this build lacks is refused earlier, by
  // the Context's configuration (Error(invalid_config)). Throws Error(invalid_config) for `none` under
  // an mpirun of several ranks, Error(not_supported) where MPI cannot serve it (finalised by an
  // earlier Runtime, no thread support, another `mpi` Runtime alive in this process).
  explicit Runtime(Context& context) : impl_(detail::runtime_create(context)) {}
  // ~Runtime() waits for this rank's tasks and transfers and, when nerve initialised MPI, for every
  // rank to destroy its Runtime, then finalises MPI; after a failure on any rank it ends the job
  // instead (MPI_Abort). Destroyed by an exception leaving its scope, it waits for the other ranks at
  // most 5 s (docs/DISTRIBUTED.md, Failures), then ends the job.
  ~Runtime() { detail::runtime_destroy(impl_); }
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  int rank() const noexcept { return detail::runtime_rank(impl_); }
  int size() const noexcept { return detail::runtime_size(impl_); }
  Context& context() const noexcept { return detail::runtime_context(impl_); }
  detail::RuntimeImpl* impl() const noexcept { return impl_; }

  // buffer() creates a distributed buffer owned by `owner` (0..size()-1). Every rank must create the
  // same buffers in the same order. Only the owner allocates the data now; other ranks allocate a
  // replica when a task there first reads it. Throws Error(invalid_argument), on every rank alike and
  // before the buffer counts as created, for an owner outside the run or `count` elements larger than
  // the address space. Data the owner cannot allocate (Error(out_of_memory), on the owner alone) fails
  // the run on every rank, as a task failure does: the others have counted the buffer.
  template <class T>
  // NOLINTNEXTLINE(performance-unnecessary-value-param): it is moved (a clang-tidy 14 bug, llvm#43943)
  DistributedBuffer<T> buffer(std::size_t count, int owner, std::string name = {}) {
    auto data = std::make_shared<detail::BufferData<T>>();
    data->entry.reset(detail::register_buffer(impl_, owner, count, sizeof(T), name));
    data->count = count;
    data->name = std::move(name);
    if (owner == rank()) {
      try {
        data->local = Buffer<T>(context(), count, BufferOptions{.name = data->name});
      } catch (...) {
        detail::buffer_creation_failed(impl_, data->entry.get(), std::current_exception());
        throw;
      }
    }
    return DistributedBuffer<T>(std::move(data));
  }

  // submit() adds a task to the distributed graph (see the top of this file for where it runs). The
  // body gets one std::span per access, as Context::submit's does. Throws Error(invalid_argument),
  // on every rank alike, if the written buffers have different owners or options.rank disagrees, and
  // Error(buffer_misuse) for an access to an empty DistributedBuffer handle. What fails on this rank
  // alone once every rank has planned the task (a replica it cannot allocate, a body whose copy
  // throws) is rethrown here and fails the run on every rank, as a task failure does.
  template <class F, class... A>
  requires(DistributedAccessor<A>&&...) void submit(F&& fn, const A&... accesses) {
    submit(TaskOptions{}, std::forward<F>(fn), accesses...);
  }
  template <class F, class... A>
  requires(DistributedAccessor<A>&&...) void submit(const TaskOptions& options, F&& fn,
                                                    const A&... accesses) {
    const detail::AccessDescription descriptions[sizeof...(A) + 1] = {
        detail::AccessDescription{entry_or_null(*accesses.buffer), access_mode(accesses)}..., {}};
    const detail::TaskPlan plan = detail::plan_task(impl_, descriptions, sizeof...(A), options);
    const int me = rank();
    try {
      std::size_t index = 0;
      (move_data(plan, index++, *accesses.buffer, me, options.name), ...);
      if (plan.rank != me) return;
      nerve::TaskOptions local;
      local.name = options.name;
      local.compute_intensive = options.compute_intensive;
      context().spawn(local, detail::TaskBody<std::decay_t<F>>{std::forward<F>(fn), impl_, options.name},
                      local_access(accesses)...);
    } catch (...) {
      detail::submission_failed(impl_, options.name, std::current_exception());
      throw;
    }
  }

  // wait_all() waits for this rank's tasks and transfers; throws Error(task_failed) if a task failed
  // on any rank that this rank has heard of (barrier() is where every rank hears of every failure;
  // the first wait_all() after a local task threw rethrows that exception as is).
  void wait_all() { detail::runtime_wait_all(impl_); }
  // barrier() is wait_all() on every rank, then an MPI barrier. Collective.
  void barrier() { detail::runtime_barrier(impl_); }

  DistributedStats stats() const { return detail::runtime_stats(impl_); }
  // buffers_live() counts this Runtime's distributed buffers whose bookkeeping this rank still keeps:
  // a handle (or a receive task still filling this rank's replica) holds them. A buffer's bookkeeping
  // goes with its last handle.
  std::uint64_t buffers_live() const noexcept { return detail::runtime_buffers_live(impl_); }
  // dump_perf_stats() writes this rank's statistics (context and distributed) as JSON; "{rank}" in
  // the path is replaced by the rank. dump_trace() writes one Chrome trace-event timeline of every
  // rank to `path` on rank 0 (a process track per rank). Collective; call after wait_all(). A file
  // that cannot be written throws Error(invalid_argument) with the system's reason ("cannot write the
  // trace to '/tmp': Is a directory"), as Context::dump_perf_stats does: dump_perf_stats() on the rank
  // whose file it is, dump_trace() on every rank (rank 0 tells the others, with its message). A merged
  // trace over 2 GiB - 1 byte (MPI's int count) throws Error(not_supported) on every rank alike.
  void dump_perf_stats(const std::filesystem::path& path) { detail::runtime_dump_perf_stats(impl_, path); }
  void dump_trace(const std::filesystem::path& path) { detail::runtime_dump_trace(impl_, path); }

 private:
  template <class T, Access M>
  static constexpr Access access_mode(const DistributedAccess<T, M>&) noexcept {
    return M;
  }

  // entry_or_null(): an empty handle's access reaches plan_task() as a null buffer, which refuses it
  // naming the task and the access.
  template <class T>
  static detail::BufferEntry* entry_or_null(const DistributedBuffer<T>& buffer) noexcept {
    return buffer.data_ != nullptr ? buffer.data_->entry.get() : nullptr;
  }

  // move_data() submits this rank's side of the transfers feeding access `index`.
  template <class T>
  void move_data(const detail::TaskPlan& plan, std::size_t index, const DistributedBuffer<T>& buffer, int me,
                 const char* task) {
    for (const detail::Transfer& transfer : plan.transfers) {
      if (transfer.access != index) continue;
      detail::BufferData<T>& data = buffer.data();
      if (transfer.from == me) {
        detail::RuntimeImpl* impl = impl_;
        const int to = transfer.to;
        const std::uint64_t sequence = transfer.sequence;
        nerve::TaskOptions options;
        options.name = "nerve.send";
        context().spawn(
            options,
            [impl, to, sequence](std::span<const T> view) {
              detail::start_send(impl, to, sequence, view.data(), view.size_bytes());
            },
            nerve::read(data.local));
      } else if (transfer.to == me) {
        if (!data.local) data.local = Buffer<T>(context(), data.count, BufferOptions{.name = data.name});
        detail::RuntimeImpl* impl = impl_;
        const int from = transfer.from;
        const std::uint64_t sequence = transfer.sequence;
        // The task keeps the bookkeeping for its error message: the program may drop the handle first.
        std::shared_ptr<detail::BufferData<T>> kept = buffer.data_;
        nerve::TaskOptions options;
        options.name = "nerve.receive";
        context().spawn(
            options,
            [impl, from, sequence, kept = std::move(kept), task](std::span<T> view) {
              detail::start_receive(impl, from, sequence, view.data(), view.size_bytes(), kept->entry.get(),
                                    task);
            },
            nerve::write(data.local));
      }
    }
  }

  template <class T, Access M>
  static BufferAccess<T, M> local_access(const DistributedAccess<T, M>& access) noexcept {
    return BufferAccess<T, M>{&access.buffer->data().local};
  }

  detail::RuntimeImpl* impl_;
};

}  // namespace nerve::distributed
