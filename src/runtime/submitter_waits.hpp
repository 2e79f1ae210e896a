// submitter_waits.hpp — who hears that a submitter waits for the tasks in flight to drop.
//
// A submission past task_queue.max_in_flight waits in ContextImpl::throttle_slow() until tasks
// finish: the submitting thread submits nothing more meanwhile. The distributed runtime holds
// payloads back in batches while its program is still submitting (distributed.batch_size,
// sync_interval) and sends them at once while the program waits in wait_all(), since nothing more
// will fill them: a submitter held back here is the same case. Unheard, each hop of a chain of
// dependencies across ranks waited a whole sync_interval.
#pragma once

#include <cstdint>
#include <mutex>

namespace nerve::detail {

class SubmitterWaitListener {
 public:
  // submitter_waiting(true): a thread of the context now waits for tasks in flight, submitting
  // nothing; (false): it has stopped. Called in pairs, from that thread, under SubmitterWaits' lock.
  virtual void submitter_waiting(bool waiting) noexcept = 0;

 protected:
  ~SubmitterWaitListener() = default;
};

// SubmitterWaits: the context's one listener, or none. A waiting submitter tells it through a
// Notice, which tells the same listener when the wait ends — unless that listener was removed
// meanwhile (its owner is going away): a later listener never hears an end without its start.
class SubmitterWaits {
 public:
  // listen() makes `listener` the one that hears; false, changing nothing, if another one does.
  bool listen(SubmitterWaitListener* listener) {
    std::lock_guard lock(mutex_);
    if (listener_ != nullptr && listener_ != listener) return false;
    if (listener_ != listener) ++generation_;
    listener_ = listener;
    return true;
  }
  // stop_listening() removes `listener` if it is the one that hears; from then on it is not called.
  void stop_listening(SubmitterWaitListener* listener) {
    std::lock_guard lock(mutex_);
    if (listener_ != listener) return;
    listener_ = nullptr;
    ++generation_;
  }

  class Notice {
   public:
    explicit Notice(SubmitterWaits& waits) noexcept : waits_(waits) {}
    ~Notice() { end(); }
    Notice(const Notice&) = delete;
    Notice& operator=(const Notice&) = delete;
    // begin(): the thread waits now (its first call tells the listener, later ones nothing).
    void begin() noexcept {
      if (told_ != none) return;
      std::lock_guard lock(waits_.mutex_);
      told_ = waits_.generation_;
      if (waits_.listener_ != nullptr) waits_.listener_->submitter_waiting(true);
    }
    void end() noexcept {
      if (told_ == none) return;
      std::lock_guard lock(waits_.mutex_);
      if (waits_.listener_ != nullptr && waits_.generation_ == told_)
        waits_.listener_->submitter_waiting(false);
      told_ = none;
    }

   private:
    static constexpr std::uint64_t none = ~std::uint64_t{0};
    SubmitterWaits& waits_;
    std::uint64_t told_ = none;
  };

 private:
  std::mutex mutex_;
  SubmitterWaitListener* listener_ = nullptr;
  std::uint64_t generation_ = 0;
};

}  // namespace nerve::detail
