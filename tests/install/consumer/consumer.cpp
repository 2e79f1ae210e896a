// consumer.cpp — a program that uses nerve as an installed package, built by run-install-test.sh with
// find_package(nerve CONFIG) and with pkg-config. It touches the public API only.
#include <cstdio>
#include <cstring>

#include "nerve/device.hpp"
#include "nerve/error.hpp"

int main() {
  const char* busy = nerve::name(nerve::ErrorCode::busy);
  if (std::strcmp(busy, "busy") != 0) {
    std::fprintf(stderr, "consumer: nerve::name(busy) gave '%s'\n", busy);
    return 1;
  }
  // Every free function of the public headers is exported from the shared library too.
  if (std::strcmp(nerve::name(nerve::DeviceKind::opencl), "opencl") != 0) {
    std::fprintf(stderr, "consumer: nerve::name(DeviceKind::opencl) gave '%s'\n",
                 nerve::name(nerve::DeviceKind::opencl));
    return 1;
  }
  try {
    throw nerve::ConfigError("consumer: a test error", "parallel.thread_pool_size");
  } catch (const nerve::Error& error) {
    if (error.code() != nerve::ErrorCode::invalid_config) {
      std::fprintf(stderr, "consumer: caught the wrong error code\n");
      return 1;
    }
  }
  std::printf("consumer: nerve works (name(busy) = %s)\n", busy);
  return 0;
}
