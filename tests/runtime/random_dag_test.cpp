// Stress: random task graphs over many buffers, with random read / write / read-write accesses on
// whole buffers and on slices, must leave exactly the memory that running the same tasks one by one
// in submission order leaves. 20 seeds × 100,000 tasks over 128 buffers, spread over worker counts
// and policies. NERVE_STRESS_TASKS overrides the task count (sanitizer builds use fewer).
#include <cstdint>
#include <cstdlib>
#include <random>
#include <span>
#include <vector>

#include "support/runtime_fixture.hpp"

namespace nerve::testing {
namespace {

constexpr std::size_t buffer_count = 128;
constexpr std::size_t elements = 48;

struct AccessPlan {
  Access mode;
  std::size_t buffer;
  std::size_t offset;
  std::size_t count;
};

struct TaskPlan {
  std::uint64_t id;
  std::vector<AccessPlan> accesses;
};

std::uint64_t mix(std::uint64_t x) {
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

std::vector<TaskPlan> make_plan(std::uint64_t seed, std::size_t tasks) {
  std::mt19937_64 random(seed);
  std::vector<TaskPlan> plan(tasks);
  for (std::size_t t = 0; t < tasks; ++t) {
    plan[t].id = t;
    const std::size_t count = 1 + random() % 3;
    for (std::size_t a = 0; a < count; ++a) {
      AccessPlan access{};
      const auto roll = random() % 10;
      access.mode = roll < 5 ? Access::read : (roll < 7 ? Access::write : Access::read_write);
      access.buffer = random() % buffer_count;
      if (random() % 2 == 0) {
        access.offset = 0;
        access.count = elements;
      } else {
        access.offset = random() % elements;
        access.count = 1 + random() % (elements - access.offset);
      }
      plan[t].accesses.push_back(access);
    }
  }
  return plan;
}

void run_reference(const std::vector<TaskPlan>& plan, std::vector<std::vector<std::uint64_t>>& memory) {
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
void submit_with_modes(Context& context, std::vector<Buffer<std::uint64_t>>& views, std::uint64_t id) {
  auto body = [id](auto... spans) {
    Body state{id, id};
    (visit_one<Modes>(state, spans), ...);
  };
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    context.spawn(body, BufferAccess<std::uint64_t, Modes>{&views[I]}...);
  }
  (std::index_sequence_for<decltype(Modes)...>{});
}

template <Access... Chosen>
void dispatch(Context& context, const TaskPlan& task, std::vector<Buffer<std::uint64_t>>& views,
              std::size_t index) {
  if constexpr (sizeof...(Chosen) < 3) {
    if (index < task.accesses.size()) {
      switch (task.accesses[index].mode) {
        case Access::read: return dispatch<Chosen..., Access::read>(context, task, views, index + 1);
        case Access::write: return dispatch<Chosen..., Access::write>(context, task, views, index + 1);
        case Access::read_write:
          return dispatch<Chosen..., Access::read_write>(context, task, views, index + 1);
      }
    }
  }
  submit_with_modes<Chosen...>(context, views, task.id);
}

std::size_t task_count() {
  if (const char* text = std::getenv("NERVE_STRESS_TASKS")) return static_cast<std::size_t>(std::atoll(text));
  return 100000;
}

class RandomDagTest : public ::testing::TestWithParam<std::uint64_t> {};

TEST_P(RandomDagTest, MatchesSequentialExecution) {
  const std::uint64_t seed = GetParam();
  const unsigned worker_options[] = {1, 2, 4, 8};
  const unsigned workers = worker_options[seed % 4];
  const auto policy = (seed / 4) % 2 == 0 ? SchedulerPolicy::locality_aware_stealing : SchedulerPolicy::eager;
  const auto plan = make_plan(seed, task_count());

  std::vector<std::vector<std::uint64_t>> expected(buffer_count, std::vector<std::uint64_t>(elements));
  for (std::size_t b = 0; b < buffer_count; ++b) {
    for (std::size_t i = 0; i < elements; ++i) expected[b][i] = mix(b * 1000 + i);
  }
  Context context(make_settings(workers, policy));
  {
    std::vector<Buffer<std::uint64_t>> buffers;
    for (std::size_t b = 0; b < buffer_count; ++b) {
      buffers.emplace_back(context, std::span<const std::uint64_t>(expected[b]));
    }
    run_reference(plan, expected);
    std::vector<Buffer<std::uint64_t>> views(3);
    for (const TaskPlan& task : plan) {
      for (std::size_t a = 0; a < task.accesses.size(); ++a) {
        const AccessPlan& access = task.accesses[a];
        views[a] = buffers[access.buffer].slice(access.offset, access.count);
      }
      dispatch<>(context, task, views, 0);
    }
    views.clear();
    context.wait_all();
    for (std::size_t b = 0; b < buffer_count; ++b) {
      ASSERT_EQ(buffers[b].to_vector(), expected[b])
          << "buffer " << b << " differs (seed " << seed << ", " << workers << " workers)";
    }
  }
  expect_no_leaks(context);
}

INSTANTIATE_TEST_SUITE_P(Seeds, RandomDagTest, ::testing::Range<std::uint64_t>(1, 21));

}  // namespace
}  // namespace nerve::testing
