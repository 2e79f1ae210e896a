// coroutine_pipeline: stream a large input through a device-sized working set, chunk by chunk, as
// one coroutine loop.
//
// Each chunk goes through three tasks — load (input → working slot), transform (in the slot), store
// (slot → output) — and the loop keeps `depth` chunks in flight: it only awaits chunk i - depth
// before starting chunk i, so loading the next chunks overlaps transforming and storing the earlier
// ones. Slots are reused round-robin; the runtime orders a slot's next load after its previous
// store from their accesses alone. While the coroutine waits it holds no worker: every stage runs
// on the workers (or, with an accelerator and a kernel for it, on the device, its data moved there).
//
//   coroutine_pipeline [--n ELEMENTS] [--chunk ELEMENTS] [--depth CHUNKS]
// A chunk larger than the input is the whole input, and --depth is capped at the number of chunks:
// slots beyond those would only take memory.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <iterator>
#include <string_view>
#include <utility>
#include <vector>

#include "nerve/nerve.hpp"

#include "arguments.hpp"

namespace {

float transform(float x) { return std::sqrt(x) * 2.0f + 1.0f; }

// chunk_count(): how many chunks of `chunk` elements cover n, computed without n + chunk - 1, which
// wraps for sizes near 2^64.
std::size_t chunk_count(std::size_t n, std::size_t chunk) { return n / chunk + (n % chunk != 0 ? 1 : 0); }

nerve::CoTask<> stream(nerve::Context& context, nerve::Buffer<float>& input, nerve::Buffer<float>& output,
                       std::vector<nerve::Buffer<float>>& slots, std::size_t chunk) {
  std::deque<nerve::Task> in_flight;  // the store task of each chunk not yet awaited
  const std::size_t chunks = chunk_count(input.size(), chunk);
  for (std::size_t i = 0; i < chunks; ++i) {
    if (in_flight.size() == slots.size()) {  // at most `depth` chunks in flight: await the oldest
      co_await in_flight.front();
      in_flight.pop_front();
    }
    const std::size_t offset = i * chunk;
    const std::size_t count = std::min(chunk, input.size() - offset);
    auto slot = slots[i % slots.size()].slice(0, count);
    context.spawn([](std::span<const float> from,
                     std::span<float> to) { std::copy(from.begin(), from.end(), to.begin()); },
                  nerve::read(input.slice(offset, count)), nerve::write(slot));
    context.spawn(
        [](std::span<float> data) {
          for (float& x : data) x = transform(x);
        },
        nerve::read_write(slot));
    in_flight.push_back(
        context.submit([](std::span<const float> from,
                          std::span<float> to) { std::copy(from.begin(), from.end(), to.begin()); },
                       nerve::read(slot), nerve::write(output.slice(offset, count))));
  }
  for (nerve::Task& task : in_flight) co_await task;
}

std::size_t parse(const char* text) {
  const auto value = nerve_examples::parse_count(text);
  if (!value || *value == 0) {
    std::fprintf(stderr, "not a positive number: %s\n", text);
    std::exit(2);
  }
  return *value;
}

}  // namespace

int run(std::size_t n, std::size_t chunk, std::size_t depth);

int main(int argc, char** argv) {
  std::size_t n = std::size_t{1} << 22;
  std::size_t chunk = std::size_t{1} << 16;
  std::size_t depth = 3;
  const auto usage = [&](FILE* out) {
    std::fprintf(out, "usage: %s [--n ELEMENTS] [--chunk ELEMENTS] [--depth CHUNKS]\n", argv[0]);
  };
  for (int i = 1; i < argc; i += 2) {
    if (nerve_examples::is_help(argv[i])) {
      usage(stdout);
      return 0;
    }
    // Each option and the value it sets: one list, so a new option cannot be known to one check only.
    const std::pair<const char*, std::size_t*> known[] = {
        {"--n", &n}, {"--chunk", &chunk}, {"--depth", &depth}};
    const auto option = std::find_if(std::begin(known), std::end(known), [&](const auto& entry) {
      return std::strcmp(entry.first, argv[i]) == 0;
    });
    if (option == std::end(known)) {
      std::fprintf(stderr, "%s: unknown option %s\n", argv[0], argv[i]);
      usage(stderr);
      return 2;
    }
    if (i + 1 == argc) {  // an option without its value
      std::fprintf(stderr, "%s: %s needs a value\n", argv[0], argv[i]);
      usage(stderr);
      return 2;
    }
    *option->second = parse(argv[i + 1]);
  }
  chunk = std::min(chunk, n);
  depth = std::min(depth, chunk_count(n, chunk));

  try {
    return run(n, chunk, depth);
  } catch (const std::exception& error) {  // e.g. --n larger than the memory
    std::fprintf(stderr, "%s: --n %zu --chunk %zu --depth %zu: %s\n", argv[0], n, chunk, depth, error.what());
    return 1;
  }
}

int run(std::size_t n, std::size_t chunk, std::size_t depth) {
  nerve::Context context;
  nerve::Buffer<float> input(context, n);
  nerve::Buffer<float> output(context, n);
  {
    auto values = input.map_write();
    for (std::size_t i = 0; i < n; ++i) values[i] = static_cast<float>(i % 1000);
  }
  std::vector<nerve::Buffer<float>> slots;
  for (std::size_t i = 0; i < depth; ++i) slots.emplace_back(context, chunk);

  nerve::launch(context, stream(context, input, output, slots, chunk), "stream").wait();

  auto result = output.map_read();
  for (std::size_t i = 0; i < n; ++i) {
    const float expected = transform(static_cast<float>(i % 1000));
    if (result[i] != expected) {
      std::fprintf(stderr, "FAILED: output[%zu] = %g, expected %g\n", i, result[i], expected);
      return 1;
    }
  }
  std::printf("streamed %zu floats in %zu-element chunks, %zu in flight: verified\n", n, chunk, depth);
  return 0;
}
