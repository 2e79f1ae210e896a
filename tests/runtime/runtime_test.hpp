// runtime_test.hpp — the parameterised fixture of the runtime suites (workers × policies).
#pragma once

#include <memory>

#include "support/runtime_fixture.hpp"

namespace nerve::testing {

class RuntimeTest : public ::testing::TestWithParam<RuntimeParam> {
 protected:
  void SetUp() override {
    const auto [workers, policy] = GetParam();
    context = std::make_unique<Context>(make_settings(workers, policy));
  }
  void TearDown() override {
    if (context) {
      context->wait_all();
      expect_no_leaks(*context);
    }
  }
  unsigned workers() const { return std::get<0>(GetParam()); }

  std::unique_ptr<Context> context;
};

}  // namespace nerve::testing
