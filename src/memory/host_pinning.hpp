// host_pinning.hpp — large host buffers page-locked on their first device transfer, so that DMA
// reads and writes them in place.
//
// A copy between pageable host memory and a device must go through page-locked (pinned) staging:
// a memcpy on a host thread per copy, which on a GPU link of 50 GB/s costs more than the DMA itself.
// Instead, the host copy of a large buffer (at least min_bytes, its own page-aligned block) is
// registered with the device's driver (cudaHostRegister) the first time a transfer touches it, and
// stays registered until the buffer's memory goes back to the pool; every later transfer of the
// buffer or of any slice of it is a plain asynchronous DMA. Registering is cheaper than staging even
// once: on an H200, 136 tiles of 8 MiB registered on their first upload factorised in 0.15 s, and in
// 0.49 s when each tile's first upload and download were staged instead (the memcpy into and out of
// staging runs on the engine's thread, ahead of its completions).
//
// The host node tracks its large allocations here (track/untrack); a device's memory node asks
// pinned_for_dma() before each host<->device copy with itself as the DmaRegistrar. A registration
// that fails (a locked-memory limit, a driver that refuses; the registrar logs why) is not retried
// for that allocation: its copies keep going through staging. When a registrar goes away (its device
// closes) it calls forget(), which unregisters everything it registered while the driver is there.
//
// Thread safety: every member may be called from any thread (one mutex, never held across a driver
// call except in forget(); a copy that finds its buffer being registered by another is staged).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

namespace nerve::detail {

// DmaRegistrar: one driver's way to page-lock host ranges for its devices' DMA. Registrations of the
// same domain() (one driver: its registrations are valid for every one of its devices) are shared.
class DmaRegistrar {
 public:
  virtual ~DmaRegistrar() = default;
  virtual const void* dma_domain() const noexcept = 0;
  // register_host(): page-lock [data, data + bytes); false when the driver refuses (logged by the caller).
  virtual bool register_host(void* data, std::size_t bytes) noexcept = 0;
  virtual void unregister_host(void* data) noexcept = 0;
};

struct HostPinningStats {
  std::uint64_t registrations = 0;  // allocations registered so far
  std::uint64_t failures = 0;       // registrations the driver refused
  std::size_t pinned_bytes = 0;     // registered now
  std::size_t pinned_allocations = 0;
};

class HostPinning {
 public:
  // Allocations of min_bytes and more are tracked (large ones have their own page-aligned block).
  static constexpr std::size_t min_bytes = std::size_t{1} << 20;

  HostPinning() = default;
  HostPinning(const HostPinning&) = delete;
  HostPinning& operator=(const HostPinning&) = delete;
  ~HostPinning();

  // track(): a buffer's host copy of `bytes` was allocated at `data` (ignored below min_bytes).
  void track(std::byte* data, std::size_t bytes);
  // untrack(): it is about to be freed: unregistered first if it was registered.
  void untrack(std::byte* data, std::size_t bytes) noexcept;

  // pinned_for_dma(): whether [data, data + bytes) may be DMA'd in place by `registrar`'s devices,
  // registering the whole allocation that holds it on first use. False for untracked memory (small
  // buffers, staging, user memory) and after a refused registration.
  bool pinned_for_dma(const std::byte* data, std::size_t bytes, DmaRegistrar& registrar);

  // forget(): `registrar` is going away: unregister what it registered (the memory stays tracked
  // and may be registered again by another registrar).
  void forget(const DmaRegistrar& registrar) noexcept;

  HostPinningStats stats() const;

 private:
  struct Allocation {
    std::size_t bytes = 0;
    DmaRegistrar* registrar = nullptr;  // who registered it, or null
    bool refused = false;               // a registration failed: never tried again
    bool registering = false;           // a copy is registering it now
  };

  mutable std::mutex mutex_;
  std::map<std::byte*, Allocation, std::greater<>> allocations_;  // by start, highest first
  std::atomic<std::size_t> tracked_{0};                           // allocations_.size(), lock-free
  std::uint64_t registrations_ = 0, failures_ = 0;
};

}  // namespace nerve::detail
