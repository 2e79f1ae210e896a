// fake_driver.hpp — a CUDA driver simulated in host memory, for tests on machines without a GPU.
//
// Devices are numbered 0..device_count-1; their "device memory" is ordinary host memory (so copies
// and user launchers really move and compute bytes), with a capacity per device. Streams run their
// work at once (the default) or hold it until run_pending() (hold_work = true), which lets a test see
// operations in flight, completion flags still unset and events still pending. Every call is counted
// (calls("create_event")), and the calls whose arguments matter — advise, prefetch, copies, stream
// creation — are recorded in order (records()). Tests can make a call fail (fail_next_call), leave a
// launch error pending (fail_next_launch), and see each thread's current device (current_device).
//
// Thread safety: every member may be called from any thread (one mutex).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "backend/cuda/driver.hpp"

namespace nerve::detail::cuda {

struct FakeOptions {
  int devices = 2;
  std::size_t memory_bytes = std::size_t{256} << 20;  // per device
  bool peer_access = true;                            // every pair of devices can access each other
  bool managed_memory = true;
  bool hold_work = false;  // streams keep their work until run_pending()
  int least_priority = 0, greatest_priority = -5;
  std::string why_none = "no CUDA-capable device is detected (fake)";  // when devices == 0
  std::string pci_bus_id;             // device 0's PCI address ("": none, locality unknown)
  bool refuse_host_register = false;  // host_register() fails (a locked-memory limit, say)
  bool refuse_peer_enable = false;    // enable_peer_access() fails (cudaDeviceEnablePeerAccess)
};

struct FakeRecord {
  std::string call;  // "advise", "prefetch", "copy", "copy_peer", "create_stream", "malloc", ...
  const void* pointer = nullptr;
  std::size_t bytes = 0;
  int device = -1;
  Stream stream = nullptr;
  int detail = 0;  // advise: the Advice; create_stream: the priority; copy_peer: the source device;
                   // host_alloc: the calling thread's current device, whose context owns the block
};

class FakeDriver final : public Driver {
 public:
  explicit FakeDriver(FakeOptions options = {});
  ~FakeDriver() override;

  std::string describe() const override { return "fake CUDA driver"; }
  int device_count(std::string& why_none) noexcept override;
  DeviceProperties properties(int device) override;
  void make_current(int device) override;
  SavedDevice enter_device(int device) override;
  void leave_device(const SavedDevice& saved) noexcept override;
  void memory_info(int device, std::size_t& free, std::size_t& total) override;
  void* malloc_device(int device, std::size_t bytes) override;
  void free_device(int device, void* pointer) noexcept override;
  void* malloc_async(int device, std::size_t bytes, Stream stream) override;
  void free_async(int device, void* pointer, Stream stream) noexcept override;
  void* malloc_managed(int device, std::size_t bytes) override;
  void free_managed(int device, void* pointer) noexcept override;
  void* host_alloc(std::size_t bytes) override;
  void host_free(void* pointer) noexcept override;
  void* device_pointer_of(void* host_pointer) override { return host_pointer; }
  void host_register(void* pointer, std::size_t bytes) override;
  void host_unregister(void* pointer) noexcept override;
  void priority_range(int device, int& least, int& greatest) override;
  Stream create_stream(int device, int priority) override;
  void destroy_stream(int device, Stream stream) noexcept override;
  void synchronize_stream(Stream stream) override;
  Event create_event(int device) override;
  void destroy_event(Event event) noexcept override;
  void record_event(Event event, Stream stream) override;
  EventState query_event(Event event) noexcept override;
  void synchronize_event(Event event) override;
  void stream_wait_event(Stream stream, Event event) override;
  void copy_async(void* destination, const void* source, std::size_t bytes, Stream stream) override;
  void copy_peer_async(void* destination, int destination_device, const void* source, int source_device,
                       std::size_t bytes, Stream stream) override;
  bool can_access_peer(int device, int peer) noexcept override;
  bool enable_peer_access(int device, int peer) noexcept override;
  void advise(const void* pointer, std::size_t bytes, Advice advice, int device) override;
  void prefetch_async(const void* pointer, std::size_t bytes, int device, Stream stream) override;
  void write_flag_async(std::uint32_t* flag, std::uint32_t value, Stream stream) override;
  void check_launch(int device) override;
  void clear_launch_error(int device) noexcept override;

