// refused_wait.hpp — the error of a wait that could never end.
#pragma once

#include "nerve/error.hpp"

namespace nerve::detail {

// RefusedWait: a wait refused because it could never end (Error(buffer_misuse): it would wait for a
// mapping the calling thread holds). Its own type, so that the C API reports one refused in the
// middle of nerve_wait_all() as the caller's misuse, not as a task's failure.
struct RefusedWait : Error {
  using Error::Error;
};

}  // namespace nerve::detail
