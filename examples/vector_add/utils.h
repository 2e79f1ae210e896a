/* utils.h — the helpers the design documents' nerve_style.cu includes: the vector-add "kernel wrapper"
 * and the data initialisation, here as CPU code (the seed's CUDA kernel becomes a loop). */
#ifndef VECTOR_ADD_UTILS_H
#define VECTOR_ADD_UTILS_H

#include <nerve/nerve.h>
#include <stddef.h>

/* launch_vector_add_kernel() computes c[i] = a[i] + b[i] for i < n. On a GPU this would enqueue the
 * seed's vectorAdd kernel on `stream`; on the CPU workers it runs the loop at once (stream is NULL). */
static inline void launch_vector_add_kernel(const float* a, const float* b, float* c, size_t n,
                                            nerve_stream_t stream) {
  (void)stream;
  for (size_t i = 0; i < n; ++i) c[i] = a[i] + b[i];
}

/* init_data() fills the inputs with a non-zero pattern whose sums are exact in float (small integers),
 * so the result can be checked with ==. */
static inline float input_a(size_t i) { return (float)(i % 4096u) + 1.0f; }
static inline float input_b(size_t i) { return (float)(2u * (i % 1024u)) + 0.5f; }

static inline void init_data(float* a, float* b, int n) {
  for (size_t i = 0; i < (size_t)n; ++i) {
    a[i] = input_a(i);
    b[i] = input_b(i);
  }
}

#endif /* VECTOR_ADD_UTILS_H */
