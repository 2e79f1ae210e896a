// user_program.cpp — the public headers in the forms the documentation shows compile without a
// warning under -Wall -Wextra -Wpedantic -Wshadow -Wold-style-cast -Wnon-virtual-dtor -Wundef -Werror,
// included with -I as pkg-config gives them (not -isystem, which silences warnings in headers).
// Compiled, not run (tests/runtime/CMakeLists.txt). Not -Wconversion: it rightly flags a loop body
// whose parameters are narrower than the std::size_t indices it is documented to get (the int
// parameters below).
#include <span>
#include <string>

#include "nerve/coroutine.hpp"
#include "nerve/nerve.h"
#include "nerve/nerve.hpp"
#include "nerve/parallel.hpp"

// LoopBound admits the integer types std::in_range() checks, not bool or the character types.
static_assert(nerve::LoopBound<int> && nerve::LoopBound<unsigned long> && nerve::LoopBound<signed char> &&
              nerve::LoopBound<unsigned char>);
static_assert(!nerve::LoopBound<bool> && !nerve::LoopBound<char> && !nerve::LoopBound<wchar_t> &&
              !nerve::LoopBound<char8_t> && !nerve::LoopBound<char16_t> && !nerve::LoopBound<char32_t>);

nerve::CoTask<int> answer() { co_return 42; }

void documented_forms(nerve::Context& context, const nerve::Kernel& kernel, nerve::Buffer<float>& data) {
  // README: TaskOptions by designated initializers, leaving out the members not needed.
  context.spawn(
      nerve::TaskOptions{.name = "scale", .compute_intensive = true},
      [](std::span<float> values) { values[0] *= 2.0f; }, nerve::read_write(data));
  context.submit(kernel).wait();  // a kernel without arguments
  context.spawn(kernel, nerve::read(data));
  nerve::parallel_for(context, 0, 100, 10, [](int, int) {});
  context.wait_all();
}

// The C API's device constants in C++ code (they were C casts: -Wold-style-cast).
nerve_device_t devices[] = {NERVE_DEVICE_ANY, NERVE_DEVICE_CPU};
