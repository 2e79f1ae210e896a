// cudart_driver.cpp — the Driver over the real CUDA runtime, loaded at run time.
//
// libcudart is opened with dlopen (the soname of the toolkit nerve was built with, NERVE_CUDART_SONAME)
// rather than linked: libnerve then has no CUDA dependency in its link interface (the installed
// package and programs without a GPU need nothing from CUDA), a machine without the runtime or the
// driver gets a clear "no device" reason instead of a loader error, and the sanitizer builds never
// instrument around it. Programs that launch their own kernels link the same libcudart (shared), so
// one runtime serves both. The headers give every function's exact type (decltype), so a signature
// change in a new toolkit is a compile error here, not a crash.
//
// Completion flags are written with the driver's cuStreamWriteValue32 (found through
// cudaGetDriverEntryPointByVersion; no link to libcuda either), which writes in stream order without
// a kernel; where the device refuses stream memory operations, a host function writes the flag.
// Pinned memory is allocated mapped and portable; with unified addressing (every 64-bit platform CUDA
// supports) its host address is its device address.
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>

#include <dlfcn.h>

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "nerve/error.hpp"

#include "backend/cuda/backend.hpp"
#include "backend/cuda/driver.hpp"
#include "util/log.hpp"

#ifndef NERVE_CUDART_SONAME
#define NERVE_CUDART_SONAME "libcudart.so"
#endif

