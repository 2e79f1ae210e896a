#include "backend/cuda/fake_driver.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <thread>

#include <fmt/format.h>

#include "nerve/error.hpp"

namespace nerve::detail::cuda {

struct FakeDriver::FakeStream {
  int device = 0;
  int priority = 0;
  std::deque<Work> work;
};

// As in CUDA, a wait enqueued for an event waits for the record that was the event's latest when the
// wait was enqueued, not for later ones (a staged copy re-records its events piece after piece).
struct FakeDriver::FakeEvent {
  int device = 0;
  std::uint64_t recorded = 0;   // records enqueued
  std::uint64_t completed = 0;  // the latest record the stream ran (an event never recorded is complete)
  bool complete() const noexcept { return completed >= recorded; }
};

namespace {
constexpr std::size_t no_override = std::numeric_limits<std::size_t>::max();
}

FakeDriver::FakeDriver(FakeOptions options)
    : options_(std::move(options)),
      used_(static_cast<std::size_t>(options_.devices), 0),
      free_override_(static_cast<std::size_t>(options_.devices), no_override) {}

FakeDriver::~FakeDriver() {
  for (auto& [pointer, owner] : blocks_) std::free(pointer);
}

void FakeDriver::count(const std::string& name) {
  ++calls_[name];
  if (const auto found = failing_.find(name); found != failing_.end()) {
    failing_.erase(found);
    throw Error(ErrorCode::task_failed, fmt::format("fake CUDA: {} failed (injected)", name));
  }
}

void FakeDriver::fail_next_call(const std::string& name) {
  std::lock_guard lock(mutex_);
  failing_.insert(name);
}
void FakeDriver::record(FakeRecord entry) { records_.push_back(std::move(entry)); }

void FakeDriver::check_device(int device) const {
  if (device < 0 || device >= options_.devices) {
    throw Error(ErrorCode::invalid_argument, fmt::format("fake CUDA: device {} does not exist", device));
  }
}

int FakeDriver::device_count(std::string& why_none) noexcept {
  std::lock_guard lock(mutex_);
  count("device_count");
  if (options_.devices == 0) why_none = options_.why_none;
  return options_.devices;
}

DeviceProperties FakeDriver::properties(int device) {
  std::lock_guard lock(mutex_);
  check_device(device);
  DeviceProperties p;
  p.name = fmt::format("Fake CUDA GPU {}", device);
  p.total_memory = options_.memory_bytes;
  p.multiprocessors = 4;
  p.major = 9;
  p.pci_bus_id = device == 0 ? options_.pci_bus_id : "";  // none: locality stays unknown
  p.managed_memory = options_.managed_memory;
  p.concurrent_managed_access = options_.managed_memory;
  return p;
}

void FakeDriver::make_current(int device) {
  std::lock_guard lock(mutex_);
  check_device(device);
  count("make_current");
  current_[std::this_thread::get_id()] = device;
}

int FakeDriver::implicit_context() {
  return current_.try_emplace(std::this_thread::get_id(), 0).first->second;
}

SavedDevice FakeDriver::enter_device(int device) {
  std::lock_guard lock(mutex_);
  check_device(device);
  count("enter_device");
  SavedDevice saved;
  const auto found = current_.find(std::this_thread::get_id());
  saved.device = found == current_.end() ? -1 : found->second;
  saved.restore = saved.device != device;
  current_[std::this_thread::get_id()] = device;
  return saved;
}

void FakeDriver::leave_device(const SavedDevice& saved) noexcept {
  std::lock_guard lock(mutex_);
  if (!saved.restore) return;
  if (saved.device < 0) {
    current_.erase(std::this_thread::get_id());
  } else {
    current_[std::this_thread::get_id()] = saved.device;
  }
}

int FakeDriver::current_device() const {
  std::lock_guard lock(mutex_);
  const auto found = current_.find(std::this_thread::get_id());
  return found == current_.end() ? -1 : found->second;
}

void FakeDriver::memory_info(int device, std::size_t& free, std::size_t& total) {
  std::lock_guard lock(mutex_);
  check_device(device);
  count("memory_info");
  total = options_.memory_bytes;
  const auto d = static_cast<std::size_t>(device);
  free = free_override_[d] != no_override ? free_override_[d] : total - used_[d];
}

void FakeDriver::set_free_bytes(int device, std::size_t bytes) {
  std::lock_guard lock(mutex_);
  free_override_.at(static_cast<std::size_t>(device)) = bytes;
}

void* FakeDriver::allocate(int device, std::size_t bytes, const char* what) {
  if (device >= 0) {
    const auto d = static_cast<std::size_t>(device);
    const std::size_t free =
        free_override_[d] != no_override ? free_override_[d] : options_.memory_bytes - used_[d];
    if (bytes > free) {
      throw Error(ErrorCode::out_of_memory, fmt::format("fake CUDA {}: {} bytes asked, {} free on device {}",
                                                        what, bytes, free, device));
    }
    used_[d] += bytes;
    if (free_override_[d] != no_override) free_override_[d] -= bytes;
  }
  void* pointer = std::aligned_alloc(256, (bytes + 255) / 256 * 256 + 256);
  if (pointer == nullptr)
    throw Error(ErrorCode::out_of_memory, fmt::format("fake CUDA {}: host malloc", what));
  blocks_[pointer] = {device, bytes};
  record({what, pointer, bytes, device, nullptr, 0});
  return pointer;
}

void FakeDriver::release(void* pointer) noexcept {
  const auto found = blocks_.find(pointer);
  if (found == blocks_.end()) return;
  if (found->second.first >= 0) used_[static_cast<std::size_t>(found->second.first)] -= found->second.second;
  blocks_.erase(found);
  std::free(pointer);
}

void* FakeDriver::malloc_device(int device, std::size_t bytes) {
  std::lock_guard lock(mutex_);
  check_device(device);
  count("malloc");
  return allocate(device, bytes, "malloc");
}

void FakeDriver::free_device(int /*device*/, void* pointer) noexcept {
  std::lock_guard lock(mutex_);
  count("free");
  release(pointer);
}

void* FakeDriver::malloc_async(int device, std::size_t bytes, Stream /*stream*/) {
  std::lock_guard lock(mutex_);
  check_device(device);
  count("malloc_async");
  return allocate(device, bytes, "malloc_async");
}

void FakeDriver::free_async(int /*device*/, void* pointer, Stream /*stream*/) noexcept {
  std::lock_guard lock(mutex_);
  count("free_async");
  release(pointer);
}

void* FakeDriver::malloc_managed(int device, std::size_t bytes) {
  std::lock_guard lock(mutex_);
  check_device(device);
  count("malloc_managed");
  if (!options_.managed_memory) throw Error(ErrorCode::not_supported, "fake CUDA: no managed memory");
  return allocate(device, bytes, "malloc_managed");
}

void FakeDriver::free_managed(int /*device*/, void* pointer) noexcept {
  std::lock_guard lock(mutex_);
  count("free_managed");
  release(pointer);
}

void* FakeDriver::host_alloc(std::size_t bytes) {
  std::lock_guard lock(mutex_);
  count("host_alloc");
  const int owner = implicit_context();
  void* block = allocate(-1, bytes, "host_alloc");
  records_.back().detail = owner;
  return block;
}

void FakeDriver::host_free(void* pointer) noexcept {
  std::lock_guard lock(mutex_);
  count("host_free");
  implicit_context();
  release(pointer);
}

void FakeDriver::host_register(void* pointer, std::size_t bytes) {
  std::lock_guard lock(mutex_);
  count("host_register");
  record({.call = "host_register", .pointer = pointer, .bytes = bytes});
  if (options_.refuse_host_register) throw Error(ErrorCode::out_of_memory, "cudaHostRegister failed (fake)");
  if (!registered_.emplace(pointer, bytes).second)
    throw Error(ErrorCode::invalid_argument, "cudaHostRegister: already registered (fake)");
}

void FakeDriver::host_unregister(void* pointer) noexcept {
  std::lock_guard lock(mutex_);
  count(registered_.erase(pointer) == 1 ? "host_unregister" : "host_unregister_unknown");
}

std::size_t FakeDriver::registered_host_bytes() const {
  std::lock_guard lock(mutex_);
  std::size_t bytes = 0;
  for (const auto& [pointer, size] : registered_) bytes += size;
  return bytes;
}

void FakeDriver::priority_range(int device, int& least, int& greatest) {
  std::lock_guard lock(mutex_);
  check_device(device);
  least = options_.least_priority;
  greatest = options_.greatest_priority;
}

Stream FakeDriver::create_stream(int device, int priority) {
  std::lock_guard lock(mutex_);
  check_device(device);
  count("create_stream");
  auto stream = std::make_unique<FakeStream>();
  stream->device = device;
  stream->priority = priority;
  FakeStream* handle = stream.get();
  streams_[handle] = std::move(stream);
  record({"create_stream", nullptr, 0, device, handle, priority});
  return handle;
}

void FakeDriver::destroy_stream(int /*device*/, Stream stream) noexcept {
  std::lock_guard lock(mutex_);
  count("destroy_stream");
  if (held_stream_ == stream) held_stream_ = nullptr;
  run_pending_locked();  // CUDA lets queued work finish before a destroyed stream goes away
  streams_.erase(static_cast<FakeStream*>(stream));
}

void FakeDriver::enqueue(Stream stream, Work work) {
  const auto found = streams_.find(static_cast<FakeStream*>(stream));
  if (found == streams_.end()) throw Error(ErrorCode::internal, "fake CUDA: unknown stream");
  FakeStream& s = *found->second;
  // Without hold_work a stream runs its work at once, unless earlier work still waits.
  if (!options_.hold_work && &s != held_stream_ && s.work.empty() && work()) return;
  s.work.push_back(std::move(work));
}

std::size_t FakeDriver::run_pending_locked(std::size_t limit) {
  std::size_t ran = 0;
  bool progress = true;
  while (progress && ran < limit) {
    progress = false;
    for (auto& [handle, stream] : streams_) {
      if (handle == held_stream_) continue;
      while (ran < limit && !stream->work.empty() && stream->work.front()()) {
        stream->work.pop_front();
        ++ran;
        progress = true;
      }
    }
  }
  return ran;
}

std::size_t FakeDriver::run_pending(std::size_t limit) {
  std::lock_guard lock(mutex_);
  return run_pending_locked(limit);
}

void FakeDriver::hold_stream(Stream stream) {
  std::lock_guard lock(mutex_);
  held_stream_ = static_cast<FakeStream*>(stream);
}

void FakeDriver::release_stream() {
  std::lock_guard lock(mutex_);
  held_stream_ = nullptr;
  run_pending_locked();
}

std::size_t FakeDriver::held_work() const {
  std::lock_guard lock(mutex_);
  std::size_t held = 0;
  for (const auto& [handle, stream] : streams_) held += stream->work.size();
  return held;
}

void FakeDriver::synchronize_stream(Stream stream) {
  std::lock_guard lock(mutex_);
  count("synchronize_stream");
  implicit_context();
  run_pending_locked();
  if (!streams_.at(static_cast<FakeStream*>(stream))->work.empty()) {
    throw Error(ErrorCode::internal, "fake CUDA: stream waits for an event never recorded");
  }
}

Event FakeDriver::create_event(int device) {
  std::lock_guard lock(mutex_);
  check_device(device);
  count("create_event");
  auto event = std::make_shared<FakeEvent>();
  event->device = device;
  FakeEvent* handle = event.get();
  events_[handle] = std::move(event);
  return handle;
}

void FakeDriver::destroy_event(Event event) noexcept {
  std::lock_guard lock(mutex_);
  count("destroy_event");
  implicit_context();
  events_.erase(static_cast<FakeEvent*>(event));
}

void FakeDriver::record_event(Event event, Stream stream) {
  std::lock_guard lock(mutex_);
  count("record_event");
  implicit_context();
  std::shared_ptr<FakeEvent> e = events_.at(static_cast<FakeEvent*>(event));
  const std::uint64_t record = ++e->recorded;
  enqueue(stream, [e, record] {
    e->completed = std::max(e->completed, record);
    return true;
  });
}

EventState FakeDriver::query_event(Event event) noexcept {
  std::lock_guard lock(mutex_);
  count("query_event");
  implicit_context();
  const auto found = events_.find(static_cast<FakeEvent*>(event));
  if (found == events_.end()) return EventState::failed;
  return found->second->complete() ? EventState::complete : EventState::pending;
}

void FakeDriver::synchronize_event(Event event) {
  std::lock_guard lock(mutex_);
  count("synchronize_event");
  run_pending_locked();
  if (!events_.at(static_cast<FakeEvent*>(event))->complete()) {
    throw Error(ErrorCode::internal, "fake CUDA: event cannot complete");
  }
}

void FakeDriver::stream_wait_event(Stream stream, Event event) {
  std::lock_guard lock(mutex_);
  count("stream_wait_event");
  implicit_context();
  std::shared_ptr<FakeEvent> e = events_.at(static_cast<FakeEvent*>(event));
  const std::uint64_t record = e->recorded;
  enqueue(stream, [e, record] { return e->completed >= record; });
}

void FakeDriver::copy_async(void* destination, const void* source, std::size_t bytes, Stream stream) {
  std::lock_guard lock(mutex_);
  count("copy");
  implicit_context();
  record({"copy", destination, bytes, -1, stream, 0});
  enqueue(stream, [=] {
    if (bytes != 0) std::memcpy(destination, source, bytes);
    return true;
  });
}

void FakeDriver::copy_peer_async(void* destination, int destination_device, const void* source,
                                 int source_device, std::size_t bytes, Stream stream) {
  std::lock_guard lock(mutex_);
  check_device(destination_device);
  check_device(source_device);
  count("copy_peer");
  implicit_context();
  record({"copy_peer", destination, bytes, destination_device, stream, source_device});
  enqueue(stream, [=] {
    if (bytes != 0) std::memcpy(destination, source, bytes);
    return true;
  });
}

bool FakeDriver::can_access_peer(int device, int peer) noexcept {
  std::lock_guard lock(mutex_);
  count("can_access_peer");
  return options_.peer_access && device != peer && device >= 0 && peer >= 0 && device < options_.devices &&
         peer < options_.devices;
}

bool FakeDriver::enable_peer_access(int device, int peer) noexcept {
  std::lock_guard lock(mutex_);
  count("enable_peer_access");
  record({"enable_peer_access", nullptr, 0, device, nullptr, peer});
  return !options_.refuse_peer_enable && device != peer && device >= 0 && peer >= 0 &&
         device < options_.devices && peer < options_.devices;
}

void FakeDriver::advise(const void* pointer, std::size_t bytes, Advice advice, int device) {
  std::lock_guard lock(mutex_);
  count("advise");
  record({"advise", pointer, bytes, device, nullptr, static_cast<int>(advice)});
}

void FakeDriver::prefetch_async(const void* pointer, std::size_t bytes, int device, Stream stream) {
  std::lock_guard lock(mutex_);
  count("prefetch");
  record({"prefetch", pointer, bytes, device, stream, 0});
  enqueue(stream, [] { return true; });
}

void FakeDriver::write_flag_async(std::uint32_t* flag, std::uint32_t value, Stream stream) {
  std::lock_guard lock(mutex_);
  count("write_flag");
  implicit_context();
  enqueue(stream, [flag, value] {
    std::atomic_ref<std::uint32_t>(*flag).store(value, std::memory_order_release);
    return true;
  });
}

void FakeDriver::check_launch(int /*device*/) {
  std::lock_guard lock(mutex_);
  count("check_launch");
  if (fail_next_launch_) {
    fail_next_launch_ = false;
    throw Error(ErrorCode::task_failed, "fake CUDA: launch failed (cudaErrorLaunchFailure)");
  }
}

void FakeDriver::clear_launch_error(int /*device*/) noexcept {
  std::lock_guard lock(mutex_);
  ++calls_["clear_launch_error"];
  fail_next_launch_ = false;
}

void FakeDriver::fail_next_launch() {
  std::lock_guard lock(mutex_);
  fail_next_launch_ = true;
}

std::uint64_t FakeDriver::calls(const std::string& name) const {
  std::lock_guard lock(mutex_);
  const auto found = calls_.find(name);
  return found == calls_.end() ? 0 : found->second;
}

std::vector<FakeRecord> FakeDriver::records() const {
  std::lock_guard lock(mutex_);
  return records_;
}

std::vector<FakeRecord> FakeDriver::records(const std::string& call) const {
  std::lock_guard lock(mutex_);
  std::vector<FakeRecord> matching;
  for (const FakeRecord& each : records_)
    if (each.call == call) matching.push_back(each);
  return matching;
}

std::size_t FakeDriver::live_device_allocations() const {
  std::lock_guard lock(mutex_);
  return blocks_.size();
}

std::size_t FakeDriver::live_streams() const {
  std::lock_guard lock(mutex_);
  return streams_.size();
}

std::size_t FakeDriver::live_events() const {
  std::lock_guard lock(mutex_);
  return events_.size();
}

}  // namespace nerve::detail::cuda
