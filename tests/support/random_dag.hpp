// random_dag.hpp — random task graphs over many buffers, their sequential reference, and the
// minimum number of bytes an MSI protocol must move to run them on the devices they were given.
//
// A plan is a list of tasks; each has 1..3 accesses (random mode; whole buffer or a random slice)
// and, optionally, a device. Task bodies hash what they read into what they write, so any ordering
// or data-movement mistake changes the final memory.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "nerve/nerve.hpp"

namespace nerve::testing {

struct AccessPlan {
  Access mode;
  std::size_t buffer;
  std::size_t offset;
  std::size_t count;
};

struct TaskPlan {
  std::uint64_t id;
  int device = -1;
  std::vector<AccessPlan> accesses;
};

inline std::uint64_t mix(std::uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return x;
}

// The task body, shared by the runtime and the sequential reference: visits accesses in order.
struct Body {
  std::uint64_t id;
  std::uint64_t hash;
  void visit(std::span<const std::uint64_t> in) {
    for (std::size_t i = 0; i < in.size(); ++i) hash = mix(hash + in[i] * (i + 1));
  }
  void visit(std::span<std::uint64_t> out, Access mode) {
    for (std::size_t i = 0; i < out.size(); ++i) {
      out[i] = mode == Access::write ? mix(hash + i + id) : mix(out[i] * 3 + hash + id);
    }
    if (!out.empty()) hash = mix(hash ^ out[0]);
  }
};

struct PlanShape {
  std::size_t tasks = 1000;
  std::size_t buffers = 16;
  std::size_t elements = 48;
  int devices = 0;  // > 0: each task gets a random device in [0, devices]
};

inline std::vector<TaskPlan> make_plan(std::uint64_t seed, const PlanShape& shape) {
  std::mt19937_64 random(seed);
  std::vector<TaskPlan> plan(shape.tasks);
  for (std::size_t t = 0; t < shape.tasks; ++t) {
    plan[t].id = t;
    if (shape.devices > 0)
      plan[t].device = static_cast<int>(random() % static_cast<std::uint64_t>(shape.devices + 1));
    const std::size_t count = 1 + random() % 3;
    for (std::size_t a = 0; a < count; ++a) {
      AccessPlan access{};
      const auto roll = random() % 10;
      access.mode = roll < 5 ? Access::read : (roll < 7 ? Access::write : Access::read_write);
      access.buffer = random() % shape.buffers;
      if (random() % 2 == 0) {
        access.offset = 0;
        access.count = shape.elements;
      } else {
        access.offset = random() % shape.elements;
        access.count = 1 + random() % (shape.elements - access.offset);
      }
      plan[t].accesses.push_back(access);
    }
  }
  return plan;
}

inline std::vector<std::vector<std::uint64_t>> initial_memory(const PlanShape& shape) {
  std::vector<std::vector<std::uint64_t>> memory(shape.buffers, std::vector<std::uint64_t>(shape.elements));
  for (std::size_t b = 0; b < shape.buffers; ++b) {
    for (std::size_t i = 0; i < shape.elements; ++i) memory[b][i] = mix(b * 1000 + i);
  }
  return memory;
}

inline void run_reference(const std::vector<TaskPlan>& plan,
                          std::vector<std::vector<std::uint64_t>>& memory) {
  for (const TaskPlan& task : plan) {
    Body body{task.id, task.id};
    for (const AccessPlan& access : task.accesses) {
      std::span<std::uint64_t> view(memory[access.buffer].data() + access.offset, access.count);
      if (access.mode == Access::read) {
        body.visit(std::span<const std::uint64_t>(view));
      } else {
        body.visit(view, access.mode);
      }
    }
  }
}

// The bytes an MSI protocol must copy: a read copies the elements not valid where the task runs
// (then valid there too); a write leaves only that node valid. Node 0 is the host, device d is d.
inline std::uint64_t minimum_bytes(const std::vector<TaskPlan>& plan, const PlanShape& shape) {
  std::vector<std::vector<std::uint32_t>> valid(shape.buffers,
                                                std::vector<std::uint32_t>(shape.elements, 1u));
  std::uint64_t bytes = 0;
  for (const TaskPlan& task : plan) {
    const std::uint32_t node = 1u << (task.device < 0 ? 0 : task.device);
    for (const AccessPlan& access : task.accesses) {
      for (std::size_t i = access.offset; i < access.offset + access.count; ++i) {
        auto& mask = valid[access.buffer][i];
        if (access.mode != Access::write && (mask & node) == 0) {
          bytes += sizeof(std::uint64_t);
          mask |= node;
        }
        if (access.mode != Access::read) mask = node;
      }
    }
  }
  return bytes;
}

namespace detail_random_dag {

template <Access Mode>
void visit_one(
    Body& body,
    std::conditional_t<Mode == Access::read, std::span<const std::uint64_t>, std::span<std::uint64_t>> view) {
  if constexpr (Mode == Access::read) {
    body.visit(view);
  } else {
    body.visit(view, Mode);
  }
}

// Submits one task with its accesses' modes fixed at compile time by dispatching on each mode.
template <Access... Modes>
void submit_with_modes(Context& context, const TaskOptions& options,
                       std::vector<Buffer<std::uint64_t>>& views, std::uint64_t id) {
  auto body = [id](auto... spans) {
    Body state{id, id};
    (visit_one<Modes>(state, spans), ...);
  };
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    context.spawn(options, body, BufferAccess<std::uint64_t, Modes>{&views[I]}...);
  }
  (std::index_sequence_for<decltype(Modes)...>{});
}

template <Access... Chosen>
void dispatch(Context& context, const TaskOptions& options, const TaskPlan& task,
              std::vector<Buffer<std::uint64_t>>& views, std::size_t index) {
  if constexpr (sizeof...(Chosen) < 3) {
    if (index < task.accesses.size()) {
      switch (task.accesses[index].mode) {
        case Access::read: return dispatch<Chosen..., Access::read>(context, options, task, views, index + 1);
        case Access::write:
          return dispatch<Chosen..., Access::write>(context, options, task, views, index + 1);
        case Access::read_write:
          return dispatch<Chosen..., Access::read_write>(context, options, task, views, index + 1);
      }
    }
  }
  submit_with_modes<Chosen...>(context, options, views, task.id);
}

}  // namespace detail_random_dag

// submit_plan() submits every task of `plan` over `buffers` (device placement when planned).
inline void submit_plan(Context& context, const std::vector<TaskPlan>& plan,
                        std::vector<Buffer<std::uint64_t>>& buffers) {
  std::vector<Buffer<std::uint64_t>> views(3);
  for (const TaskPlan& task : plan) {
    for (std::size_t a = 0; a < task.accesses.size(); ++a) {
      const AccessPlan& access = task.accesses[a];
      views[a] = buffers[access.buffer].slice(access.offset, access.count);
    }
    TaskOptions options;
    options.device = task.device;
    detail_random_dag::dispatch<>(context, options, task, views, 0);
  }
}

}  // namespace nerve::testing
