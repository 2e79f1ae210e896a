// memory.hpp — nerve's host memory pools for programs: fast small allocations on a NUMA node.
//
// A MemoryPool is the pool nerve keeps per memory node, usable directly: requests up to 64 KiB are
// served from size classes (16 B granularity up to 128 B, then four classes per doubling, < 20%
// waste above 64 B) carved from slabs, through a per-thread cache — no lock, no system call on the
// hot path — over a central free list shared by all threads; larger requests get their own blocks,
// with a small cache of recently freed ones. The configuration decides where blocks come from and
// where they go (docs/CONFIG.md):
//   memory.allocator            system (mmap) | jemalloc | tcmalloc (loaded at run time)
//   memory.per_thread_pool_size bytes of free chunks each thread keeps per pool (0 = none)
//   memory.global_pool          true: one central free list per size class for all threads;
//                               false: each thread has its own slabs (memory is not shared)
//   memory.numa_policy          local (first touch) | interleave | preferred:<node>
//   memory.huge_pages           true: blocks of 4 MiB and more use transparent huge pages
//
//   nerve::Config config = nerve::Config::load(nerve::Settings());
//   nerve::MemoryPool pool(config, nerve::Topology::discover(config));
//   void* p = pool.allocate(64);
//   pool.deallocate(p, 64);  // the size given to allocate()
//
// Misuse of small chunks (64 KiB and less) is not detected: a double free, a wrong size or a pointer
// the pool did not give corrupts its free lists, like free() misuse in malloc — the fast path has no
// room for a check. Blocks above 64 KiB are checked: such a deallocate() is logged and ignored, and the
// block stays allocated. For them a size is wrong when it does not round up to the same whole pages as
// the size given to allocate() (a size of 64 KiB or less is taken for a small chunk, unchecked).
//
// Thread safety: allocate() and deallocate() may be called from any threads concurrently, and a
// block may be deallocated by another thread than the one that allocated it. compact() and stats()
// may run concurrently with them. The pool must outlive every call; destroying it while another
// thread uses it is undefined. Destroying it while threads still hold cached chunks is fine: those
// threads never touch the pool's memory again.
//
// Errors: allocate() throws nerve::Error(out_of_memory) when the pool's byte limit (or the machine)
// cannot satisfy the request even after returning cached memory; the message names the node, the
// size asked, the limit and the bytes in use — or, when the system allocator itself refused, the
// node and the block size asked of the system, with the system's reason. The constructor throws ConfigError
// for an allocator library that cannot be loaded (key memory.allocator) or a preferred NUMA node the topology
// lacks (key memory.numa_policy), and Error(invalid_argument) for a `numa_node` that does not exist.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nerve/config.hpp"
#include "nerve/export.hpp"
#include "nerve/topology.hpp"

namespace nerve {

namespace memory {
class NodePool;
}

struct MemoryPoolStats {
  struct SizeClass {
    std::size_t chunk_bytes = 0;    // the class's chunk size
    std::uint64_t allocations = 0;  // allocations of this class so far
    std::uint64_t in_use = 0;       // chunks allocated and not yet deallocated
    std::size_t slabs = 0;          // slabs of this class currently held
  };

  std::string node;                // the memory node, as in error messages
  std::size_t limit_bytes = 0;     // the pool's limit; 0 = none
  std::size_t bytes_reserved = 0;  // obtained from the node: slabs and large blocks, cached ones included
  // allocated and not deallocated, in whole chunks and blocks (blocks of 1 MiB and more with their
  // colour padding, as in bytes_reserved)
  std::size_t bytes_in_use = 0;
  // What counts against limit_bytes: bytes_reserved less the colour padding of blocks of 1 MiB and
  // more (docs/MEMORY.md), so it never exceeds the limit while bytes_reserved may, by that padding.
  std::size_t bytes_charged = 0;

  // Where allocations were served from; the three add up to `allocations`.
  std::uint64_t allocations = 0;
  std::uint64_t from_thread_cache = 0;  // the calling thread's cache (the fast path)
  std::uint64_t from_central = 0;       // the central free list, the thread's own slabs, a cached large block
  std::uint64_t from_node = 0;          // a new slab or block from the node

  // Allocations served from a block of their own: requests above 64 KiB, and those aligned to more
  // than 64 bytes whatever their size (allocate(100, 4096) is one: only a page-aligned block gives
  // that alignment). large_from_cache: of them, those served by a recently freed block.
  std::uint64_t large_allocations = 0;
  std::uint64_t large_from_cache = 0;
  std::size_t large_bytes_cached = 0;       // freed blocks kept for reuse
  std::size_t empty_slab_bytes = 0;         // empty slabs kept for reuse (compact() returns them)
  std::uint64_t numa_binding_failures = 0;  // blocks the OS refused to bind per memory.numa_policy
  // Of bytes_reserved, the bytes in blocks given transparent huge pages (memory.huge_pages).
  std::size_t huge_page_bytes = 0;

  std::vector<SizeClass> size_classes;
};

class NERVE_API MemoryPool {
 public:
  // MemoryPool() makes the pool of host NUMA node `numa_node` (a logical index of `topology`), set
  // up by `config`'s memory.* keys. `limit_bytes` caps what the pool reserves from the node (0 =
  // no cap). The topology is only read during construction.
  MemoryPool(const Config& config, const Topology& topology, int numa_node = 0, std::size_t limit_bytes = 0);
  ~MemoryPool();
  MemoryPool(const MemoryPool&) = delete;
  MemoryPool& operator=(const MemoryPool&) = delete;

  // allocate() returns `bytes` of uninitialised memory, 16-byte aligned (page aligned above 64 KiB);
  // 0 bytes gives a unique pointer that must be deallocated too.
  void* allocate(std::size_t bytes);
  // deallocate() returns memory from allocate() with the same `bytes`; null is ignored.
  void deallocate(void* pointer, std::size_t bytes) noexcept;
  // These overloads align to `alignment`, a power of two up to the page size (64 = a cache line:
  // served from size classes that are multiples of 64 bytes; larger: from page-aligned blocks).
  // Deallocate with the same `bytes` and `alignment`. Error(invalid_argument) for another alignment.
  void* allocate(std::size_t bytes, std::size_t alignment);
  void deallocate(void* pointer, std::size_t bytes, std::size_t alignment) noexcept;

  // compact() gives back to the node every free slab and cached large block, and the calling
  // thread's cached chunks; other threads hand back their caches at their next refill (a cache
  // miss), and a later compact() returns what that frees. Returns the bytes given back.
  std::size_t compact();

  MemoryPoolStats stats() const;

 private:
  std::unique_ptr<memory::NodePool> pool_;
};

}  // namespace nerve
