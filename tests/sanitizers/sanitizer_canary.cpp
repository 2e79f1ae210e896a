// sanitizer_canary.cpp — one deliberate bug per mode, so that the sanitizer suites prove they catch
// what they are for, with the options `make test-tsan` / `make test-asan` pass (expect-report.sh checks
// the report and the failing exit status). Built only in sanitizer builds.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace {

int shared_counter = 0;  // written by two threads without synchronisation in `race`

std::atomic<int> arrived{0};

// Both threads write while both are alive: under a loaded CTest run the other thread once finished
// before the main one started writing, and ThreadSanitizer missed the race (seen once). The
// meeting is relaxed, so it orders nothing: the writes still race.
[[gnu::noinline]] void increment_without_lock() {
  arrived.fetch_add(1, std::memory_order_relaxed);
  while (arrived.load(std::memory_order_relaxed) < 2) {
  }
  for (int i = 0; i < 1000; ++i) shared_counter = shared_counter + 1;
}

[[gnu::noinline]] int read_past_the_end(const int* values, int index) { return values[index]; }

[[gnu::noinline]] int add(int a, int b) { return a + b; }

}  // namespace

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "";
  if (std::strcmp(mode, "race") == 0) {
    std::thread other(increment_without_lock);
    increment_without_lock();
    other.join();
    std::printf("counter: %d\n", shared_counter);
  } else if (std::strcmp(mode, "overflow") == 0) {
    int* values = new int[4]{};
    volatile int index = 4;
    std::printf("value: %d\n", read_past_the_end(values, index));
    delete[] values;
  } else if (std::strcmp(mode, "leak") == 0) {
    void* volatile lost = std::malloc(64);
    std::printf("allocated %p\n", lost);
    lost = nullptr;
  } else if (std::strcmp(mode, "undefined") == 0) {
    volatile int big = 2147483647;
    std::printf("sum: %d\n", add(big, 1));
  } else {
    std::fprintf(stderr, "usage: sanitizer_canary race|overflow|leak|undefined\n");
    return 2;
  }
  return 0;
}
