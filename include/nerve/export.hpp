/* export.hpp — symbol visibility for the public API.
 *
 * The library is built with hidden visibility; only declarations marked NERVE_API are exported from
 * the shared library. The static library holds the same objects, so a shared library of yours that
 * links it exports nerve's API as its own (and a program that also links libnerve.so may bind to
 * that copy): link it with -Wl,--exclude-libs,libnerve.a to keep nerve inside.
 * Plain preprocessor macros and C comments only: the C header nerve.h includes this file too, and
 * must compile as C89. */
#pragma once

#if defined(NERVE_STATIC_DEFINE)
#define NERVE_API
#elif defined(__GNUC__)
#define NERVE_API __attribute__((visibility("default")))
#else
#define NERVE_API
#endif
