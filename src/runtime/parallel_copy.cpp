// parallel_copy.cpp — a buffer's initial contents copied in by the context's workers.
//
// Making a buffer from host data (Buffer(context, span)) writes every byte of memory the pool has just
// obtained: the copy and the page faults of first touch. On one thread that was the larger part of a
// GPU program that makes its input buffers anew each run: on an H200 host (16 cores), 272 ms per GiB
// on the calling thread, 35 ms split over the workers, where the upload of that GiB to the GPU took
// 20 ms. Small copies stay on the calling thread (a split costs task submissions), and so does any
// copy that would decide where pages land: under memory.numa_policy `local` on a machine of several
// NUMA nodes the first writer places the pages, which is the calling thread by contract.
//
// The pieces are claimed from a counter by the calling thread and by helper tasks alike, and the
// calling thread waits only for pieces a helper has claimed and is copying — never for a helper to
// start, and it never runs other tasks meanwhile (a constructor is not a wait: it must not pick up
// unrelated work, which may need a mapping this thread holds). A helper that starts after the copy
// is over finds nothing left to claim; the job it shares is freed by whoever lets go of it last.
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>

#include "nerve/task.hpp"

#include "runtime/context_impl.hpp"

namespace nerve::detail {
namespace {

constexpr std::size_t piece_bytes = std::size_t{2} << 20;  // a huge page: whole ones per worker
constexpr std::size_t min_parallel_bytes = std::size_t{16} << 20;

bool first_touch_places_pages(const ContextImpl& context) {
  return context.config.memory.numa_policy.kind == NumaPolicy::Kind::local &&
         context.topology.numa_nodes().size() > 1;
}

struct CopyJob {
  std::byte* to;
  const std::byte* from;
  std::size_t bytes;
  std::size_t pieces;
  std::atomic<std::size_t> next{0};  // the next piece to claim
  std::atomic<std::size_t> done{0};  // pieces copied

  // Pieces end on piece_bytes boundaries of the destination's addresses (the first one may be
  // shorter): each huge page is first touched by one thread, not faulted in by two at once.
  std::size_t head = 0;  // the first piece's bytes

  void copy_pieces() noexcept {
    for (;;) {
      const std::size_t piece = next.fetch_add(1, std::memory_order_relaxed);
      if (piece >= pieces) return;
      const std::size_t offset = piece == 0 ? 0 : head + (piece - 1) * piece_bytes;
      const std::size_t length = piece == 0 ? head : std::min(piece_bytes, bytes - offset);
      std::memcpy(to + offset, from + offset, length);
      done.fetch_add(1, std::memory_order_release);
    }
  }
};

}  // namespace

void copy_into_new_buffer(ContextImpl* context, void* destination, const void* source, std::size_t bytes) {
  const unsigned workers = context_worker_count(context);
  if (bytes < min_parallel_bytes || workers < 2 || first_touch_places_pages(*context)) {
    std::memcpy(destination, source, bytes);
    return;
  }
  auto job = std::make_shared<CopyJob>();
  job->to = static_cast<std::byte*>(destination);
  job->from = static_cast<const std::byte*>(source);
  job->bytes = bytes;
  const std::size_t misalignment = reinterpret_cast<std::uintptr_t>(destination) % piece_bytes;
  job->head = misalignment == 0 ? piece_bytes : piece_bytes - misalignment;  // bytes >= 16 MiB > head
  job->pieces = 1 + (bytes - job->head + piece_bytes - 1) / piece_bytes;
  const std::size_t helpers = std::min<std::size_t>(workers - 1, job->pieces - 1);
  static const TaskOptions helper_options = [] {
    TaskOptions options;
    options.name = "buffer initial copy";
    return options;
  }();
  // A few helpers past the in-flight bound: their submissions skip the throttle, which would have this
  // thread run queued tasks to relieve a full queue.
  ThreadState& thread = context->current_thread();
  const std::uint32_t until_check = thread.submissions_until_check;
  thread.submissions_until_check = UINT32_MAX;
  try {
    for (std::size_t i = 0; i < helpers; ++i)
      submit(context, &helper_options, nullptr, nullptr, false, [job] { job->copy_pieces(); });
  } catch (...) {  // no helper could be submitted (out of memory, the context closing): copy alone
  }
  thread.submissions_until_check = until_check;
  job->copy_pieces();
  // What is left is being copied by helpers that claimed it: a few pieces, each well under a millisecond.
  while (job->done.load(std::memory_order_acquire) < job->pieces) std::this_thread::yield();
}

}  // namespace nerve::detail
