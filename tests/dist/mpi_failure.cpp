// mpi_failure.cpp — a failure on one rank must end every rank, with a clear error, in bounded time.
//
//   mpirun -np N mpi_failure throw   rank 1's task throws: every rank's wait_all() reports it, and the
//                                     Runtime ends the job
//   mpirun -np N mpi_failure die     rank 1's process dies in a task (as if killed): mpirun ends the job
//   mpirun -np N mpi_failure barrier rank 1's task throws while the other ranks, which do not depend on
//                                     it, already wait in barrier(): they must leave it with the error
//   mpirun -np N mpi_failure mismatch the ranks disagree on a buffer's size (a program bug): every rank
//                                     fails and the job ends with a non-zero status
//   mpirun -np N mpi_failure huge     a task on rank 0 reads a buffer of rank 1 of exactly 2 GiB, one
//                                     byte over MPI's int count: every rank refuses it at submit, the
//                                     message saying the exact limit (it used to hang rank 0)
//   mpirun -np N mpi_failure overflow a buffer whose byte size wraps size_t: every rank refuses it
//                                     before it counts as created (other ranks got a 4-byte buffer)
//   mpirun -np N mpi_failure dump     dump_trace() to a path rank 0 cannot write: every rank throws the
//                                     same error (the other ranks returned normally)
//   mpirun -np N mpi_failure dump_too_large
//                                     dump_trace() of a merged trace over the size one MPI collective
//                                     moves (a limit lowered from 2 GiB - 1 byte to 64 bytes): every rank
//                                     throws the same Error(not_supported), then a dump within the limit
//                                     works (rank 0 threw std::length_error alone, the others hung)
//   mpirun -np 2 mpi_failure rethrow  rank 0's task throws while rank 0 waits for data from rank 1: its
//                                     first wait_all() rethrows the task's own exception as is, the next
//                                     one Error(task_failed) (the receive's failure, reported while the
//                                     task's closure was still being destroyed, came out first)
//   mpirun -np 2 mpi_failure send_fails
//                                     MPI_Isend refuses rank 0's send of a payload rank 1 reads (wrapped
//                                     at link time): both ranks fail (rank 1 waited for ever)
//   mpirun -np 2 mpi_failure transfer_fails
//                                     MPI_Test reports rank 0's send of a payload rank 1 reads failed
//                                     (wrapped at link time): both ranks fail (the send was taken for
//                                     done, and the run went on)
//   mpirun -np N mpi_failure escape   an exception leaves rank 1's Runtime scope (outside any task)
//                                     while the other ranks wait in barrier(): the job ends within a
//                                     few seconds, saying why (rank 1 waited in MPI_Finalize and the
//                                     others in the barrier, for ever)
//   mpirun -np N mpi_failure escape_all
//                                     the same exception leaves every rank's Runtime scope: they leave
//                                     the run together and the program goes on (it catches it) to
//                                     print PASS and exit 0
//   mpi_failure single                (one process) MPI initialised by the program at
//                                     MPI_THREAD_SINGLE: the Runtime is refused, naming that level
//   mpi_failure twice                 (one process, backend mpi) a second Runtime while the first is
//                                     alive, or after it finalised MPI, is Error(not_supported), not
//                                     an abort inside MPI
//
// Before the failure, the ranks exchange data in a ring so that some of them are blocked waiting for
// rank 1's output when it fails. check-failure.sh runs it and checks the exit status, the message and
// the time taken.
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#define OMPI_SKIP_MPICXX 1  // the C interface only (MPI_Isend), as nerve uses
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include "nerve/distributed.hpp"
#include "nerve/nerve.hpp"

#include "dist/runtime_impl.hpp"  // the transport's collective limit: a trace over it without gigabytes
#include "dist/wire.hpp"

namespace dist = nerve::distributed;

// send_fails: the next MPI_Isend of this process is refused (linked with --wrap=MPI_Isend).
std::atomic<bool> refuse_next_isend{false};

// transfer_fails: the next MPI_Test of this process on a request it completes reports an error
// (linked with --wrap=MPI_Test).
std::atomic<bool> fail_next_test{false};

extern "C" int __real_MPI_Test(MPI_Request* request, int* flag, MPI_Status* status);
extern "C" int __wrap_MPI_Test(MPI_Request* request, int* flag, MPI_Status* status) {
  const int code = __real_MPI_Test(request, flag, status);
  if (code == MPI_SUCCESS && *flag != 0 && fail_next_test.exchange(false)) return MPI_ERR_OTHER;
  return code;
}

extern "C" int __real_MPI_Isend(const void* data, int count, MPI_Datatype type, int to, int tag,
                                MPI_Comm comm, MPI_Request* request);
