// capi_test.hpp — helpers and the parameterised fixture of the C API suites.
//
// The fixture makes a hermetic context (no NERVE_* environment) per worker count and policy, and at
// teardown waits, asserts that no task record and no buffer is alive, and shuts the context down.
// Kernels in these tests are capture-less lambdas converted to nerve_kernel_fn with unary +.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "nerve/nerve.h"

#include "capi/handles.hpp"
#include "support/runtime_fixture.hpp"

namespace nerve::testing {

struct ContextDeleter {
  void operator()(nerve_context_t* ctx) const noexcept { nerve_shutdown(ctx); }
};
using ContextPtr = std::unique_ptr<nerve_context_t, ContextDeleter>;

inline ContextPtr make_context(int workers, const char* policy = "locality_aware_stealing") {
  const std::string policy_setting = std::string("scheduler.policy=") + policy;
  // gpu.devices=none: the suites count and address devices, whatever OpenCL platforms the machine has.
  const char* settings[] = {policy_setting.c_str(), "gpu.devices=none"};
  nerve_context_config_t config = NERVE_CONTEXT_CONFIG_DEFAULT;
  config.use_environment = 0;
  config.thread_pool_size = workers;
  config.settings = settings;
  config.setting_count = 2;
  ContextPtr ctx(nerve_init_with_config(&config));
  EXPECT_NE(ctx, nullptr) << nerve_last_error();
  return ctx;
}

// EXPECT_NERVE_ERROR() runs a call expected to fail and checks its's status and that its message contains
// `fragment`.
#define EXPECT_NERVE_ERROR(call, status, fragment)                                           \
  do {                                                                                       \
    nerve_clear_last_error();                                                                \
    (void)(call);                                                                            \
    EXPECT_EQ(nerve_last_status(), (status)) << #call << ": " << nerve_last_error();         \
    EXPECT_NE(std::string(nerve_last_error()).find(fragment), std::string::npos)             \
        << #call << ": message '" << nerve_last_error() << "' lacks '" << (fragment) << "'"; \
  } while (false)

// wait_until() polls `condition` for up to `timeout`; true if it became true.
template <class Condition>
bool wait_until(Condition condition, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

// submit() makes a task over `buffers` (whole, in their allocation modes) and submits it.
inline nerve_status_t submit(nerve_context_t* ctx, nerve_kernel_fn fn, void* desc,
                             std::vector<nerve_buffer_t*> buffers = {}, const char* name = nullptr) {
  nerve_task_t* task = nerve_task_create(fn, desc);
  if (task == nullptr) return nerve_last_status();
  if (nerve_status_t status = nerve_task_set_memory_deps(task, buffers.size(), buffers.data());
      status != NERVE_OK) {
    nerve_task_destroy(task);
    return status;
  }
  if (name != nullptr) nerve_task_set_name(task, name);
  return nerve_task_submit(ctx, task, NERVE_DEVICE_ANY);
}

// Typed access to a buffer's host mapping, unmapped at scope exit.
template <class T>
class MappedC {
 public:
  MappedC(nerve_buffer_t* buffer, nerve_map_mode_t mode)
      : buffer_(buffer), data_(static_cast<T*>(nerve_buffer_map(buffer, mode))) {
    EXPECT_NE(data_, nullptr) << nerve_last_error();
  }
  ~MappedC() {
    if (data_ != nullptr) EXPECT_EQ(nerve_buffer_unmap(buffer_), NERVE_OK) << nerve_last_error();
  }
  MappedC(const MappedC&) = delete;
  MappedC& operator=(const MappedC&) = delete;
  T& operator[](std::size_t i) const { return data_[i]; }
  T* data() const { return data_; }

 private:
  nerve_buffer_t* buffer_;
  T* data_;
};

using CapiParam = std::tuple<int, const char*>;  // workers, scheduler policy

inline std::string capi_param_name(const ::testing::TestParamInfo<CapiParam>& info) {
  const auto [workers, policy] = info.param;
  return std::to_string(workers) + "_workers_" + (std::string(policy) == "eager" ? "eager" : "locality");
}

#define NERVE_CAPI_PARAMS \
  ::testing::Combine(::testing::Values(1, 2, 4), ::testing::Values("eager", "locality_aware_stealing"))

class CapiTest : public ::testing::TestWithParam<CapiParam> {
 protected:
  void SetUp() override {
    const auto [workers, policy] = GetParam();
    ctx = make_context(workers, policy);
    ASSERT_NE(ctx, nullptr);
  }
  void TearDown() override {
    if (!ctx) return;
    EXPECT_EQ(nerve_wait_all(ctx.get()), NERVE_OK) << nerve_last_error();
    expect_no_leaks(*ctx->runtime);
    ctx.reset();
  }
  int workers() const { return std::get<0>(GetParam()); }

  nerve_buffer_t* alloc(std::size_t bytes, unsigned flags = MEM_FLAG_READ_WRITE) {
    nerve_buffer_t* buffer = nerve_buffer_alloc_unified(ctx.get(), bytes, flags);
    EXPECT_NE(buffer, nullptr) << nerve_last_error();
    return buffer;
  }
  void free_buffer(nerve_buffer_t* buffer) {
    EXPECT_EQ(nerve_buffer_free(buffer), NERVE_OK) << nerve_last_error();
  }

  ContextPtr ctx;
};

}  // namespace nerve::testing
