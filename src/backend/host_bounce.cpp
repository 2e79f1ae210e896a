#include "backend/host_bounce.hpp"

#include <memory>

namespace nerve::detail {
namespace {

// Plain host memory as a node: what copy_sync() needs to name "the host" on either side.
class BounceNode final : public MemoryNode {
 public:
  BounceNode() : MemoryNode(0, "host staging", static_cast<std::size_t>(-1), true) {}

 protected:
  std::byte* allocate_storage(std::size_t /*bytes*/) override { return nullptr; }
  void free_storage(std::byte* /*data*/, std::size_t /*bytes*/) noexcept override {}
  void start_copy(MemoryNode& /*from*/, const std::byte* /*source*/, MemoryNode& /*to*/,
                  std::byte* /*destination*/, std::size_t /*bytes*/, CopyCompletion& completion) override {
    completion.copy_done(false, "the host staging node copies nothing itself");
  }
};

}  // namespace

void copy_through_host(MemoryNode& from, const std::byte* source, MemoryNode& to, std::byte* destination,
                       std::size_t bytes) {
  BounceNode host;
  const std::unique_ptr<std::byte[]> bounce(new std::byte[bytes == 0 ? 1 : bytes]);
  from.copy_sync(from, source, host, bounce.get(), bytes);
  to.copy_sync(host, bounce.get(), to, destination, bytes);
}

}  // namespace nerve::detail
