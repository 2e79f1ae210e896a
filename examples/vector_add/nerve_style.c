/* nerve_style.c — the design documents' "nerve style" vector add (seed 000, §4.3), compiled as C11.
 *
 * run_nerve_style() is the seed's code. What differs, each marked "CHANGE:" where it happens:
 *   - the kernel wrapper and init_data() come from utils.h as CPU code (the seed's is CUDA);
 *   - step 5 ("verify, optional, by mapping buf_c") is written out, and run_nerve_style() returns the
 *     number of wrong elements (or -1 on an error) instead of void, so that main() can fail;
 *   - NULL checks after allocation and mapping (the seed has none; a NULL there would crash);
 *   - casts where the seed compares size_t with int, and num_devices, which the seed computes but never
 *     uses, is printed;
 *   - each task declares only its own chunk of buf_c (nerve_task_add_access), as a WRITE access must
 *     be written whole;
 *   - main() (not in the seed): parse N (strictly), nerve_init, run_nerve_style, report, nerve_shutdown.
 * The seed's §3.1 DEVICE_GPU0 has no counterpart here: a CPU-only build has NERVE_DEVICE_CPU (0) and
 * NERVE_DEVICE_ANY, and this code never names a device at all — the scheduler places the tasks.
 *
 * Usage: nerve_style [N]   (1 to INT_MAX elements, default 16777216)
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// The seed's includes, in the seed's order:
// clang-format off
#include <nerve/nerve.h>
#include <nerve/buffer.h>
#include <nerve/task.h>
#include <nerve/kernel.h>  // the documents' module for kernel wrappers
// clang-format on
#include "utils.h"  // the vector-add kernel wrapper (CHANGE: a CPU loop)

// A simple vector-add task "descriptor"
typedef struct {
  nerve_buffer_t* buf_a;
  nerve_buffer_t* buf_b;
  nerve_buffer_t* buf_c;
  size_t offset;
  size_t num_elements;
} vec_add_task_desc_t;

// The task function (called on the device the task runs on)
static void vec_add_kernel_launcher(void* desc_ptr, nerve_device_t device, nerve_stream_t stream) {
  vec_add_task_desc_t* desc = (vec_add_task_desc_t*)desc_ptr;
  const float* d_a = (const float*)nerve_buffer_get_device_ptr(desc->buf_a, device);
  const float* d_b = (const float*)nerve_buffer_get_device_ptr(desc->buf_b, device);
  float* d_c = (float*)nerve_buffer_get_device_ptr(desc->buf_c, device);
  // Call our precompiled kernel (wrapped)
  launch_vector_add_kernel(d_a + desc->offset, d_b + desc->offset, d_c + desc->offset, desc->num_elements,
                           stream);
}

// CHANGE: returns the number of wrong elements, or -1 on an error (the seed returns void).
int run_nerve_style(int N, nerve_context_t* ctx) {
  size_t size = N * sizeof(float);

  // 1. Create "unified" buffers. The scheduler decides where they physically live.
  nerve_buffer_t* buf_a = nerve_buffer_alloc_unified(ctx, size, MEM_FLAG_READ_WRITE);
  nerve_buffer_t* buf_b = nerve_buffer_alloc_unified(ctx, size, MEM_FLAG_READ_WRITE);
  nerve_buffer_t* buf_c = nerve_buffer_alloc_unified(ctx, size, MEM_FLAG_WRITE);
  if (buf_a == NULL || buf_b == NULL || buf_c == NULL) {  // CHANGE: error check
    fprintf(stderr, "nerve_style: %s\n", nerve_last_error());
    return -1;
  }

  // 2. Prepare the data on the host (through mapped pointers)
  float* h_a = (float*)nerve_buffer_map(buf_a, NERVE_MAP_WRITE);
  float* h_b = (float*)nerve_buffer_map(buf_b, NERVE_MAP_WRITE);
  if (h_a == NULL || h_b == NULL) {  // CHANGE: error check
    fprintf(stderr, "nerve_style: %s\n", nerve_last_error());
    return -1;
  }
  init_data(h_a, h_b, N);
  nerve_buffer_unmap(buf_a);
  nerve_buffer_unmap(buf_b);

  // 3. Create a task pool and decompose the work dynamically
  int num_devices = nerve_context_get_device_count(ctx);
  printf("nerve_style: %d device(s)\n", num_devices);  // CHANGE: the seed never uses num_devices
  // Dynamic task size: e.g. 1M elements per task, and let the scheduler place them freely
  const size_t task_chunk = 1 * 1024 * 1024;
  size_t num_tasks = (N + task_chunk - 1) / task_chunk;
  nerve_task_pool_t* pool = nerve_task_pool_create(ctx, num_tasks);

  for (size_t i = 0; i < num_tasks; ++i) {
    size_t start = i * task_chunk;
    // CHANGE: (size_t) casts; the seed compares size_t with int
    size_t count = (start + task_chunk > (size_t)N) ? ((size_t)N - start) : task_chunk;

    vec_add_task_desc_t* desc = (vec_add_task_desc_t*)nerve_task_pool_alloc_desc(pool);
    desc->buf_a = buf_a;
    desc->buf_b = buf_b;
    desc->buf_c = buf_c;
    desc->offset = start;
    desc->num_elements = count;

    // Create the task: bind the descriptor to the task function
    nerve_task_t* task = nerve_task_create(vec_add_kernel_launcher, desc);
    // Task properties: compute intensive, accesses buf_a, buf_b, buf_c
    // CHANGE: buf_c by the task's own chunk. The seed declares all of buf_c for every task, but a
    // WRITE access promises to write its whole range (nerve.h): elsewhere than in host memory each
    // task's replica of the rest would be garbage.
    nerve_task_set_memory_deps(task, 2, (nerve_buffer_t*[]){buf_a, buf_b});
    nerve_task_add_access(task, buf_c, NERVE_ACCESS_WRITE, start * sizeof(float), count * sizeof(float));
    nerve_task_set_compute_intensive(task, true);

    // Submit to the pool; the scheduler decides when and on which device it runs
    nerve_task_pool_submit(pool, task);
  }

  // 4. Start scheduling and wait for every task
  // (a "completion callback" could go here; we simply wait)
  nerve_task_pool_launch(pool);
  nerve_status_t status = nerve_task_pool_wait_all(pool);  // synchronises all devices efficiently
  if (status != NERVE_OK) fprintf(stderr, "nerve_style: %s\n", nerve_last_error());  // CHANGE

  // 5. Verify the result (map buf_c and read it back)  CHANGE: written out
  int wrong = status == NERVE_OK ? 0 : -1;
  const float* h_c = (const float*)nerve_buffer_map(buf_c, NERVE_MAP_READ);
  if (h_c == NULL) {
    fprintf(stderr, "nerve_style: %s\n", nerve_last_error());
    wrong = -1;
  } else {
    for (size_t i = 0; i < (size_t)N && wrong >= 0; ++i) {
      if (h_c[i] != input_a(i) + input_b(i)) {
        if (wrong == 0)
          fprintf(stderr, "nerve_style: c[%zu] = %g, expected %g\n", i, h_c[i], input_a(i) + input_b(i));
        ++wrong;
      }
    }
    nerve_buffer_unmap(buf_c);
  }

  // 6. Clean up
  nerve_task_pool_destroy(pool);
  nerve_buffer_free(buf_a);
  nerve_buffer_free(buf_b);
  nerve_buffer_free(buf_c);
  return wrong;
}

// CHANGE: N is parsed strictly (atoi read "1e6" as 1, "100abc" as 100 and wrapped 4294967297 to 1):
// decimal digits only, 1 to INT_MAX (run_nerve_style() takes an int); anything else is a usage error.
static int parse_elements(const char* text) {
  if (*text < '0' || *text > '9') return 0;  // strtol would accept a sign or leading spaces
  char* end = NULL;
  errno = 0;
  const long value = strtol(text, &end, 10);
  if (errno != 0 || *end != '\0' || value <= 0 || value > INT_MAX) return 0;
  return (int)value;
}

int main(int argc, char** argv) {
  int n = 1 << 24;
  if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
    printf("usage: %s [N, 1 to %d]\n", argv[0], INT_MAX);
    return 0;
  }
  if (argc > 1) n = parse_elements(argv[1]);
  if (argc > 2 || n <= 0) {
    fprintf(stderr, "usage: %s [N, 1 to %d]\n", argv[0], INT_MAX);
    return 2;
  }
  nerve_context_t* ctx = nerve_init();
  if (ctx == NULL) {
    fprintf(stderr, "nerve_style: nerve_init failed: %s\n", nerve_last_error());
    return 1;
  }
  const int wrong = run_nerve_style(n, ctx);
  nerve_shutdown(ctx);
  if (wrong != 0) {
    if (wrong > 0) fprintf(stderr, "nerve_style: FAILED, %d of %d elements wrong\n", wrong, n);
    return 1;
  }
  // CHANGE: the task count as (n - 1) / chunk + 1: n + (1 << 20) - 1 overflows int for n near INT_MAX.
  printf("nerve_style: %d elements added by %d task(s), result verified\n", n, (n - 1) / (1 << 20) + 1);
  return 0;
}
