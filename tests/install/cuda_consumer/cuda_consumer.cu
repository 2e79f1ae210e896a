// Includes every public header through nerve.hpp (coroutines included, which need C++20) and makes a
// context: no GPU needed.
#include <cstdio>

#include "nerve/nerve.hpp"

__global__ void touch(int* value) { *value = 1; }

int main() {
  nerve::Context context;
  std::printf("cuda consumer: %u workers\n", context.worker_count());
  return context.worker_count() > 0 ? 0 : 1;
}
