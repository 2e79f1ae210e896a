/* kernel.h — the design documents include <nerve/kernel.h> for "kernel wrappers". nerve ships no
 * kernels (the math is the program's); kernels are plain nerve_kernel_fn functions, declared in
 * nerve.h. Kept so that code written against the documents compiles unchanged. */
#ifndef NERVE_KERNEL_H
#define NERVE_KERNEL_H
#include "nerve/nerve.h"
#endif
