// pingpong — the distributed runtime's transfer cost between two ranks: latency and bandwidth.
//
//   mpirun -np 2 pingpong [--rounds R]
//
// Buffer a is owned by rank 0, b by rank 1. Each round, rank 1 writes b from a, then rank 0 writes a
// from b: every round moves one payload each way, through nerve's own path (send task, communication
// thread, receive task into the replica, dependent task). Prints, per payload size, the time of one
// one-way transfer (half a round) and the bandwidth: the α + β·bytes model docs/DISTRIBUTED.md uses.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "nerve/distributed.hpp"
#include "nerve/nerve.hpp"

namespace dist = nerve::distributed;

int main(int argc, char** argv) {
  int rounds = 200;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--rounds") == 0) rounds = std::atoi(argv[i + 1]);
  }
  nerve::Context context;
  dist::Runtime world(context);
  if (world.size() != 2) {
    std::fprintf(stderr, "pingpong: run with 2 ranks\n");
    return 2;
  }
  for (std::size_t bytes = 8; bytes <= (std::size_t{8} << 20); bytes *= 8) {
    const std::size_t count = bytes / sizeof(double);
    auto a = world.buffer<double>(count, 0);
    auto b = world.buffer<double>(count, 1);
    auto copy = [](std::span<double> out, std::span<const double> in) { out[0] = in[0] + 1; };
    world.submit([](std::span<double> out) { std::fill(out.begin(), out.end(), 0.0); }, dist::write(a));
    world.submit([](std::span<double> out) { std::fill(out.begin(), out.end(), 0.0); }, dist::write(b));
    world.barrier();
    const int these_rounds = bytes >= (std::size_t{1} << 20) ? rounds / 10 : rounds;
    const auto start = std::chrono::steady_clock::now();
    for (int r = 0; r < these_rounds; ++r) {
      world.submit(copy, dist::write(b), dist::read(a));
      world.submit(copy, dist::write(a), dist::read(b));
    }
    world.barrier();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double one_way = seconds / (2.0 * these_rounds);
    if (world.rank() == 0) {
      std::printf("%9zu bytes: %9.1f us one way, %8.1f MB/s\n", bytes, one_way * 1e6,
                  static_cast<double>(bytes) / one_way / 1e6);
    }
  }
  return 0;
}
