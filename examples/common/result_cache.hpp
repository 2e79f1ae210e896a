// result_cache.hpp — memoising task results: a thread-safe, bounded cache from (kernel, input
// content) to a task's output, so that a repeated identical request skips the work. Header-only,
// standard C++20, no dependency on nerve: copy it into your program.
//
//   nerve_examples::ResultCache<std::vector<float>> cache(10'000);
//   const auto key = nerve_examples::CacheKey::of(model_id, std::as_bytes(std::span(input)));
//   if (auto hit = cache.find(key)) return *hit;            // counted as a hit, time saved recorded
//   auto output = compute(input);                           // a miss: do the work (e.g. in a task)
//   cache.insert(key, output, elapsed);                     // elapsed: what a later hit saves
//
// Keys: a 64-bit kernel id (which computation, e.g. a hash of the model's weights and version) and
// a 128-bit hash of the input bytes. Two inputs that differ can only share an entry through a
// 128-bit hash collision (probability ~ n² / 2^129 for n distinct inputs: nil in practice); a
// program that cannot accept even that can keep the input in Value and compare it on a hit.
// What to cache: pure functions of their inputs only. The cache never invalidates: a new model is a
// new kernel id.
//
// Thread safety: every member may be called from any thread. The cache is split into shards, each
// behind its own mutex, so concurrent lookups of different keys rarely contend; find() copies the
// value out under the shard's lock (Value should be cheap to copy, or a shared_ptr).
// Eviction: least recently used, per shard (capacity / shards entries each).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <list>
#include <mutex>
#include <optional>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

namespace nerve_examples {

// content_hash() hashes bytes to 64 bits, 8 bytes per step (a multiply-xorshift mix in the style of
// wyhash / SplitMix64: fast, well distributed, not cryptographic). Different seeds give independent
// hashes; CacheKey uses two.
inline std::uint64_t content_hash(std::span<const std::byte> bytes, std::uint64_t seed) {
  auto mix = [](std::uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  };
  std::uint64_t h = mix(seed ^ (bytes.size() * 0x9E3779B97F4A7C15ull));
  std::size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) {
    std::uint64_t word;
    std::memcpy(&word, bytes.data() + i, 8);
    h = mix(h ^ word) + 0x9E3779B97F4A7C15ull;
  }
  std::uint64_t tail = 0;
  std::memcpy(&tail, bytes.data() + i, bytes.size() - i);
  return mix(h ^ tail ^ (bytes.size() - i));
}

struct CacheKey {
  std::uint64_t kernel = 0;
  std::uint64_t input_low = 0, input_high = 0;

  static CacheKey of(std::uint64_t kernel, std::span<const std::byte> input) {
    return {kernel, content_hash(input, 0x5EED0001), content_hash(input, 0x5EED0002)};
  }
  friend bool operator==(const CacheKey&, const CacheKey&) = default;
};

struct CacheKeyHash {
  std::size_t operator()(const CacheKey& key) const noexcept {
    return static_cast<std::size_t>(key.input_low ^ (key.kernel * 0x9E3779B97F4A7C15ull));
  }
};

template <class Value>
class ResultCache {
 public:
  struct Stats {
    std::uint64_t hits = 0, misses = 0, inserts = 0, evictions = 0;
    std::chrono::nanoseconds saved{0};  // sum over hits of the compute time the entry recorded
    double hit_rate() const { return hits + misses == 0 ? 0.0 : double(hits) / double(hits + misses); }
  };

  explicit ResultCache(std::size_t capacity, std::size_t shard_count = 16)
      : shards_(shard_count == 0 ? 1 : shard_count),
        per_shard_(std::max<std::size_t>(1, capacity / (shard_count == 0 ? 1 : shard_count))) {}

  // find() returns the cached value and counts a hit (adding the entry's compute time to the time
  // saved), or nothing and counts a miss.
  std::optional<Value> find(const CacheKey& key) {
    Shard& shard = shard_of(key);
    std::lock_guard lock(shard.mutex);
    auto found = shard.index.find(key);
    if (found == shard.index.end()) {
      misses_.fetch_add(1, std::memory_order_relaxed);
      return std::nullopt;
    }
    shard.order.splice(shard.order.begin(), shard.order, found->second);  // most recently used
    hits_.fetch_add(1, std::memory_order_relaxed);
    saved_ns_.fetch_add(found->second->compute.count(), std::memory_order_relaxed);
    return found->second->value;
  }

  // insert() stores (or refreshes) the value computed in `compute` time; evicts the least recently
  // used entry of the shard when it is full.
  void insert(const CacheKey& key, Value value, std::chrono::nanoseconds compute) {
    Shard& shard = shard_of(key);
    std::lock_guard lock(shard.mutex);
    inserts_.fetch_add(1, std::memory_order_relaxed);
    if (auto found = shard.index.find(key); found != shard.index.end()) {
      found->second->value = std::move(value);
      found->second->compute = compute;
      shard.order.splice(shard.order.begin(), shard.order, found->second);
      return;
    }
    if (shard.index.size() >= per_shard_) {
      shard.index.erase(shard.order.back().key);
      shard.order.pop_back();
      evictions_.fetch_add(1, std::memory_order_relaxed);
    }
    shard.order.push_front(Entry{key, std::move(value), compute});
    shard.index.emplace(key, shard.order.begin());
  }

  // get_or_compute() is find() then, on a miss, compute() timed and inserted.
  template <class Compute>
  Value get_or_compute(const CacheKey& key, Compute&& compute) {
    if (auto hit = find(key)) return *std::move(hit);
    const auto start = std::chrono::steady_clock::now();
    Value value = compute();
    insert(key, value, std::chrono::steady_clock::now() - start);
    return value;
  }

  Stats stats() const {
    Stats stats;
    stats.hits = hits_.load(std::memory_order_relaxed);
    stats.misses = misses_.load(std::memory_order_relaxed);
    stats.inserts = inserts_.load(std::memory_order_relaxed);
    stats.evictions = evictions_.load(std::memory_order_relaxed);
    stats.saved = std::chrono::nanoseconds(saved_ns_.load(std::memory_order_relaxed));
    return stats;
  }

  std::size_t size() const {
    std::size_t total = 0;
    for (Shard& shard : shards_) {
      std::lock_guard lock(shard.mutex);
      total += shard.index.size();
    }
    return total;
  }

  // clear() drops every entry and zeroes the statistics.
  void clear() {
    for (Shard& shard : shards_) {
      std::lock_guard lock(shard.mutex);
      shard.index.clear();
      shard.order.clear();
    }
    hits_ = misses_ = inserts_ = evictions_ = 0;
    saved_ns_ = 0;
  }

 private:
  struct Entry {
    CacheKey key;
    Value value;
    std::chrono::nanoseconds compute;
  };
  struct Shard {
    std::mutex mutex;
    std::list<Entry> order;  // front: most recently used
    std::unordered_map<CacheKey, typename std::list<Entry>::iterator, CacheKeyHash> index;
  };
  Shard& shard_of(const CacheKey& key) { return shards_[key.input_high % shards_.size()]; }

  mutable std::vector<Shard> shards_;
  std::size_t per_shard_;
  std::atomic<std::uint64_t> hits_{0}, misses_{0}, inserts_{0}, evictions_{0};
  std::atomic<std::int64_t> saved_ns_{0};
};

}  // namespace nerve_examples
