/* task.h — the design documents include <nerve/task.h>; the task and task pool API is part of nerve.h. */
#ifndef NERVE_TASK_H
#define NERVE_TASK_H
#include "nerve/nerve.h"
#endif
