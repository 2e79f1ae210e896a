// nerve.hpp — the C++ API of OpenClaw-Nerve, a runtime that runs tasks over buffers on every compute
// unit of a machine. Include this one header.
//
//   nerve::Context context;                                   // discovers the machine, starts workers
//   nerve::Buffer<float> a(context, n), b(context, n);
//   context.submit([](std::span<const float> in, std::span<float> out) { ... },
//                  nerve::read(a), nerve::write(b));          // dependencies inferred from accesses
//   context.wait_all();
#pragma once

#include "nerve/buffer.hpp"
#include "nerve/config.hpp"
#include "nerve/context.hpp"
#include "nerve/coroutine.hpp"
#include "nerve/device.hpp"
#include "nerve/error.hpp"
#include "nerve/kernel.hpp"
#include "nerve/parallel.hpp"
#include "nerve/stats.hpp"
#include "nerve/task.hpp"
#include "nerve/topology.hpp"
