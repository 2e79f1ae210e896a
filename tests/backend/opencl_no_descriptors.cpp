// opencl_no_descriptors.cpp — a process with no file descriptor left when OpenCL is first looked for.
// The ICD loader reads its vendor files once per process and, unable to open them, finds no
// platform: the error must say that the process could open no file, not only where the vendor files
// are. Run by CTest, which matches its output (tests/backend/CMakeLists.txt).
#include <cstdio>
#include <vector>

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include "nerve/nerve.hpp"

int main() {
  const rlimit few{64, 64};
  if (setrlimit(RLIMIT_NOFILE, &few) != 0) return 2;
  std::vector<int> held;
  for (int fd = 0; (fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0;) held.push_back(fd);
  int status = 1;
  try {
    nerve::Settings settings;
    settings.use_environment(false);
    settings.set("parallel.thread_pool_size", "1");
    settings.set("gpu.devices", "opencl");
    const nerve::Context context(settings);
    std::puts("a context with OpenCL devices was made with no file descriptor left");
  } catch (const nerve::Error& error) {
    std::printf("%s\n", error.what());
    status = 0;
  }
  for (int fd : held) ::close(fd);
  return status;
}
