// driver.hpp — every CUDA runtime call the CUDA backend makes, behind one small interface.
//
// The backend's host-side logic (device memory pools, pinned staging, streams and their priorities,
// the event pool, peer copies, managed memory hints and prefetches, completion flags) never calls
// cudart itself: it calls a Driver. CudartDriver (cudart_driver.cpp) loads libcudart at run time
// and forwards; FakeDriver (fake_driver.hpp) simulates devices in host memory and records every call,
// so all of that logic is unit-tested on machines without a GPU (CI) — and under the sanitizers,
// since no CUDA code is involved. Handles are opaque pointers (a cudaStream_t, a cudaEvent_t).
//
// Errors: every call that can fail throws nerve::Error naming the call and the driver's error
// (ErrorCode::out_of_memory for allocations the device cannot satisfy, task_failed otherwise).
// Calls marked noexcept report nothing (releases during teardown).
//
// Thread safety: every member may be called from any thread, as cudart's own functions may. Calls
// that act on "the current device" in cudart take the device ordinal explicitly here; the real
// driver sets it for the call and then gives the calling thread its own current device back, so an
// application thread that drives a GPU itself finds its device unchanged after calling nerve. Only
// make_current() changes it for good (nerve's launcher threads, for user launchers).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace nerve::detail::cuda {

using Stream = void*;  // cudaStream_t
using Event = void*;   // cudaEvent_t

// What enter_device() found current on the calling thread, for leave_device() to put back.
struct SavedDevice {
  void* context = nullptr;  // the thread's CUDA context (nullptr: none)
  int device = -1;
  bool restore = false;  // enter_device() changed something
};

struct DeviceProperties {
  std::string name;
  std::uint64_t total_memory = 0;
  unsigned multiprocessors = 0;
  int major = 0, minor = 0;  // compute capability
  std::string pci_bus_id;    // "0000:65:00.0"
  bool managed_memory = false;
  bool concurrent_managed_access = false;  // cudaMemAdvise / prefetch act (Pascal and later, Linux)
  bool integrated = false;                 // shares physical memory with the host
};

enum class EventState { pending, complete, failed };

// Managed-memory advice (cudaMemAdvise); gpu.cache_hints sends these.
enum class Advice { read_mostly, preferred_location, accessed_by };

class Driver {
 public:
  virtual ~Driver() = default;

  // describe(): "cudart 13.0 (driver 13.0)" or "fake CUDA driver", for nerve-info and logs.
  virtual std::string describe() const = 0;
  // device_count(): the devices the runtime sees; 0 with `why_none` saying why (no driver, no
  // device, libcudart missing). Never throws.
  virtual int device_count(std::string& why_none) noexcept = 0;
  virtual DeviceProperties properties(int device) = 0;
  // make_current(): `device` becomes the calling thread's current device (cudaSetDevice), as user
  // launchers expect.
  virtual void make_current(int device) = 0;
  // enter_device() / leave_device(): `device` current for the calling thread in between, the
  // thread's own current device (or none) afterwards. DeviceScope pairs them.
  virtual SavedDevice enter_device(int device) = 0;
  virtual void leave_device(const SavedDevice& saved) noexcept = 0;
  // memory_info(): free and total bytes on `device` now (cudaMemGetInfo).
  virtual void memory_info(int device, std::size_t& free, std::size_t& total) = 0;

  // Device memory: cudaMalloc / cudaFree.
  virtual void* malloc_device(int device, std::size_t bytes) = 0;
  virtual void free_device(int device, void* pointer) noexcept = 0;
  // Stream-ordered allocation from the device's default memory pool (cudaMallocAsync/cudaFreeAsync);
  // the pool keeps freed memory (release threshold: unlimited) so steady state makes no OS call.
  virtual void* malloc_async(int device, std::size_t bytes, Stream stream) = 0;
  virtual void free_async(int device, void* pointer, Stream stream) noexcept = 0;
  // Managed memory: cudaMallocManaged(cudaMemAttachGlobal) / cudaFree.
  virtual void* malloc_managed(int device, std::size_t bytes) = 0;
  virtual void free_managed(int device, void* pointer) noexcept = 0;
  // Pinned host memory: cudaHostAlloc(portable | mapped) / cudaFreeHost; device_pointer_of() is
  // the device's address of mapped pinned memory (cudaHostGetDevicePointer).
  virtual void* host_alloc(std::size_t bytes) = 0;
  virtual void host_free(void* pointer) noexcept = 0;
  virtual void* device_pointer_of(void* host_pointer) = 0;
  // Page-locking memory the program allocated: cudaHostRegister(portable) / cudaHostUnregister.
  virtual void host_register(void* pointer, std::size_t bytes) = 0;
  virtual void host_unregister(void* pointer) noexcept = 0;

