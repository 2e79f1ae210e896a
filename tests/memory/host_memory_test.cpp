// Buffers' host copies come from the context's per-NUMA-node pools: accounting, limits, NUMA choice,
// compaction, and the data freed at context destruction.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <future>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include <gmock/gmock.h>

#include "memory/buffer_state.hpp"
#include "memory/host_pinning.hpp"
#include "memory/pool/huge_pages.hpp"
#include "support/runtime_fixture.hpp"

namespace nerve::testing {
namespace {

using ::testing::HasSubstr;

Settings settings_with(std::initializer_list<std::pair<const char*, const char*>> values) {
  Settings settings = make_settings(2);
  for (const auto& [key, value] : values) settings.set(key, value);
  return settings;
}

std::size_t in_use_on(const Context& context, std::size_t numa_node) {
  return context.stats().memory.host_pools.at(numa_node).bytes_in_use;
}

// HostPinning with a stand-in driver: a registration runs without the lock (a copy of the same
// buffer meanwhile is staged, one of another buffer is not held up), a large buffer is registered
// once, memory outside tracked buffers never, and untrack() unregisters.
class BlockingRegistrar final : public detail::DmaRegistrar {
 public:
  const void* dma_domain() const noexcept override { return this; }
  bool register_host(void* data, std::size_t) noexcept override {
    entered.set_value();
    release.get_future().wait();
    registered.push_back(data);
    return true;
  }
  void unregister_host(void* data) noexcept override { unregistered.push_back(data); }
  std::promise<void> entered, release;
  std::vector<void*> registered, unregistered;
};

TEST(HostPinning, RegistersOnceWithoutHoldingUpOtherCopies) {
  detail::HostPinning pinning;
  BlockingRegistrar registrar;
  constexpr std::size_t size = detail::HostPinning::min_bytes;
  std::vector<std::byte> a(size), b(size), small(size / 2);
  pinning.track(a.data(), size);
  pinning.track(b.data(), size);
  pinning.track(small.data(), small.size());  // below min_bytes: not tracked
  std::future<bool> first =
      std::async(std::launch::async, [&] { return pinning.pinned_for_dma(a.data() + 64, 128, registrar); });
  registrar.entered.get_future().wait();  // a's registration is running
  EXPECT_FALSE(pinning.pinned_for_dma(a.data(), size, registrar)) << "being registered: staged meanwhile";
  EXPECT_FALSE(pinning.pinned_for_dma(small.data(), 64, registrar)) << "not tracked";
  EXPECT_FALSE(pinning.pinned_for_dma(a.data() + size - 8, 16, registrar)) << "crosses the end of a";
  EXPECT_EQ(pinning.stats().pinned_allocations, 0u);
  registrar.release.set_value();
  EXPECT_TRUE(first.get());
  EXPECT_TRUE(pinning.pinned_for_dma(a.data() + size / 2, 64, registrar)) << "a slice of it, later";
  EXPECT_EQ(registrar.registered, std::vector<void*>{a.data()});
  EXPECT_EQ(pinning.stats().pinned_bytes, size);
  pinning.untrack(a.data(), size);
  EXPECT_EQ(registrar.unregistered, std::vector<void*>{a.data()});
  EXPECT_EQ(pinning.stats().pinned_allocations, 0u);
  pinning.untrack(b.data(), size);  // never registered: nothing to undo
  EXPECT_EQ(registrar.unregistered.size(), 1u);
}

TEST(HostMemory, BufferDataComesFromTheHostPool) {
  Context context(make_settings(2));
  const std::size_t before = context.stats().memory.host_bytes_in_use;
  {
    Buffer<double> small(context, 100);    // a size class
    Buffer<double> large(context, 50000);  // a large block
    const MemoryStats memory = context.stats().memory;
    EXPECT_GE(memory.host_bytes_in_use, before + 100 * sizeof(double) + 50000 * sizeof(double));
    EXPECT_GE(memory.host_bytes_reserved, memory.host_bytes_in_use);
    EXPECT_EQ(memory.host_pools.size(), context.topology().numa_nodes().size());
    // Cache-line aligned (page aligned when large), as SIMD kernels expect.
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(small.map_read().data()) % 64, 0u);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(large.map_read().data()) % 4096, 0u);
  }
  EXPECT_EQ(context.stats().memory.host_bytes_in_use, before) << "dropping the buffers returns their bytes";
}

