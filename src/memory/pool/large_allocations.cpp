#include "memory/pool/large_allocations.hpp"

#include "util/log.hpp"

namespace nerve::memory {

std::size_t LargeAllocations::rounded_size(std::size_t bytes) noexcept {
  const std::size_t page = page_size();
  if (bytes > SIZE_MAX - page) return SIZE_MAX / page * page;  // saturate: such a request fails anyway
  return (bytes + page - 1) / page * page;
}

LargeAllocations::~LargeAllocations() {
  release_cached();
  std::lock_guard lock(mutex_);
  for (const auto& [block, live] : live_) budget_.release(block, live.bytes, live.charged);
  live_.clear();
}

namespace {
constexpr std::size_t colour_threshold = std::size_t{1} << 20;
}  // namespace

void* LargeAllocations::try_allocate(std::size_t bytes, bool* from_cache, std::exception_ptr& refusal) {
  *from_cache = false;
  // Rounding and colour padding below must not wrap a request no node can hold.
  if (bytes > NodeBudget::max_block_bytes) return nullptr;
  const std::size_t wanted = rounded_size(bytes);
  {
    std::lock_guard lock(mutex_);
    ++allocations_;
    // Best fit among cached blocks no more than 1/8 larger than needed, whose charge covers the
    // request (a block keeps the charge it was made with: its padding never counts).
    std::size_t best = cache_.size();
    for (std::size_t i = 0; i < cache_.size(); ++i) {
      const std::size_t size = cache_[i].bytes;
      if (cache_[i].charged >= wanted && size - wanted <= wanted / 8 &&
          (best == cache_.size() || size < cache_[best].bytes)) {
        best = i;
      }
    }
    if (best != cache_.size()) {
      const CachedBlock hit = cache_[best];
      live_.emplace(hit.block, LiveBlock{hit.bytes, hit.charged, wanted});  // first: it may throw
      cache_.erase(cache_.begin() + static_cast<std::ptrdiff_t>(best));
      cached_bytes_ -= hit.bytes;
      live_bytes_ += hit.bytes;
      ++from_cache_;
      *from_cache = true;
      return hit.block;
    }
  }
  *from_cache = false;
  // Colouring: the node places consecutive blocks next to each other, so equal power-of-two sizes
  // would put the same element of different buffers exactly 2^k bytes apart — the same cache sets
  // and DRAM banks for every stream of c[i] = a[i] + b[i] (measured: half the bandwidth of arrays
  // one page apart). Big blocks get 1..8 pages of padding, rotating, to break the pattern. The
  // padding is a speed hint: it does not count against the node's limit (only `wanted` is charged),
  // and where the padded block cannot be had the exact size is tried, so whether a request fits
  // never depends on the colour it drew, nor on other blocks' colours.
  std::size_t real = wanted;
  if (wanted >= colour_threshold) {
    std::lock_guard lock(mutex_);
    real += (next_color_++ % 8 + 1) * alignment_;
  }
  void* block = budget_.try_acquire(real, alignment_, wanted, refusal);
  if (block == nullptr && real != wanted) {
    real = wanted;
    block = budget_.try_acquire(real, alignment_, wanted, refusal);
  }
  if (block != nullptr) {
    try {
      std::lock_guard lock(mutex_);
      live_.emplace(block, LiveBlock{real, wanted, wanted});
      live_bytes_ += real;
      return block;
    } catch (...) {
      budget_.release(block, real, wanted);
      uncount_request();
      throw;
    }
  }
  uncount_request();
  return nullptr;
}

void LargeAllocations::uncount_request() noexcept {
  std::lock_guard lock(mutex_);
  --allocations_;  // the pool retries or reports; count the request once
}

void LargeAllocations::free(void* block, std::size_t bytes) noexcept {
  // Blocks leaving the cache are released after the mutex; room for them is reserved up front (at
  // most every cached block plus one), so nothing below can throw. Without that room, no caching.
  std::vector<CachedBlock> evicted;
  bool may_cache = max_cached_blocks_ > 0;
  if (may_cache) {
    try {
      evicted.reserve(max_cached_blocks_ + 1);
    } catch (...) {
      may_cache = false;
    }
  }
  std::size_t size = 0;
  std::size_t charged = 0;
  {
    std::lock_guard lock(mutex_);
    const auto it = live_.find(block);
    if (it == live_.end()) {
      log::error("memory pool: deallocate({}, {}) of a block this pool does not have live; ignored", block,
                 bytes);
      return;
    }
    // Freeing it anyway would hand the caller's block to the next request of its size while the
    // caller still uses it (its real size is known here, so nothing else would go wrong).
    if (const std::size_t requested = it->second.requested; rounded_size(bytes) != requested) {
      log::error(
          "memory pool: deallocate({}, {}) of a block allocated for {} to {} bytes: a wrong size; ignored",
          block, bytes, requested - page_size() + 1, requested);
      return;
    }
    size = it->second.bytes;
    charged = it->second.charged;
    live_.erase(it);
    live_bytes_ -= size;
    if (may_cache && size <= max_cached_bytes_) {
      try {
        cache_.push_back({block, size, charged});
        cached_bytes_ += size;
        block = nullptr;
      } catch (...) {  // no memory for the cache entry: release the block instead
      }
      while (cache_.size() > max_cached_blocks_ || cached_bytes_ > max_cached_bytes_) {
        evicted.push_back(cache_.front());
        cached_bytes_ -= cache_.front().bytes;
        cache_.erase(cache_.begin());
      }
    }
  }
  if (block != nullptr) budget_.release(block, size, charged);
  for (const CachedBlock& old : evicted) budget_.release(old.block, old.bytes, old.charged);
}

std::size_t LargeAllocations::release_cached() noexcept {
  std::vector<CachedBlock> cached;
  {
    std::lock_guard lock(mutex_);
    cached.swap(cache_);
    cached_bytes_ = 0;
  }
  std::size_t released = 0;
  for (const CachedBlock& old : cached) {
    budget_.release(old.block, old.bytes, old.charged);
    released += old.bytes;
  }
  return released;
}

LargeAllocations::Stats LargeAllocations::stats() const {
  std::lock_guard lock(mutex_);
  return {allocations_, from_cache_, live_bytes_, cached_bytes_};
}

}  // namespace nerve::memory