extern "C" int __wrap_MPI_Isend(const void* data, int count, MPI_Datatype type, int to, int tag,
                                MPI_Comm comm, MPI_Request* request) {
  if (refuse_next_isend.exchange(false)) return MPI_ERR_OTHER;
  return __real_MPI_Isend(data, count, type, to, tag, comm, request);
}

// expect_failure(): runs `wait` (a wait_all() or barrier() that must report the failure) and says what
// it threw; 3 when it threw (~Runtime then ends the job), 0 when it did not.
template <class Wait>
int expect_failure(dist::Runtime& world, const char* call, Wait&& wait) {
  try {
    wait();
  } catch (const std::exception& error) {
    std::printf("rank %d: %s: %s\n", world.rank(), call, error.what());
    std::fflush(stdout);
    return 3;
  }
  std::printf("rank %d: finished without seeing the failure\n", world.rank());
  return 0;
}

int main(int argc, char** argv) {
  const bool die = argc > 1 && std::strcmp(argv[1], "die") == 0;
  const bool barrier = argc > 1 && std::strcmp(argv[1], "barrier") == 0;
  const bool mismatch = argc > 1 && std::strcmp(argv[1], "mismatch") == 0;
  if (argc > 1 && std::strcmp(argv[1], "single") == 0) {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SINGLE, &provided);
    bool ok = false;
    {
      nerve::Context context;
      try {
        dist::Runtime world(context);
        std::printf("FAIL: a Runtime was accepted under MPI_THREAD_SINGLE\n");
      } catch (const nerve::Error& error) {
        // The level named is the one MPI gives (it said FUNNELED for SINGLE).
        ok = error.code() == nerve::ErrorCode::not_supported && provided == MPI_THREAD_SINGLE &&
             std::strstr(error.what(), "MPI provides MPI_THREAD_SINGLE only") != nullptr;
        std::printf("%s: %s\n", ok ? "PASS" : "FAIL", error.what());
      }
    }
    MPI_Finalize();
    return ok ? 0 : 1;
  }
  if (argc > 1 && std::strcmp(argv[1], "twice") == 0) {
    nerve::Context context;
    {
      dist::Runtime first(context);
      // Two alive at once: each would have a thread calling MPI, which SERIALIZED does not allow.
      nerve::Context other;
      try {
        dist::Runtime second(other);
        std::printf("FAIL: a second Runtime was accepted while the first is alive\n");
        return 1;
      } catch (const nerve::Error& error) {
        if (error.code() != nerve::ErrorCode::not_supported) {
          std::printf("FAIL: a second Runtime alive: %s\n", error.what());
          return 1;
        }
        std::printf("refused while the first is alive: %s\n", error.what());
      }
      first.barrier();  // the first still works
    }
    try {
      dist::Runtime second(context);
      std::printf("FAIL: a second Runtime started after MPI was finalised\n");
      return 1;
    } catch (const nerve::Error& error) {
      std::printf("%s: %s\n", error.code() == nerve::ErrorCode::not_supported ? "PASS" : "FAIL",
                  error.what());
      return error.code() == nerve::ErrorCode::not_supported ? 0 : 1;
    }
  }
  nerve::Context context;
  const bool escape_all = argc > 1 && std::strcmp(argv[1], "escape_all") == 0;
  if (escape_all || (argc > 1 && std::strcmp(argv[1], "escape") == 0)) {
    int rank = -1;
    try {
      dist::Runtime world(context);
      rank = world.rank();
      auto data = world.buffer<int>(1, 0, "data");
      world.submit(
          dist::TaskOptions{.name = "writer", .rank = 0}, [](std::span<int> v) { v[0] = 7; },
          dist::write(data));
      world.wait_all();
      world.barrier();
      if (escape_all || world.rank() == 1) throw std::runtime_error("the program's own error");
      world.barrier();  // the other ranks wait here for rank 1, which never comes
      std::printf("rank %d: FAIL: the barrier returned without rank 1\n", rank);
      return 1;
    } catch (const std::runtime_error& error) {
      std::printf("rank %d: %s: caught after the Runtime: %s\n", rank, escape_all ? "PASS" : "FAIL",
                  error.what());
      return escape_all ? 0 : 1;
    }
  }
  dist::Runtime world(context);
  const int ranks = world.size();
  if (mismatch) {
    // Rank 1 owns a buffer the other ranks believe twice as large; rank 0 reads it.
    auto remote = world.buffer<int>(world.rank() == 1 ? 4 : 8, 1, "tile");
    world.submit(
        dist::TaskOptions{.name = "reader", .rank = 0}, [](std::span<const int>) {}, dist::read(remote));
    return expect_failure(world, "wait_all, barrier", [&] {
      world.wait_all();
      world.barrier();
    });
  }
  const bool send_fails = argc > 1 && std::strcmp(argv[1], "send_fails") == 0;
  if (send_fails || (argc > 1 && std::strcmp(argv[1], "transfer_fails") == 0)) {
    // All of it inside the checked wait: rank 0 may fail while rank 1 is still leaving the first
    // barrier, which then throws (it checks for a failure after the barrier).
    return expect_failure(world, "wait_all, barrier", [&] {
      auto source = world.buffer<int>(1, 0, "source");
      world.submit(
          dist::TaskOptions{.name = "writer", .rank = 0}, [](std::span<int> v) { v[0] = 7; },
          dist::write(source));
      world.wait_all();
      world.barrier();
      // The payload's send: refused, or the next request rank 0 sees done (that send) reported failed.
      if (world.rank() == 0) (send_fails ? refuse_next_isend : fail_next_test) = true;
      world.submit(
          dist::TaskOptions{.name = "reader", .rank = 1}, [](std::span<const int>) {}, dist::read(source));
      world.wait_all();
      world.barrier();
    });
  }
  if (argc > 1 && std::strcmp(argv[1], "huge") == 0) {
    // Never touched: the owner's host pages stay unmapped.
    auto remote = world.buffer<char>(std::size_t{2} << 30, 1);
    try {
      world.submit(
          dist::TaskOptions{.name = "far", .rank = 0}, [](std::span<const char>) {}, dist::read(remote));
      std::printf("rank %d: FAIL: a 2 GiB transfer was accepted\n", world.rank());
      return 1;
    } catch (const nerve::Error& error) {
      // The limit the message states is the one applied: it said "limited to 2 GiB" as it refused 2 GiB.
      const bool ok = error.code() == nerve::ErrorCode::not_supported &&
                      std::strstr(error.what(), "limited to 2 GiB - 1 byte (2147483647 bytes") != nullptr;
      std::printf("rank %d: %s: %s\n", world.rank(), ok ? "PASS" : "FAIL", error.what());
      world.wait_all();
      world.barrier();
      return ok ? 0 : 1;
    }
  }
  if (argc > 1 && std::strcmp(argv[1], "overflow") == 0) {
    bool ok = false;
    try {
      (void)world.buffer<int>(SIZE_MAX / sizeof(int) + 2, ranks - 1, "huge");
      std::printf("rank %d: FAIL: a buffer whose byte size wraps was created\n", world.rank());
    } catch (const nerve::Error& error) {
      ok = error.code() == nerve::ErrorCode::invalid_argument;
      std::printf("rank %d: %s: %s\n", world.rank(), ok ? "refused" : "FAIL", error.what());
    }
    // Every rank's bookkeeping still agrees: the refused buffer was not registered anywhere.
    const auto next = world.buffer<int>(1, 0);
    if (next.number() != 0) {
      std::printf("rank %d: FAIL: the next buffer is number %llu, not 0\n", world.rank(),
                  static_cast<unsigned long long>(next.number()));
      ok = false;
    }
    world.barrier();
    if (ok) std::printf("rank %d: PASS\n", world.rank());
    return ok ? 0 : 1;
  }
  if (argc > 1 && std::strcmp(argv[1], "dump") == 0) {
    // A directory: rank 0 cannot write the trace there, and every rank must say so.
    const std::string directory = std::filesystem::temp_directory_path().string();
    bool ok = false;
    try {
      world.dump_trace(directory);
      std::printf("rank %d: FAIL: dump_trace to a directory returned normally\n", world.rank());
    } catch (const nerve::Error& error) {
      ok = error.code() == nerve::ErrorCode::invalid_argument &&
           std::string(error.what()) == "cannot write the trace to '" + directory + "': Is a directory";
      std::printf("rank %d: %s: %s\n", world.rank(), ok ? "PASS" : "FAIL", error.what());
    }
    world.barrier();
    return ok ? 0 : 1;
  }
  if (argc > 1 && std::strcmp(argv[1], "rethrow") == 0) {
    // Rank 0 has a receive posted (rank 1 writes `far` slowly) when its task `boom` throws; the failure
    // is broadcast at once, which fails that receive, while boom's closure takes 300 ms to destroy:
    // the receive's failure reached the context first, every time.
    struct SlowToDestroy {
      ~SlowToDestroy() { std::this_thread::sleep_for(std::chrono::milliseconds(300)); }
    };
    auto near = world.buffer<int>(1, 0);
    auto far = world.buffer<int>(1, 1);
    auto result = world.buffer<int>(1, 0);
    world.submit(
        dist::TaskOptions{.name = "slow"},
        [](std::span<int> out) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1000));
          out[0] = 1;
        },
        dist::write(far));
    world.submit(
        dist::TaskOptions{.name = "reader"},
        [](std::span<int> out, std::span<const int> in) { out[0] = in[0]; }, dist::write(result),
        dist::read(far));
    world.submit(
        dist::TaskOptions{.name = "boom"},
        [slow = std::make_shared<SlowToDestroy>()](std::span<int>) {
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
          throw std::runtime_error("injected failure");
        },
        dist::write(near));
    if (world.rank() != 0) return expect_failure(world, "barrier", [&] { world.barrier(); });
    bool ok = false;
    try {
      world.wait_all();
      std::printf("rank 0: FAIL: the first wait_all() returned normally\n");
    } catch (const nerve::Error& error) {
      std::printf("rank 0: FAIL: the first wait_all() threw nerve::Error, not the task's exception: %s\n",
                  error.what());
    } catch (const std::runtime_error& error) {
      ok = std::string(error.what()) == "injected failure";
      std::printf("rank 0: %s: the first wait_all() rethrew the task's exception: %s\n", ok ? "ok" : "FAIL",
                  error.what());
    }
    try {
      world.wait_all();
      std::printf("rank 0: FAIL: the second wait_all() returned normally\n");
      ok = false;
    } catch (const nerve::Error& error) {
      const bool named =
          error.code() == nerve::ErrorCode::task_failed &&
          std::strstr(error.what(), "task 'boom' failed on rank 0: injected failure") != nullptr;
      std::printf("rank 0: %s: the second wait_all() threw: %s\n", named ? "ok" : "FAIL", error.what());
      ok = ok && named;
    }
    if (ok) std::printf("rank 0: PASS\n");
    std::fflush(stdout);
    return 3;
  }
  if (argc > 1 && std::strcmp(argv[1], "dump_too_large") == 0) {
    auto mine = world.buffer<int>(1, world.rank());
    world.submit(
        dist::TaskOptions{.name = "traced"}, [](std::span<int> v) { v[0] = 1; }, dist::write(mine));
    world.wait_all();
    const std::filesystem::path path = std::filesystem::temp_directory_path() /
                                       ("nerve-dump-too-large-" + std::to_string(::getpid()) + ".json");
    bool ok = false;
    world.impl()->transport->limit_collectives(64);  // every rank's trace is more than that
    try {
      world.dump_trace(path);
      std::printf("rank %d: FAIL: dump_trace over the limit returned normally\n", world.rank());
    } catch (const nerve::Error& error) {
      ok = error.code() == nerve::ErrorCode::not_supported &&
           std::strstr(error.what(), "dump_trace(): the merged trace is ") != nullptr &&
           std::strstr(error.what(), "over the 64 bytes one MPI collective moves") != nullptr;
      std::printf("rank %d: %s: %s\n", world.rank(), ok ? "refused" : "FAIL", error.what());
    } catch (const std::exception& error) {
      std::printf("rank %d: FAIL: dump_trace threw a non-nerve exception: %s\n", world.rank(), error.what());
    }
    // Every rank left the collective alike: the next one works.
    world.impl()->transport->limit_collectives(dist::detail::collective_bytes_max);
    world.dump_trace(path);
    world.barrier();
    if (world.rank() == 0) {
      ok = ok && std::filesystem::file_size(path) > 64;
      std::filesystem::remove(path);
    }
    std::printf("rank %d: %s\n", world.rank(), ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
  }
  if (barrier) {
    auto mine = world.buffer<int>(16, 1);
    world.submit(
        dist::TaskOptions{.name = "boom"},
        [](std::span<int>) {
          std::this_thread::sleep_for(std::chrono::milliseconds(500));
          throw std::runtime_error("injected failure");
        },
        dist::write(mine));
    return expect_failure(world, "barrier", [&] { world.barrier(); });
  }
  std::vector<dist::DistributedBuffer<int>> ring;
  for (int r = 0; r < ranks; ++r) ring.push_back(world.buffer<int>(1024, r));
  for (int round = 0; round < 20; ++round) {
    for (int r = 0; r < ranks; ++r) {
      const auto& mine = ring[static_cast<std::size_t>(r)];
      const auto& previous = ring[static_cast<std::size_t>((r + ranks - 1) % ranks)];
      const bool fail_here = round == 5 && r == 1;
      world.submit(
          dist::TaskOptions{.name = fail_here ? "boom" : "ring"},
          [fail_here, die](std::span<int> out, std::span<const int> in) {
            if (fail_here) {
              std::this_thread::sleep_for(std::chrono::milliseconds(200));
              if (die) std::raise(SIGKILL);
              throw std::runtime_error("injected failure");
            }
            for (std::size_t i = 0; i < out.size(); ++i) out[i] = out[i] + in[i] + 1;
          },
          dist::read_write(mine), dist::read(previous));
    }
  }
  return expect_failure(world, "wait_all", [&] { world.wait_all(); });
}