// Each buffer names the one created after it (a prefetch hint for sweeps in creation order), and the
// hint is only ever written into a buffer still alive: after the newest buffer goes, the next one
// created is nobody's successor (under ASan, a write into the gone buffer would be reported).
TEST(HostMemory, BuffersNameTheirSuccessorInCreationOrderWhileAlive) {
  Context context(make_settings(2));
  Buffer<int> first(context, 4);
  Buffer<int> second(context, 4);
  const auto next_of = [](const Buffer<int>& buffer) {
    return buffer.state()->created_next.load(std::memory_order_relaxed);
  };
  std::optional<Buffer<int>> third(std::in_place, context, 4);
  const detail::BufferState* third_state = third->state();
  EXPECT_EQ(next_of(first), second.state());
  EXPECT_EQ(next_of(second), third_state);
  EXPECT_EQ(next_of(*third), nullptr);
  third.reset();
  Buffer<int> fourth(context, 4);
  EXPECT_EQ(next_of(second), third_state) << "a hint, left as it was (never dereferenced)";
  Buffer<int> fifth(context, 4);
  EXPECT_EQ(next_of(fourth), fifth.state());
  // Sweeping them in that order still computes the right thing.
  for (Buffer<int>* buffer : {&first, &second, &fourth, &fifth}) {
    context.spawn([](std::span<int> data) { data[0] = 7; }, write(buffer->slice(0, 1)));
  }
  context.wait_all();
  for (Buffer<int>* buffer : {&first, &second, &fourth, &fifth}) EXPECT_EQ(buffer->map_read()[0], 7);
}

TEST(HostMemory, RecreatedBuffersReuseThePool) {
  Context context(make_settings(2));
  for (int round = 0; round < 3; ++round) {
    std::vector<Buffer<float>> buffers;
    for (int i = 0; i < 64; ++i) buffers.emplace_back(context, 256);
  }
  const MemoryPoolStats pool = context.stats().memory.host_pools.at(0);
  EXPECT_EQ(pool.allocations, 3u * 64u);
  EXPECT_LT(pool.from_node, 8u) << "after the first round, buffers are served from the pool, not the system";
}

TEST(HostMemory, CompactReturnsFreeMemory) {
  Context context(make_settings(2));
  {
    std::vector<Buffer<char>> buffers;
    for (int i = 0; i < 32; ++i) buffers.emplace_back(context, std::size_t{1} << 20);  // large blocks
    for (int i = 0; i < 200; ++i) buffers.emplace_back(context, 2000);                 // slabs
  }
  const std::size_t reserved = context.stats().memory.host_bytes_reserved;
  ASSERT_GT(reserved, 0u);
  const std::size_t returned = context.memory_compact();
  EXPECT_GT(returned, 0u);
  EXPECT_EQ(context.stats().memory.host_bytes_reserved, reserved - returned);
  EXPECT_EQ(context.memory_compact(), 0u) << "nothing left to return";
  Buffer<int> after(context, 1000);  // the pool still works after compaction
  context.submit([](std::span<int> data) { std::fill(data.begin(), data.end(), 7); }, write(after));
  EXPECT_EQ(after.to_vector(), std::vector<int>(1000, 7));
}

TEST(HostMemory, NodeLimitMakesAnOversizedBufferAClearError) {
  Context context(settings_with({{"memory.host_node_limit", "4194304"}}));  // 4 MiB per NUMA node
  Buffer<char> fits(context, std::size_t{1} << 20);
  try {
    Buffer<char> too_big(context, std::size_t{8} << 20, BufferOptions{.name = "too_big"});
    FAIL() << "an 8 MiB buffer fit under a 4 MiB limit";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::out_of_memory);
    EXPECT_THAT(error.what(), HasSubstr("'too_big'"));  // which buffer, as device memory errors say
    EXPECT_THAT(error.what(), HasSubstr("8388608"));    // the size asked
    EXPECT_THAT(error.what(), HasSubstr("4194304"));    // the limit
  }
  // Nothing lost: the buffer that fit and the context still work.
  context.submit([](std::span<char> data) { data[0] = 'x'; }, write(fits));
  EXPECT_EQ(fits.map_read()[0], 'x');
  EXPECT_EQ(live_buffers(context), 1u);
}

