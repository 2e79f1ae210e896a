#include "util/start_thread.hpp"

#include <fmt/format.h>

#include "nerve/error.hpp"

namespace nerve::detail {

void throw_thread_not_started(std::string_view what, const std::system_error& error) {
  throw Error(ErrorCode::out_of_memory,
              fmt::format("cannot start {}: {} (the system refused a thread: the process's limit on threads, "
                          "`ulimit -u` or a cgroup's pids.max, or memory for its stack, `ulimit -v`)",
                          what, error.code().message()));
}

}  // namespace nerve::detail
