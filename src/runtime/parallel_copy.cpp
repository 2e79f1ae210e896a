// parallel_copy.cpp — a buffer's initial contents copied in by the context's workers.
//
// Making a buffer from host data (Buffer(context, span)) writes every byte of memory the pool has just
// obtained: the copy and the page faults of first touch. On one thread that was the larger part of a
// GPU program that makes its input buffers anew each run: on an H200 host (16 cores), 272 ms per GiB
// on the calling thread, 35 ms split over the workers, where the upload of that GiB to the GPU took
// 20 ms. Small copies stay on the calling thread (a split costs task submissions), and so does any
// copy that would decide where pages land: under memory.numa_policy `local` on a machine of several
// NUMA nodes the first writer places the pages, which is the calling thread by contract.
#include <cstring>

#include "nerve/parallel.hpp"

#include "runtime/context_impl.hpp"

namespace nerve::detail {
namespace {

constexpr std::size_t piece_bytes = std::size_t{2} << 20;  // a huge page: whole ones per worker
constexpr std::size_t min_parallel_bytes = std::size_t{16} << 20;

bool first_touch_places_pages(const ContextImpl& context) {
  return context.config.memory.numa_policy.kind == NumaPolicy::Kind::local &&
         context.topology.numa_nodes().size() > 1;
}

}  // namespace

void copy_into_new_buffer(ContextImpl* context, void* destination, const void* source, std::size_t bytes) {
  const unsigned workers = context_worker_count(context);
  if (bytes < min_parallel_bytes || workers < 2 || first_touch_places_pages(*context)) {
    std::memcpy(destination, source, bytes);
    return;
  }
  auto* to = static_cast<std::byte*>(destination);
  const auto* from = static_cast<const std::byte*>(source);
  const std::size_t pieces = (bytes + piece_bytes - 1) / piece_bytes;
  const auto copy = [=](std::size_t begin, std::size_t end) {
    const std::size_t offset = begin * piece_bytes;
    std::memcpy(to + offset, from + offset, std::min(end * piece_bytes, bytes) - offset);
  };
  ForShared<decltype(copy)> shared{copy, {}};
  try {
    parallel_for_range(context, 0, pieces, auto_grain(context, pieces), shared);
  } catch (...) {
    shared.first.rethrow_first();  // a refused submission (the context is closing): its own error
  }
}

}  // namespace nerve::detail