// Big blocks are padded by a rotating number of pages (colouring); the padding must never decide
// whether a buffer fits: the same near-limit request, made and dropped ten times (every colour), fits
// each time, and so does a buffer of exactly the limit.
TEST(HostMemory, NodeLimitFitsTheSameBufferWhateverItsColour) {
  constexpr std::size_t limit = std::size_t{4} << 20;
  Context context(settings_with({{"memory.host_node_limit", "4194304"}}));
  for (int attempt = 0; attempt < 10; ++attempt) {
    {
      Buffer<char> near_limit(context, limit - 16 * 1024);
      EXPECT_EQ(near_limit.size(), limit - 16 * 1024) << "attempt " << attempt;
    }
    context.memory_compact();  // the cached block would otherwise be reused, whatever its colour
  }
  Buffer<char> exact(context, limit);
  context.submit([](std::span<char> data) { data.back() = 'z'; }, write(exact));
  EXPECT_EQ(exact.map_read()[limit - 1], 'z');
}

// A small limit: a buffer of an upper size class (whose usual slab is 2 MiB) takes a smaller slab
// instead of failing on an empty pool.
TEST(HostMemory, NodeLimitBelowAClassesSlabStillFitsItsBuffers) {
  Context context(settings_with({{"memory.host_node_limit", "1048576"}}));  // 1 MiB
  for (const std::size_t bytes : {std::size_t{40000}, std::size_t{65536}, std::size_t{32768}}) {
    Buffer<char> buffer(context, bytes);
    EXPECT_LE(context.stats().memory.host_bytes_reserved, std::size_t{1} << 20) << bytes;
  }
  std::vector<Buffer<char>> several;
  for (int i = 0; i < 6; ++i) several.emplace_back(context, 65536);  // 6 × 128 KiB slabs
  EXPECT_LE(context.stats().memory.host_bytes_reserved, std::size_t{1} << 20);
}

// Memory a freed buffer left cached goes back to the node before a class takes a slab smaller than
// the limit allows: after a 600 kB buffer came and went, a 1 MiB limit still holds fifteen buffers of
// 64 KiB (CONFIG.md), as on an empty pool (with the cached block in the way they took 256 KiB slabs,
// one chunk short each, and twelve fitted).
TEST(HostMemory, NodeLimitHoldsAsManyAfterAFreedBufferAsBefore) {
  const auto how_many_fit = [](Context& context) {
    std::vector<Buffer<char>> buffers;
    try {
      for (int i = 0; i < 100; ++i) buffers.emplace_back(context, 65536);
    } catch (const Error& error) {
      EXPECT_EQ(error.code(), ErrorCode::out_of_memory) << error.what();
    }
    return buffers.size();
  };
  Context fresh(settings_with({{"memory.host_node_limit", "1048576"}}));
  EXPECT_EQ(how_many_fit(fresh), 15u);
  Context used(settings_with({{"memory.host_node_limit", "1048576"}}));
  { Buffer<char> passing(used, 600000); }
  EXPECT_EQ(how_many_fit(used), 15u);
}

// Buffers created and dropped inside tasks: their memory must not stay cached in the (now idle)
// workers where the limit cannot reach it.
TEST(HostMemory, NodeLimitGetsBackWhatWorkersFreed) {
  Context context(settings_with({{"memory.host_node_limit", "1048576"}, {"parallel.thread_pool_size", "2"}}));
  for (int round = 0; round < 4; ++round) {
    for (int t = 0; t < 2; ++t) {
      context.spawn([&context] {
        std::vector<Buffer<char>> scratch;
        for (int i = 0; i < 50; ++i) scratch.emplace_back(context, 4000);
      });
    }
    context.wait_all();
  }
  EXPECT_EQ(context.stats().memory.host_pools.at(0).bytes_in_use, 0u);
  Buffer<char> large(context, 900 * 1024);  // needs nearly the whole limit
  EXPECT_EQ(large.size(), 900u * 1024);
}