  // run_pending(): with hold_work, run every stream's held work (in stream order; a stream waiting
  // for an event not yet complete waits for the others), or at most `limit` operations of it.
  // Returns the operations run.
  std::size_t run_pending(std::size_t limit = static_cast<std::size_t>(-1));
  // held_work(): the operations held on every stream, not yet run.
  std::size_t held_work() const;
  // hold_stream(): `stream` alone keeps its work (events recorded on it stay pending) until
  // release_stream(), which runs it, or its destruction; run_pending() leaves it held.
  void hold_stream(Stream stream);
  void release_stream();
  // set_free_bytes(): pretend only this much of `device`'s memory is free (managed memory tests).
  void set_free_bytes(int device, std::size_t bytes);
  // fail_next_launch(): a launch error is left pending (as a failed kernel launch leaves one in
  // cudaGetLastError): the next check_launch() reports it, clear_launch_error() drops it.
  void fail_next_launch();
  // fail_next_call(): the next call of that name ("synchronize_stream", "record_event", "copy", ...;
  // one that may throw) throws Error(task_failed), once.
  void fail_next_call(const std::string& name);
  // current_device(): the calling thread's current device (make_current), -1 if it never had one.
  int current_device() const;

  std::uint64_t calls(const std::string& name) const;
  std::vector<FakeRecord> records() const;
  std::vector<FakeRecord> records(const std::string& call) const;
  std::size_t live_device_allocations() const;  // device, managed and pinned blocks not freed
  std::size_t live_streams() const;
  std::size_t live_events() const;
  // registered_host_bytes(): host memory host_register()ed and not unregistered (an unregister of
  // memory that is not registered counts as the call "host_unregister_unknown").
  std::size_t registered_host_bytes() const;

 private:
  struct FakeStream;
  struct FakeEvent;
  using Work = std::function<bool()>;  // false: cannot run yet (waits for an event)

  void count(const std::string& name);
  void record(FakeRecord entry);
  void enqueue(Stream stream, Work work);  // with mutex_ held
  void check_device(int device) const;
  void* allocate(int device, std::size_t bytes, const char* what);
  void release(void* pointer) noexcept;
  std::size_t run_pending_locked(std::size_t limit = static_cast<std::size_t>(-1));
  // implicit_context(): as the CUDA runtime does for a call that needs a context on a thread with no
  // current device, makes device 0 current there (creating its context); the calling thread's device.
  int implicit_context();

  const FakeOptions options_;
  mutable std::mutex mutex_;
  std::map<std::string, std::uint64_t> calls_;
  std::vector<FakeRecord> records_;
  std::map<void*, std::pair<int, std::size_t>> blocks_;  // pointer -> device (-1: host), bytes
  std::map<void*, std::size_t> registered_;              // host_register()ed memory -> bytes
  std::vector<std::size_t> used_;
  std::vector<std::size_t> free_override_;  // SIZE_MAX: none
  std::map<FakeStream*, std::unique_ptr<FakeStream>> streams_;
  // Shared with the stream work that records or waits for an event: as in CUDA, an event may be
  // destroyed while such work is queued (an engine's event pool goes before its streams, whose
  // destruction runs what is left), and that work still completes.
  std::map<FakeEvent*, std::shared_ptr<FakeEvent>> events_;
  FakeStream* held_stream_ = nullptr;  // hold_stream()
  bool fail_next_launch_ = false;
  std::multiset<std::string> failing_;      // fail_next_call()
  std::map<std::thread::id, int> current_;  // make_current(), per thread
};

}  // namespace nerve::detail::cuda
