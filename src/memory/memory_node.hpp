// memory_node.hpp — a place where buffer data can live, and how bytes move between places.
//
// Node 0 is host memory: every CPU worker reads it directly, so it is one coherence domain however
// many NUMA nodes the machine has (where host pages land is an allocation policy: first touch or
// memory.numa_policy). Every device owns one more node. A node allocates replica storage within its
// byte limit and copies asynchronously: copy() starts a transfer and returns at once; the
// completion's copy_done() runs later, on a thread of the node that performed the copy.
//
// Thread safety: all members may be called from any thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

namespace nerve::detail {

// Called once when a copy has finished (ok) or failed (error text). Must not block.
class CopyCompletion {
 public:
  virtual void copy_done(bool ok, const std::string& error) noexcept = 0;

 protected:
  ~CopyCompletion() = default;
};

class MemoryNode {
 public:
  MemoryNode(unsigned index, std::string name, std::size_t limit_bytes, bool host_addressable)
      : index_(index), name_(std::move(name)), limit_(limit_bytes), host_addressable_(host_addressable) {}
  virtual ~MemoryNode() = default;
  MemoryNode(const MemoryNode&) = delete;
  MemoryNode& operator=(const MemoryNode&) = delete;

  unsigned index() const noexcept { return index_; }
  bool is_host() const noexcept { return index_ == 0; }
  const std::string& name() const noexcept { return name_; }
  // host_addressable(): a CPU may dereference this node's pointers (host RAM, test nodes, unified
  // memory); false for discrete device memory.
  bool host_addressable() const noexcept { return host_addressable_; }
  std::size_t limit() const noexcept { return limit_; }
  std::size_t used() const noexcept { return used_.load(std::memory_order_relaxed); }

  // try_allocate() returns nullptr when the request does not fit under the limit (the caller then
  // evicts and retries, or reports OutOfMemory).
  std::byte* try_allocate(std::size_t bytes);
  void deallocate(std::byte* data, std::size_t bytes) noexcept;

  // copy() moves `bytes` from `source` (on node `from`) to `destination` (on node `to`); one of the
  // two nodes performs it (a device's copy engine; host-to-host never happens).
  // drain() finishes the copies in flight and stops the node's engine (context shutdown).
  virtual void drain() noexcept {}
  // wait_idle() waits until no copy is in flight on this node (each one's completion has run), without
  // stopping its engine, and returns how many operations the node has started so far. A copy ending
  // on one node may start one on another (a copy-back queued behind another device's): shutdown
  // drains the nodes only once a pass over all of them has started nothing new.
  virtual std::uint64_t wait_idle() noexcept { return 0; }
  // compact() gives the node's free pooled memory back to the system or driver; the bytes returned.
  virtual std::size_t compact() { return 0; }
  // staging_bytes_reserved(): pinned staging memory a device node holds for its host copies, free
  // or in use (the host's own staging pool is counted by HostMemoryNode).
  virtual std::size_t staging_bytes_reserved() const { return 0; }

  static void copy(MemoryNode& from, const std::byte* source, MemoryNode& to, std::byte* destination,
                   std::size_t bytes, CopyCompletion& completion);
  // copy_sync() copies and returns when done, without using the asynchronous engine (eviction
  // write-backs run with a buffer's lock held, which the engine's completions may need). The
  // default is a plain memcpy, for host-addressable nodes.
  virtual void copy_sync(MemoryNode& from, const std::byte* source, MemoryNode& to, std::byte* destination,
                         std::size_t bytes);

 protected:
  virtual std::byte* allocate_storage(std::size_t bytes) = 0;
  virtual void free_storage(std::byte* data, std::size_t bytes) noexcept = 0;
  // start_copy(): this node's engine copies between itself and `other` (either direction).
  virtual void start_copy(MemoryNode& from, const std::byte* source, MemoryNode& to, std::byte* destination,
                          std::size_t bytes, CopyCompletion& completion) = 0;

 private:
  const unsigned index_;
  const std::string name_;
  const std::size_t limit_;
  const bool host_addressable_;
  std::atomic<std::size_t> used_{0};
};

}  // namespace nerve::detail