// memory.huge_pages through the public API: a 16 MiB buffer's host copy is in a block given
// transparent huge pages (the pool's stats and the perf stats say how many bytes), unless turned off.
TEST(HostMemory, BigBuffersUseHugePagesUnlessTurnedOff) {
  for (const bool on : {true, false}) {
    Context context(settings_with({{"memory.huge_pages", on ? "true" : "false"}}));
    Buffer<float> big(context, std::size_t{4} << 20);
    Buffer<float> small(context, std::size_t{1} << 18);  // 1 MiB: 4 KiB pages either way
    const std::size_t huge = context.stats().memory.host_pools.at(0).huge_page_bytes;
    if (on && memory::transparent_huge_page_size() != 0) {
      EXPECT_GE(huge, big.size() * sizeof(float));
      EXPECT_LT(huge, (big.size() + small.size()) * sizeof(float)) << "the 1 MiB buffer is not advised";
    } else {
      EXPECT_EQ(huge, 0u) << (on ? "no transparent huge pages on this kernel" : "memory.huge_pages: false");
    }
  }
}

TEST(HostMemory, UnlimitedByDefault) {
  Context context(make_settings(1));
  EXPECT_EQ(context.stats().memory.host_pools.at(0).limit_bytes, 0u);
  Buffer<char> big(context, std::size_t{8} << 20);
  EXPECT_EQ(big.size(), std::size_t{8} << 20);
}

constexpr const char* two_numa_nodes = "pack:1 numa:2 core:1 pu:1";  // worker 1 on node 1

TEST(HostMemory, BufferOptionsNumaNodeChoosesThePool) {
  Context context(settings_with({{"topology.synthetic", two_numa_nodes}}));
  ASSERT_EQ(context.stats().memory.host_pools.size(), 2u);
  BufferOptions options;
  options.numa_node = 1;
  Buffer<double> on_node_1(context, 4096, options);
  EXPECT_GE(in_use_on(context, 1), 4096 * sizeof(double));
  EXPECT_LT(in_use_on(context, 0), 4096 * sizeof(double));
}

TEST(HostMemory, PreferredPolicyChoosesThePool) {
  Context context(
      settings_with({{"topology.synthetic", two_numa_nodes}, {"memory.numa_policy", "preferred:1"}}));
  Buffer<double> buffer(context, 4096);
  EXPECT_GE(in_use_on(context, 1), 4096 * sizeof(double));
}

TEST(HostMemory, LocalPolicyUsesTheCreatingWorkersNode) {
  Context context(settings_with({{"topology.synthetic", two_numa_nodes}, {"memory.numa_policy", "local"}}));
  // From the application thread (no worker slot): node 0.
  Buffer<double> from_application(context, 4096);
  EXPECT_GE(in_use_on(context, 0), 4096 * sizeof(double));
  EXPECT_LT(in_use_on(context, 1), 4096 * sizeof(double));
  // From a task on each worker: that worker's node.
  std::vector<std::unique_ptr<Buffer<double>>> made(context.worker_count());
  TaskGroup group(context);
  for (unsigned i = 0; i < 64; ++i) {
    group.spawn([&context, &made] {
      const int worker = context.current_worker();
      if (worker > 0 && made[worker] == nullptr)
        made[worker] = std::make_unique<Buffer<double>>(context, 4096);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));  // let the other worker take some
    });
  }
  group.wait();
  ASSERT_NE(made.at(1), nullptr) << "worker 1 ran none of 64 tasks";
  EXPECT_EQ(context.stats().workers.at(1).numa_node, 1) << "the synthetic machine puts worker 1 on node 1";
  for (unsigned worker = 1; worker < made.size(); ++worker) {
    const int node = context.stats().workers.at(worker).numa_node;
    EXPECT_GE(in_use_on(context, static_cast<std::size_t>(node)), 4096 * sizeof(double));
  }
}

TEST(HostMemory, ContextDestructionFreesLiveBuffersData) {
  std::optional<Buffer<int>> survivor;
  {
    Context context(make_settings(1));
    survivor.emplace(context, 1000);
  }
  EXPECT_THROW((void)survivor->map_read(), Error)
      << "the handle fails cleanly; ASan checks the bytes were freed";
}

}  // namespace
}  // namespace nerve::testing
