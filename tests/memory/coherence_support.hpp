// coherence_support.hpp — contexts with simulated separate-memory devices.
#pragma once

#include "memory/buffer_state.hpp"
#include "support/runtime_fixture.hpp"

namespace nerve::testing {

inline std::unique_ptr<Context> context_with_devices(unsigned workers, int devices,
                                                     detail::TestDeviceOptions options = {}) {
  auto context = std::make_unique<Context>(make_settings(workers));
  for (int i = 0; i < devices; ++i) context->impl()->add_test_device(options);
  return context;
}

inline std::uint64_t bytes_moved(const Context& context, int from, int to) {
  for (const TransferStats& transfer : context.stats().transfers) {
    if (transfer.from_node == from && transfer.to_node == to) return transfer.bytes;
  }
  return 0;
}

template <class T>
bool has_replica(Context& context, const Buffer<T>& buffer, unsigned node) {
  return context.impl()->coherence->replica(*buffer.state(), node) != nullptr;
}

}  // namespace nerve::testing
