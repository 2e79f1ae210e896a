/* buffer.h — the design documents include <nerve/buffer.h>; the buffer API is part of nerve.h. */
#ifndef NERVE_BUFFER_H
#define NERVE_BUFFER_H
#include "nerve/nerve.h"
#endif
