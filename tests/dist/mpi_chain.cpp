// mpi_chain: a chain of dependencies across two ranks (x1 = x0 + 1 on rank 1, x0 = x1 + 1 on rank 0,
// ...) submitted under a small task_queue.max_in_flight with batched payloads. The submitting thread
// is soon held back in submit() while the tasks in flight wait for payloads; nothing more will fill a
// batch then, so the batches must leave at once, as in wait_all() — not after sync_interval (ten
// seconds in the test: each hop waited that long, and the test's timeout ended the run).
// --no-wait leaves the waiting to the Runtime's destruction, which must send them at once too.
//   mpirun -np 2 mpi_chain [--hops N] [--no-wait]   (prints PASS or FAIL on each rank)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>

#include "nerve/distributed.hpp"
#include "nerve/nerve.hpp"

namespace dist = nerve::distributed;

int main(int argc, char** argv) {
  int hops = 40;
  bool wait = true;  // --no-wait: leave the waiting to the Runtime's destruction, which flushes too
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--hops") == 0 && i + 1 < argc) hops = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--no-wait") == 0) wait = false;
  }
  nerve::Context context;
  long result = 0;
  int rank = 0;
  std::chrono::steady_clock::time_point start;
  {
    dist::Runtime world(context);
    rank = world.rank();
    const int other = world.size() > 1 ? 1 : 0;
    auto x0 = world.buffer<long>(1, 0, "x0");
    auto x1 = world.buffer<long>(1, other, "x1");
    world.submit([](std::span<long> x) { x[0] = 1; }, dist::write(x0));
    world.barrier();
    start = std::chrono::steady_clock::now();
    for (int hop = 0; hop < hops; hop += 2) {
      world.submit([](std::span<long> to, std::span<const long> from) { to[0] = from[0] + 1; },
                   dist::write(x1), dist::read(x0));
      world.submit([](std::span<long> to, std::span<const long> from) { to[0] = from[0] + 1; },
                   dist::write(x0), dist::read(x1));
    }
    world.submit(
        dist::TaskOptions{.name = "check", .rank = 0}, [&result](std::span<const long> x) { result = x[0]; },
        dist::read(x0));
    if (wait) world.wait_all();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const long expected = 1 + 2L * ((hops + 1) / 2);
  bool good = seconds < 20;
  if (rank == 0 && result != expected) good = false;
  std::printf("rank %d: %d hops in %.3f s%s, x0 = %ld (expected %ld): %s\n", rank, hops, seconds,
              wait ? "" : " (waited by the Runtime's destruction)", rank == 0 ? result : expected, expected,
              good ? "PASS" : "FAIL");
  return good ? 0 : 1;
}
