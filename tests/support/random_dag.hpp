// random_dag.hpp — random task graphs over many buffers, their sequential reference, and the
// minimum number of bytes an MSI protocol must move to run them on the devices they were given.
//
// A plan is a list of tasks; each has 1..3 accesses (random mode; whole buffer or a random slice)
// and, optionally, a device, an injected failure and a task pool it belongs to. Task bodies hash what
// they read into what they write, so any ordering or data-movement mistake changes the final memory.
// With failures, the reference follows the documented rule: a task that reads (read, read_write) an
// element whose last writer failed or was cancelled is cancelled (unless the task wrote it itself
// earlier in its access list); a pure write heals the element. A pool's tasks (which never conflict
// with each other here, so their order does not matter) are each decided so; then, if one of them
// failed, every element the pool's tasks write is failed data, else those its cancelled tasks write.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <stdexcept>
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
  bool fails = false;    // the body throws after computing
  std::size_t pool = 0;  // > 0: a task of that pool (its tasks are consecutive, launched after the last)
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
  int devices = 0;                 // > 0: each task gets a random device in [0, devices]
  unsigned failures_per_1000 = 0;  // tasks whose body throws
  unsigned pools_per_1000 = 0;     // tasks that begin a pool of 2..4 tasks
};

// conflicts(): two accesses of different tasks that must be ordered (overlap, and one writes).
inline bool conflicts(const AccessPlan& a, const AccessPlan& b) {
  return a.buffer == b.buffer && a.offset < b.offset + b.count && b.offset < a.offset + a.count &&
         (a.mode != Access::read || b.mode != Access::read);
}

