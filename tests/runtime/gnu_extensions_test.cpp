// The public API in a GNU mode (-std=gnu++20, CMake's default for a consumer: CXX_EXTENSIONS is ON
// unless a project turns it off). There the 128-bit integers are integral types, so parallel.hpp's
// LoopBound takes them as loop bounds: they must work as the other integers do, and a bound that
// does not fit std::size_t must be refused naming its value (it failed to compile: std::to_string
// has no overload for them).
#include <atomic>
#include <cstddef>

#include <gmock/gmock.h>

#include "support/runtime_fixture.hpp"

namespace nerve::testing {
namespace {

#if defined(__SIZEOF_INT128__)
__extension__ using Int128 = __int128;
__extension__ using Uint128 = unsigned __int128;

static_assert(LoopBound<Int128> && LoopBound<Uint128>, "this test needs a GNU mode");

TEST(GnuExtensions, ParallelLoopsTake128BitBounds) {
  Context context(make_settings(2));
  std::atomic<long> sum{0};
  parallel_for(context, Int128{2}, Int128{12}, Uint128{1},
               [&](std::size_t i) { sum.fetch_add(static_cast<long>(i)); });
  EXPECT_EQ(sum.load(), 65);
  const auto count = parallel_reduce(
      context, Uint128{0}, Int128{1000}, 0, 0L,
      [](std::size_t b, std::size_t e) { return static_cast<long>(e - b); },
      [](long a, long b) { return a + b; });
  EXPECT_EQ(count, 1000);
  try {
    parallel_for(context, -(Int128{1} << 100), Int128{10}, 1, [](std::size_t) {});
    FAIL() << "a negative begin was accepted";
  } catch (const Error& error) {
    EXPECT_EQ(error.code(), ErrorCode::invalid_argument);
    EXPECT_THAT(error.what(),
                ::testing::HasSubstr("parallel_for: begin is negative (-1267650600228229401496703205376)"));
  }
  try {
    (void)parallel_reduce(
        context, 0, (Uint128{1} << 127) + 5, 1, 0L, [](std::size_t, std::size_t) { return 0L; },
        [](long a, long b) { return a + b; });
    FAIL() << "an end past std::size_t was accepted";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), ::testing::HasSubstr("parallel_reduce: end does not fit std::size_t "
                                                   "(170141183460469231731687303715884105733)"));
  }
  try {
    parallel_for(context, 0, 10, Int128{-7}, [](std::size_t) {});
    FAIL() << "a negative grain was accepted";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), ::testing::HasSubstr("grain is negative (-7)"));
  }
}
#endif

}  // namespace
}  // namespace nerve::testing
