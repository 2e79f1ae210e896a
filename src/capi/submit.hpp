// submit.hpp — the one path from a nerve_task to a runtime task, for nerve_task_submit() and
// nerve_task_pool_submit().
#pragma once

#include <memory>

#include "nerve/detail/runtime_api.hpp"

#include "capi/handles.hpp"

namespace nerve::capi {

// submit_task() turns `task` into a runtime task of `ctx` (a member of `pool` if not null). The task
// is consumed in every case: on success the runtime owns it until the task finishes; on error it is
// destroyed before the exception propagates. Throws BufferMisuse for a freed buffer or one of another
// context, Error(invalid_argument) for a launched pool (too many accesses were refused when declared).
void submit_task(nerve_context& ctx, std::unique_ptr<nerve_task> task, detail::PoolState* pool,
                 int device = NERVE_DEVICE_ANY);

}  // namespace nerve::capi