  // Streams: non-blocking, with a priority (lower numbers are higher priority, as in CUDA).
  virtual void priority_range(int device, int& least, int& greatest) = 0;
  virtual Stream create_stream(int device, int priority) = 0;
  virtual void destroy_stream(int device, Stream stream) noexcept = 0;
  virtual void synchronize_stream(Stream stream) = 0;

  // Events: created with cudaEventDisableTiming (cheapest to record and query).
  virtual Event create_event(int device) = 0;
  virtual void destroy_event(Event event) noexcept = 0;
  virtual void record_event(Event event, Stream stream) = 0;
  virtual EventState query_event(Event event) noexcept = 0;
  virtual void synchronize_event(Event event) = 0;
  virtual void stream_wait_event(Stream stream, Event event) = 0;

  // Copies (cudaMemcpyAsync with cudaMemcpyDefault: unified addressing names the direction).
  virtual void copy_async(void* destination, const void* source, std::size_t bytes, Stream stream) = 0;
  // copy_peer_async(): device to device without host staging (cudaMemcpyPeerAsync).
  virtual void copy_peer_async(void* destination, int destination_device, const void* source,
                               int source_device, std::size_t bytes, Stream stream) = 0;
  virtual bool can_access_peer(int device, int peer) noexcept = 0;
  // enable_peer_access(): lets `device` reach `peer`'s memory (one direction; idempotent). False when
  // the driver refused (logged once; the pair is not asked again): copies between them are staged.
  virtual bool enable_peer_access(int device, int peer) noexcept = 0;

  // Managed memory hints and prefetches.
  virtual void advise(const void* pointer, std::size_t bytes, Advice advice, int device) = 0;
  virtual void prefetch_async(const void* pointer, std::size_t bytes, int device, Stream stream) = 0;

  // write_flag_async(): the GPU writes `value` to `flag` (pinned, mapped host memory) once the work
  // before it in `stream` is done (cuStreamWriteValue32, or a host function where the device cannot).
  virtual void write_flag_async(std::uint32_t* flag, std::uint32_t value, Stream stream) = 0;

  // check_launch(): after a user launcher ran, report the error its launch left, if any
  // (cudaGetLastError); throws Error(task_failed).
  virtual void check_launch(int device) = 0;
  // clear_launch_error(): drop the error a failed launch left pending (cudaGetLastError), so that it
  // is not reported by the next, unrelated launch checked on this thread.
  virtual void clear_launch_error(int device) noexcept = 0;
};

// DeviceScope: `device` is the calling thread's current device while it lives.
class DeviceScope {
 public:
  DeviceScope(Driver& driver, int device) : driver_(driver), saved_(driver.enter_device(device)) {}
  ~DeviceScope() { driver_.leave_device(saved_); }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  Driver& driver_;
  const SavedDevice saved_;
};

// QuietDeviceScope: a DeviceScope for paths that must not throw (freeing, destroying). When `device`
// cannot be made current, the calls in it run in the thread's own context, as they would without it.
class QuietDeviceScope {
 public:
  QuietDeviceScope(Driver& driver, int device) noexcept : driver_(driver) {
    try {
      saved_ = driver.enter_device(device);
      entered_ = true;
    } catch (...) {  // the device stays as it was; nothing to give back
    }
  }
  ~QuietDeviceScope() {
    if (entered_) driver_.leave_device(saved_);
  }
  QuietDeviceScope(const QuietDeviceScope&) = delete;
  QuietDeviceScope& operator=(const QuietDeviceScope&) = delete;

 private:
  Driver& driver_;
  SavedDevice saved_;
  bool entered_ = false;
};

}  // namespace nerve::detail::cuda
