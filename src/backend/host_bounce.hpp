// host_bounce.hpp — a copy between two memory nodes of different backends, through host memory.
//
// Backends copy directly between host memory and their own memory, and between their own devices.
// A copy between, say, an OpenCL device and a plugin's device goes through a temporary host buffer:
// the source node's copy_sync() into it, the destination node's copy_sync() out of it. It blocks
// the calling thread; such mixed copies are rare (two kinds of accelerator sharing one buffer).
#pragma once

#include <cstddef>

#include "memory/memory_node.hpp"

namespace nerve::detail {

void copy_through_host(MemoryNode& from, const std::byte* source, MemoryNode& to, std::byte* destination,
                       std::size_t bytes);

}  // namespace nerve::detail