inline std::vector<TaskPlan> make_plan(std::uint64_t seed, const PlanShape& shape) {
  std::mt19937_64 random(seed);
  std::vector<TaskPlan> plan(shape.tasks);
  const auto random_access = [&] {
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
    return access;
  };
  std::size_t pools = 0;
  std::size_t pool_end = 0;  // the first task past the current pool
  for (std::size_t t = 0; t < shape.tasks; ++t) {
    plan[t].id = t;
    // (Random numbers for pools only when pools are asked for: the other plans stay as they were.)
    if (shape.pools_per_1000 > 0 && t >= pool_end && random() % 1000 < shape.pools_per_1000) {
      pool_end = std::min(shape.tasks, t + 2 + random() % 3);
      ++pools;
    }
    const bool in_pool = t < pool_end;
    if (in_pool) plan[t].pool = pools;
    if (shape.devices > 0)
      plan[t].device = static_cast<int>(random() % static_cast<std::uint64_t>(shape.devices + 1));
    const std::size_t count = 1 + random() % 3;
    for (std::size_t a = 0; a < count; ++a) {
      AccessPlan access = random_access();
      // A pool's tasks are independent: one that would conflict with an earlier one is drawn again.
      const auto conflicting = [&] {
        for (std::size_t other = t; in_pool && other-- > 0 && plan[other].pool == plan[t].pool;) {
          for (const AccessPlan& earlier : plan[other].accesses) {
            if (conflicts(access, earlier)) return true;
          }
        }
        return false;
      };
      int tries = 0;
      while (conflicting() && ++tries < 16) access = random_access();
      if (tries < 16) plan[t].accesses.push_back(access);
    }
    if (shape.failures_per_1000 > 0) plan[t].fails = random() % 1000 < shape.failures_per_1000;
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

// run_task() runs one task's body on `memory`, as the runtime does.
inline void run_task(const TaskPlan& task, std::vector<std::vector<std::uint64_t>>& memory) {
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

inline void run_reference(const std::vector<TaskPlan>& plan,
                          std::vector<std::vector<std::uint64_t>>& memory) {
  for (const TaskPlan& task : plan) run_task(task, memory);
}

// run_reference_with_failures(): run_reference() for a plan with failures. `poisoned` (one flag per
// element, all false at first) ends true where the data is a failed or cancelled task's; the result
// is each task's expected status (status_succeeded / _failed / _cancelled as TaskStatus).
// A pool's tasks, and plain ones, get a status each; a pool's wait reports its first failure, else
// its first cancellation (`pool_statuses`, per pool, when given: failed / cancelled / succeeded).
inline std::vector<TaskStatus> run_reference_with_failures(const std::vector<TaskPlan>& plan,
                                                           std::vector<std::vector<std::uint64_t>>& memory,
                                                           std::vector<std::vector<bool>>& poisoned,
                                                           std::vector<TaskStatus>* pool_statuses = nullptr) {
  std::vector<TaskStatus> statuses;
  const auto decide = [&](const TaskPlan& task) {
    // Accesses in declaration order: an element the task itself wrote earlier (write-only, then read)
    // is its own output, not the failed writer's.
    bool consumes_failure = false;
    std::vector<std::pair<std::size_t, std::size_t>> written;  // (buffer, element) written so far
    for (const AccessPlan& access : task.accesses) {
      for (std::size_t i = access.offset; i < access.offset + access.count; ++i) {
        const bool own =
            std::find(written.begin(), written.end(), std::pair{access.buffer, i}) != written.end();
        if (access.mode != Access::write && !own) consumes_failure |= poisoned[access.buffer][i];
        if (access.mode != Access::read) written.emplace_back(access.buffer, i);
      }
    }
    return consumes_failure ? TaskStatus::cancelled : task.fails ? TaskStatus::failed : TaskStatus::succeeded;
  };
  const auto mark_written = [&](const TaskPlan& task, bool failed) {
    for (const AccessPlan& access : task.accesses) {
      if (access.mode == Access::read) continue;
      for (std::size_t i = access.offset; i < access.offset + access.count; ++i)
        poisoned[access.buffer][i] = failed;
    }
  };
  for (std::size_t t = 0; t < plan.size();) {
    std::size_t end = t + 1;  // a plain task, or a pool's tasks [t, end)
    while (plan[t].pool != 0 && end < plan.size() && plan[end].pool == plan[t].pool) ++end;
    // The pool's tasks never conflict: each is decided on the data as the pool found it.
    for (std::size_t m = t; m < end; ++m) statuses.push_back(decide(plan[m]));
    const auto first = statuses.end() - static_cast<std::ptrdiff_t>(end - t);
    for (std::size_t m = t; m < end; ++m) {
      if (statuses[m] != TaskStatus::cancelled) run_task(plan[m], memory);
    }
    const bool pool_failed = plan[t].pool != 0 && std::count(first, statuses.end(), TaskStatus::failed) > 0;
    for (std::size_t m = t; m < end; ++m)
      mark_written(plan[m], pool_failed || statuses[m] != TaskStatus::succeeded);
    if (plan[t].pool != 0 && pool_statuses != nullptr) {
      pool_statuses->push_back(pool_failed ? TaskStatus::failed
                               : std::count(first, statuses.end(), TaskStatus::cancelled) > 0
                                   ? TaskStatus::cancelled
                                   : TaskStatus::succeeded);
    }
    t = end;
  }
  return statuses;
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
void submit_with_modes(Context& context, TaskPool* pool, const TaskOptions& options,
                       std::vector<Buffer<std::uint64_t>>& views, const TaskPlan& task,
                       std::vector<Task>* handles) {
  auto body = [id = task.id, fails = task.fails](auto... spans) {
    Body state{id, id};
    (visit_one<Modes>(state, spans), ...);
    if (fails) throw std::runtime_error("injected failure");
  };
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    if (pool != nullptr) {
      pool->add(options, body, BufferAccess<std::uint64_t, Modes>{&views[I]}...);
      if (handles != nullptr) handles->emplace_back();  // a pool's task has no handle
    } else if (handles != nullptr) {
      handles->push_back(context.submit(options, body, BufferAccess<std::uint64_t, Modes>{&views[I]}...));
    } else {
      context.spawn(options, body, BufferAccess<std::uint64_t, Modes>{&views[I]}...);
    }
  }
  (std::index_sequence_for<decltype(Modes)...>{});
}

template <Access... Chosen>
void dispatch(Context& context, TaskPool* pool, const TaskOptions& options, const TaskPlan& task,
              std::vector<Buffer<std::uint64_t>>& views, std::size_t index, std::vector<Task>* handles) {
  if constexpr (sizeof...(Chosen) < 3) {
    if (index < task.accesses.size()) {
      switch (task.accesses[index].mode) {
        case Access::read:
          return dispatch<Chosen..., Access::read>(context, pool, options, task, views, index + 1, handles);
        case Access::write:
          return dispatch<Chosen..., Access::write>(context, pool, options, task, views, index + 1, handles);
        case Access::read_write:
          return dispatch<Chosen..., Access::read_write>(context, pool, options, task, views, index + 1,
                                                         handles);
      }
    }
  }
  submit_with_modes<Chosen...>(context, pool, options, views, task, handles);
}

}  // namespace detail_random_dag

// submit_plan() submits every task of `plan` over `buffers` (device placement when planned); with
// `handles`, it keeps each task's handle there (in plan order; an empty one for a pool's task). A
// pool is launched after its last task; `pools` keeps them (a plan with pools needs it).
inline void submit_plan(Context& context, const std::vector<TaskPlan>& plan,
                        std::vector<Buffer<std::uint64_t>>& buffers, std::vector<Task>* handles = nullptr,
                        std::vector<std::unique_ptr<TaskPool>>* pools = nullptr) {
  std::vector<Buffer<std::uint64_t>> views(3);
  for (std::size_t t = 0; t < plan.size(); ++t) {
    const TaskPlan& task = plan[t];
    for (std::size_t a = 0; a < task.accesses.size(); ++a) {
      const AccessPlan& access = task.accesses[a];
      views[a] = buffers[access.buffer].slice(access.offset, access.count);
    }
    TaskOptions options;
    options.device = task.device;
    TaskPool* pool = nullptr;
    if (task.pool != 0) {
      if (t == 0 || plan[t - 1].pool != task.pool) pools->push_back(std::make_unique<TaskPool>(context));
      pool = pools->back().get();
    }
    detail_random_dag::dispatch<>(context, pool, options, task, views, 0, handles);
    if (pool != nullptr && (t + 1 == plan.size() || plan[t + 1].pool != task.pool)) pool->launch();
  }
}

}  // namespace nerve::testing
