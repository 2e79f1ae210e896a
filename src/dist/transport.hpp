// transport.hpp — how the ranks of a distributed run exchange payloads (one implementation per
// distributed.communication_backend that moves data: MPI today).
//
// A payload is one version of one buffer going from one rank to another; both sides name it by
// (peer, sequence), the sequence being the n-th payload between the two ranks in submission order,
// which every rank computes alike (the sequential task flow). send() and receive() are called from
// inside the runtime's send/receive tasks, which have deferred their completion: the transport ends
// them with detail::complete_deferred() once the data left or landed (or the run failed).
//
// Thread safety: send(), receive(), report_failure(), failure() and stats() may be called from any
// thread; flush(), barrier(), gather(), broadcast() and shutdown() from the rank's submitting thread
// only.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "nerve/config.hpp"
#include "nerve/detail/runtime_api.hpp"
#include "nerve/distributed.hpp"

namespace nerve::distributed::detail {

inline constexpr std::chrono::seconds leave_limit{5};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const noexcept = 0;
  virtual int size() const noexcept = 0;

  // send() transmits `bytes` at `data`, which stays valid and unchanged until `task` completes.
  virtual void send(int to, std::uint64_t sequence, const void* data, std::size_t bytes,
                    nerve::detail::TaskRecord* task) = 0;
  // receive() fills `bytes` at `data` with the payload (from, sequence), then completes `task`. A
  // payload of another size fails the run with an error that names the replica by `what` ("buffer 3
  // 'tile' for task 'gemm'").
  virtual void receive(int from, std::uint64_t sequence, void* data, std::size_t bytes,
                       nerve::detail::TaskRecord* task, std::string what) = 0;
  // report_failure() tells every other rank that this one failed (once; later calls do nothing) and
  // fails this rank's pending transfers.
  virtual void report_failure(const std::string& message) = 0;
  // failure() is the first failure reported by any rank, once this rank knows of it.
  virtual std::optional<std::string> failure() const = 0;
  // flush() sends batched payloads now.
  virtual void flush() = 0;
  // set_waiting(): the application thread is (or no longer is) waiting for this rank's tasks — in
  // wait_all()/barrier(), the Runtime's destruction, or a submit() that task_queue.max_in_flight holds
  // back; while it waits, payloads are not held back for distributed.sync_interval (nothing more will
  // be submitted to fill a batch). Calls nest (a count).
  virtual void set_waiting(bool /*waiting*/) noexcept {}
  // barrier(), gather() and broadcast() are collective over every rank; broadcast() returns `root`'s
  // `text` on every rank. gather() and broadcast() throw on every rank alike, or on none: texts over
  // the size limit of one collective (collective_size_error(), wire.hpp; `what` names them in the
  // error) are Error(not_supported), and memory `root` (gather) or any rank (broadcast) cannot
  // allocate for them Error(out_of_memory).
  virtual void barrier() = 0;
  virtual std::vector<std::string> gather(const std::string& mine, int root, std::string_view what) = 0;
  virtual std::string broadcast(const std::string& text, int root, std::string_view what) = 0;
  // limit_collectives(): gather() and broadcast() refuse more than `bytes` in all (never more than
  // MPI's int count allows, collective_bytes_max): tests reach the refusal without gigabytes of text.
  // Called on every rank alike, while no collective runs.
  virtual void limit_collectives(std::uint64_t bytes) noexcept = 0;
  // leave() is each rank's last collective, from its Runtime's destruction, on a communicator of its
  // own (it never matches a program's barrier()): it waits until every rank has come to leave. A
  // Runtime destroyed by an exception (`unwinding`) waits at most leave_limit, since the others may be
  // waiting for this rank elsewhere for ever (a barrier(), a payload); when nerve did not initialise
  // MPI, a normal destruction does not wait (the program's MPI_Finalize orders the ranks, and it may
  // synchronise them itself before). True when every rank left; false when the limit passed first or
  // a failure became known (failure()).
  virtual bool leave(bool unwinding) = 0;
  // shutdown() stops the communication thread and finalises MPI if this transport initialised it;
  // abort() ends every rank's process now.
  virtual void shutdown() noexcept = 0;
  [[noreturn]] virtual void abort(int code) noexcept = 0;
  // stats() fills the communication fields of `stats`.
  virtual void add_stats(DistributedStats& stats) const = 0;
};

// make_mpi_transport() joins MPI_COMM_WORLD (initialising MPI if needed) with the configured batch,
// flush interval and compression. Throws Error(not_supported) in builds without MPI.
std::unique_ptr<Transport> make_mpi_transport(const Config::Distributed& config);

}  // namespace nerve::distributed::detail