namespace nerve::detail::cuda {
namespace {

// clang-format off: one function per line (clang-format does not settle on a layout for this macro)
#define NERVE_CUDART_FUNCTIONS(X)     \
  X(cudaGetDeviceCount)               \
  X(cudaGetErrorString)               \
  X(cudaGetErrorName)                 \
  X(cudaGetLastError)                 \
  X(cudaGetDeviceProperties)          \
  X(cudaSetDevice)                    \
  X(cudaGetDevice)                    \
  X(cudaRuntimeGetVersion)            \
  X(cudaDriverGetVersion)             \
  X(cudaMemGetInfo)                   \
  X(cudaMalloc)                       \
  X(cudaFree)                         \
  X(cudaMallocAsync)                  \
  X(cudaFreeAsync)                    \
  X(cudaDeviceGetDefaultMemPool)      \
  X(cudaMemPoolSetAttribute)          \
  X(cudaMallocManaged)                \
  X(cudaHostAlloc)                    \
  X(cudaFreeHost)                     \
  X(cudaHostGetDevicePointer)         \
  X(cudaHostRegister)                 \
  X(cudaHostUnregister)               \
  X(cudaDeviceGetStreamPriorityRange) \
  X(cudaStreamCreateWithPriority)     \
  X(cudaStreamDestroy)                \
  X(cudaStreamSynchronize)            \
  X(cudaEventCreateWithFlags)         \
  X(cudaEventDestroy)                 \
  X(cudaEventRecord)                  \
  X(cudaEventQuery)                   \
  X(cudaEventSynchronize)             \
  X(cudaStreamWaitEvent)              \
  X(cudaMemcpyAsync)                  \
  X(cudaMemcpyPeerAsync)              \
  X(cudaDeviceCanAccessPeer)          \
  X(cudaDeviceEnablePeerAccess)       \
  X(cudaMemAdvise)                    \
  X(cudaMemPrefetchAsync)             \
  X(cudaLaunchHostFunc)               \
  X(cudaGetDriverEntryPointByVersion)
// clang-format on

using WriteValue32 = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

class CudartDriver final : public Driver {
 public:
  CudartDriver() {
    library_ = ::dlopen(NERVE_CUDART_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (library_ == nullptr) {
      const char* error = ::dlerror();
      load_error_ = fmt::format("cannot load {}: {}", NERVE_CUDART_SONAME, error != nullptr ? error : "?");
      return;
    }
#define NERVE_LOAD(name)                                                          \
  name##_ = reinterpret_cast<decltype(&::name)>(::dlsym(library_, #name));        \
  if (name##_ == nullptr && load_error_.empty()) {                                \
    load_error_ = fmt::format("{} has no symbol {}", NERVE_CUDART_SONAME, #name); \
  }
    NERVE_CUDART_FUNCTIONS(NERVE_LOAD)
#undef NERVE_LOAD
  }
  ~CudartDriver() override = default;  // libcudart stays loaded: its own teardown runs at exit

  std::string describe() const override {
    if (!load_error_.empty()) return fmt::format("cudart ({})", load_error_);
    int runtime = 0, driver = 0;
    cudaRuntimeGetVersion_(&runtime);
    cudaDriverGetVersion_(&driver);
    return fmt::format(
        "cudart {}.{} (driver {})", runtime / 1000, runtime % 1000 / 10,
        driver == 0 ? std::string("none") : fmt::format("{}.{}", driver / 1000, driver % 1000 / 10));
  }

  int device_count(std::string& why_none) noexcept override {
    if (!load_error_.empty()) {
      why_none = load_error_;
      return 0;
    }
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount_(&count);
    if (status != cudaSuccess) {
      why_none =
          fmt::format("cudaGetDeviceCount: {} ({})", cudaGetErrorString_(status), cudaGetErrorName_(status));
      cudaGetLastError_();
      return 0;
    }
    if (count == 0) why_none = "the CUDA runtime reports no device";
    return count;
  }

  DeviceProperties properties(int device) override {
    cudaDeviceProp prop{};
    check(cudaGetDeviceProperties_(&prop, device), "cudaGetDeviceProperties");
    DeviceProperties p;
    p.name = prop.name;
    p.total_memory = prop.totalGlobalMem;
    p.multiprocessors = static_cast<unsigned>(prop.multiProcessorCount);
    p.major = prop.major;
    p.minor = prop.minor;
    p.pci_bus_id = fmt::format("{:04x}:{:02x}:{:02x}.0", prop.pciDomainID, prop.pciBusID, prop.pciDeviceID);
    p.managed_memory = prop.managedMemory != 0;
    p.concurrent_managed_access = prop.concurrentManagedAccess != 0;
    p.integrated = prop.integrated != 0;
    return p;
  }

  void make_current(int device) override { check(cudaSetDevice_(device), "cudaSetDevice"); }

  SavedDevice enter_device(int device) override {
    SavedDevice saved;
    check(enter(device, saved), "cudaSetDevice");
    return saved;
  }
  void leave_device(const SavedDevice& saved) noexcept override {
    if (!saved.restore) return;
    // The thread's own context exactly (none, too: cudaSetDevice back to device 0 would create device
    // 0's context on a thread that never used CUDA); its device where the driver API is not reachable.
    const ContextCalls& calls = context_calls();
    if (saved.device < 0 && calls.set != nullptr) {
      if (calls.set(static_cast<CUcontext>(saved.context)) == CUDA_SUCCESS) return;
    } else if (saved.device >= 0 && cudaSetDevice_(saved.device) == cudaSuccess) {
      return;
    }
    cudaGetLastError_();
    log::warn("CUDA: could not give a thread its current device back");
  }

  void memory_info(int device, std::size_t& free, std::size_t& total) override {
    const DeviceScope scope(*this, device);
    check(cudaMemGetInfo_(&free, &total), "cudaMemGetInfo");
  }

  void* malloc_device(int device, std::size_t bytes) override {
    const DeviceScope scope(*this, device);
    void* pointer = nullptr;
    check(cudaMalloc_(&pointer, bytes), "cudaMalloc");
    return pointer;
  }
  void free_device(int device, void* pointer) noexcept override {
    SavedDevice saved;
    const bool entered = enter(device, saved) == cudaSuccess;
    cudaFree_(pointer);
    if (entered) leave_device(saved);
  }

  void* malloc_async(int device, std::size_t bytes, Stream stream) override {
    const DeviceScope scope(*this, device);
    keep_pool_memory(device);
    void* pointer = nullptr;
    check(cudaMallocAsync_(&pointer, bytes, static_cast<cudaStream_t>(stream)), "cudaMallocAsync");
    return pointer;
  }
  void free_async(int device, void* pointer, Stream stream) noexcept override {
    SavedDevice saved;
    const bool entered = enter(device, saved) == cudaSuccess;
    cudaFreeAsync_(pointer, static_cast<cudaStream_t>(stream));
    if (entered) leave_device(saved);
  }

  void* malloc_managed(int device, std::size_t bytes) override {
    const DeviceScope scope(*this, device);
    void* pointer = nullptr;
    check(cudaMallocManaged_(&pointer, bytes, cudaMemAttachGlobal), "cudaMallocManaged");
    return pointer;
  }
  void free_managed(int device, void* pointer) noexcept override { free_device(device, pointer); }

  void* host_alloc(std::size_t bytes) override {
    void* pointer = nullptr;
    check(cudaHostAlloc_(&pointer, bytes, cudaHostAllocPortable | cudaHostAllocMapped), "cudaHostAlloc");
    return pointer;
  }
  void host_free(void* pointer) noexcept override { cudaFreeHost_(pointer); }
  void host_register(void* pointer, std::size_t bytes) override {
    check(cudaHostRegister_(pointer, bytes, cudaHostRegisterPortable), "cudaHostRegister");
  }
  void host_unregister(void* pointer) noexcept override {
    if (const cudaError_t status = cudaHostUnregister_(pointer); status != cudaSuccess) {
      (void)cudaGetLastError_();  // not left for this thread's next launch check to report
      log::warn("cudaHostUnregister: {}", cudaGetErrorString_(status));
    }
  }
  void* device_pointer_of(void* host_pointer) override {
    void* device = nullptr;
    check(cudaHostGetDevicePointer_(&device, host_pointer, 0), "cudaHostGetDevicePointer");
    return device;
  }

  void priority_range(int device, int& least, int& greatest) override {
    const DeviceScope scope(*this, device);
    check(cudaDeviceGetStreamPriorityRange_(&least, &greatest), "cudaDeviceGetStreamPriorityRange");
  }
  Stream create_stream(int device, int priority) override {
    const DeviceScope scope(*this, device);
    cudaStream_t stream = nullptr;
    check(cudaStreamCreateWithPriority_(&stream, cudaStreamNonBlocking, priority),
          "cudaStreamCreateWithPriority");
    return stream;
  }
  void destroy_stream(int device, Stream stream) noexcept override {
    SavedDevice saved;
    const bool entered = enter(device, saved) == cudaSuccess;
    cudaStreamDestroy_(static_cast<cudaStream_t>(stream));
    if (entered) leave_device(saved);
  }
  void synchronize_stream(Stream stream) override {
    check(cudaStreamSynchronize_(static_cast<cudaStream_t>(stream)), "cudaStreamSynchronize");
  }

  Event create_event(int device) override {
    const DeviceScope scope(*this, device);
    cudaEvent_t event = nullptr;
    check(cudaEventCreateWithFlags_(&event, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    return event;
  }
  void destroy_event(Event event) noexcept override { cudaEventDestroy_(static_cast<cudaEvent_t>(event)); }
  void record_event(Event event, Stream stream) override {
    check(cudaEventRecord_(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream)),
          "cudaEventRecord");
  }
  EventState query_event(Event event) noexcept override {
    const cudaError_t status = cudaEventQuery_(static_cast<cudaEvent_t>(event));
    if (status == cudaSuccess) return EventState::complete;
    if (status == cudaErrorNotReady) return EventState::pending;
    return EventState::failed;
  }
  void synchronize_event(Event event) override {
    check(cudaEventSynchronize_(static_cast<cudaEvent_t>(event)), "cudaEventSynchronize");
  }
  void stream_wait_event(Stream stream, Event event) override {
    check(cudaStreamWaitEvent_(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(event), 0),
          "cudaStreamWaitEvent");
  }

  void copy_async(void* destination, const void* source, std::size_t bytes, Stream stream) override {
    check(cudaMemcpyAsync_(destination, source, bytes, cudaMemcpyDefault, static_cast<cudaStream_t>(stream)),
          "cudaMemcpyAsync");
  }
  void copy_peer_async(void* destination, int destination_device, const void* source, int source_device,
                       std::size_t bytes, Stream stream) override {
    check(cudaMemcpyPeerAsync_(destination, destination_device, source, source_device, bytes,
                               static_cast<cudaStream_t>(stream)),
          "cudaMemcpyPeerAsync");
  }
  bool can_access_peer(int device, int peer) noexcept override {
    int can = 0;
    if (cudaDeviceCanAccessPeer_(&can, device, peer) != cudaSuccess) {
      cudaGetLastError_();
      return false;
    }
    return can != 0;
  }
  bool enable_peer_access(int device, int peer) noexcept override {
    // Held across the call: a racing copy of the same pair waits until access is enabled (or known to
    // be refused) instead of copying before it.
    std::lock_guard lock(mutex_);
    if (const auto found = peers_.find({device, peer}); found != peers_.end()) return found->second;
    SavedDevice saved;
    cudaError_t status = enter(device, saved);
    if (status == cudaSuccess) {
      status = cudaDeviceEnablePeerAccess_(peer, 0);
      if (status == cudaErrorPeerAccessAlreadyEnabled) status = cudaSuccess;  // by the program itself
      if (status != cudaSuccess) cudaGetLastError_();
      leave_device(saved);
    }
    if (status != cudaSuccess) {
      cudaGetLastError_();  // not left for the next launch check to report
      // Recorded as refused, so logged once: copies between the pair are staged from now on.
      log::warn("cudaDeviceEnablePeerAccess({} -> {}): {} ({}); copies between them go through host memory",
                device, peer, cudaGetErrorString_(status), cudaGetErrorName_(status));
    }
    try {
      peers_.emplace(std::pair{device, peer}, status == cudaSuccess);
    } catch (...) {  // no memory to remember it: asked again next time
    }
    return status == cudaSuccess;
  }

  void advise(const void* pointer, std::size_t bytes, Advice advice, int device) override {
    cudaMemoryAdvise what = cudaMemAdviseSetReadMostly;
    if (advice == Advice::preferred_location) what = cudaMemAdviseSetPreferredLocation;
    if (advice == Advice::accessed_by) what = cudaMemAdviseSetAccessedBy;
    cudaMemLocation location{};
    location.type = cudaMemLocationTypeDevice;
    location.id = device;
    check(cudaMemAdvise_(pointer, bytes, what, location), "cudaMemAdvise");
  }
  void prefetch_async(const void* pointer, std::size_t bytes, int device, Stream stream) override {
    cudaMemLocation location{};
    location.type = cudaMemLocationTypeDevice;
    location.id = device;
    check(cudaMemPrefetchAsync_(pointer, bytes, location, 0, static_cast<cudaStream_t>(stream)),
          "cudaMemPrefetchAsync");
  }

  void write_flag_async(std::uint32_t* flag, std::uint32_t value, Stream stream) override {
    if (WriteValue32 write = write_value()) {
      const CUresult status =
          write(static_cast<CUstream>(stream), reinterpret_cast<CUdeviceptr>(flag), value, 0);
      if (status == CUDA_SUCCESS) return;
      // Stream memory operations unsupported on this device (CUDA_ERROR_NOT_SUPPORTED): stop trying;
      // any other error: a host function this time.
      if (status == CUDA_ERROR_NOT_SUPPORTED) write_value_failed_.store(true, std::memory_order_relaxed);
    }
    auto context = std::make_unique<FlagWrite>(FlagWrite{flag, value});
    check(cudaLaunchHostFunc_(static_cast<cudaStream_t>(stream), &FlagWrite::run, context.get()),
          "cudaLaunchHostFunc");
    static_cast<void>(context.release());  // FlagWrite::run deletes it
  }

  void check_launch(int /*device*/) override { check(cudaGetLastError_(), "launching the kernel"); }
  void clear_launch_error(int /*device*/) noexcept override { cudaGetLastError_(); }

 private:
  struct FlagWrite {
    std::uint32_t* flag;
    std::uint32_t value;
    static void run(void* user) {
      const std::unique_ptr<FlagWrite> self(static_cast<FlagWrite*>(user));
      std::atomic_ref<std::uint32_t>(*self->flag).store(self->value, std::memory_order_release);
    }
  };

  // enter(): `device` current for the calling thread, what was current before in `saved` (nothing to
  // restore when it already was, as on nerve's launcher threads).
  cudaError_t enter(int device, SavedDevice& saved) noexcept {
    const ContextCalls& calls = context_calls();
    CUcontext context = nullptr;
    const bool context_known = calls.get != nullptr && calls.get(&context) == CUDA_SUCCESS;
    int current = -1;
    if (cudaGetDevice_(&current) != cudaSuccess) {
      cudaGetLastError_();
      current = -1;
    }
    // A thread without a context reports device 0 too: it is not "already current".
    if (current == device && (!context_known || context != nullptr)) return cudaSuccess;
    const cudaError_t status = cudaSetDevice_(device);
    if (status != cudaSuccess) return status;
    saved.restore = true;
    saved.context = context_known ? context : nullptr;
    saved.device = context_known ? -1 : current;
    return cudaSuccess;
  }

  // The driver API's current-context calls (no link to libcuda: through cudart's entry points).
  struct ContextCalls {
    CUresult (*get)(CUcontext*) = nullptr;
    CUresult (*set)(CUcontext) = nullptr;
  };
  const ContextCalls& context_calls() noexcept {
    std::call_once(context_calls_once_, [this] {
      const auto find = [this](const char* name) -> void* {
        void* function = nullptr;
        cudaDriverEntryPointQueryResult found{};
        if (cudaGetDriverEntryPointByVersion_(name, &function, 12000, cudaEnableDefault, &found) ==
                cudaSuccess &&
            found == cudaDriverEntryPointSuccess)
          return function;
        cudaGetLastError_();
        return nullptr;
      };
      context_calls_.get = reinterpret_cast<CUresult (*)(CUcontext*)>(find("cuCtxGetCurrent"));
      context_calls_.set = reinterpret_cast<CUresult (*)(CUcontext)>(find("cuCtxSetCurrent"));
      if (context_calls_.get == nullptr || context_calls_.set == nullptr) context_calls_ = {};
    });
    return context_calls_;
  }

  void check(cudaError_t status, const char* what) {
    if (status == cudaSuccess) return;
    cudaGetLastError_();  // clear a non-sticky error so the next call does not report it again
    throw Error(status == cudaErrorMemoryAllocation ? ErrorCode::out_of_memory : ErrorCode::task_failed,
                fmt::format("{}: {} ({})", what, cudaGetErrorString_(status), cudaGetErrorName_(status)));
  }

  // keep_pool_memory(): the default pool's release threshold to "never", so memory freed with
  // cudaFreeAsync stays cached in the pool (the point of a pool), once per device.
  void keep_pool_memory(int device) {
    {
      std::lock_guard lock(mutex_);
      if (!pools_set_.insert(device).second) return;
    }
    cudaMemPool_t pool = nullptr;
    check(cudaDeviceGetDefaultMemPool_(&pool, device), "cudaDeviceGetDefaultMemPool");
    std::uint64_t threshold = UINT64_MAX;
    check(cudaMemPoolSetAttribute_(pool, cudaMemPoolAttrReleaseThreshold, &threshold),
          "cudaMemPoolSetAttribute");
  }

  WriteValue32 write_value() {
    std::call_once(write_value_once_, [this] {
      void* function = nullptr;
      cudaDriverEntryPointQueryResult found{};
      if (cudaGetDriverEntryPointByVersion_("cuStreamWriteValue32", &function, 12000, cudaEnableDefault,
                                            &found) == cudaSuccess &&
          found == cudaDriverEntryPointSuccess) {
        write_value_ = reinterpret_cast<WriteValue32>(function);
      } else {
        cudaGetLastError_();
      }
    });
    return write_value_failed_.load(std::memory_order_relaxed) ? nullptr : write_value_;
  }

  void* library_ = nullptr;
  std::string load_error_;
#define NERVE_DECLARE(name) decltype(&::name) name##_ = nullptr;
  NERVE_CUDART_FUNCTIONS(NERVE_DECLARE)
#undef NERVE_DECLARE
  std::mutex mutex_;
  std::map<std::pair<int, int>, bool> peers_;  // enable_peer_access(): enabled (true) or refused
  std::set<int> pools_set_;
  std::once_flag write_value_once_;
  std::once_flag context_calls_once_;
  ContextCalls context_calls_;
  WriteValue32 write_value_ = nullptr;
  std::atomic<bool> write_value_failed_{false};
};

}  // namespace

std::shared_ptr<Driver> make_cudart_driver() { return std::make_shared<CudartDriver>(); }

}  // namespace nerve::detail::cuda
