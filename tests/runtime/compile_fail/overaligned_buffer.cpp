// Must not compile: Buffer<T> refuses an element type aligned beyond the 64 bytes buffer data has
// (tests/runtime/CMakeLists.txt checks the compiler's message).
#include "nerve/nerve.hpp"

struct alignas(128) Page {
  char bytes[128];
};

void make(nerve::Context& context) { nerve::Buffer<Page> pages(context, 2); }
