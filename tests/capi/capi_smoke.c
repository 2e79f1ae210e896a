/* capi_smoke.c — the C API used from C11: init, buffers, map, tasks with inferred dependencies, a task
 * pool, waits, failure reporting and free. Built as C against the shared library, so it also proves that
 * nerve.h is valid C and that every function it calls is exported. Exit code 0 on success. */
#include <nerve/nerve.h>
#include <stdio.h>
#include <string.h>

static int failures = 0;

#define CHECK(condition)                                                                           \
  do {                                                                                             \
    if (!(condition)) {                                                                            \
      fprintf(stderr, "%s:%d: CHECK(%s) failed; last error: %s\n", __FILE__, __LINE__, #condition, \
              nerve_last_error());                                                                 \
      ++failures;                                                                                  \
    }                                                                                              \
  } while (0)

enum { count = 1024 };

typedef struct {
  nerve_buffer_t* in;
  nerve_buffer_t* out;
  size_t first;
  size_t length;
} scale_desc_t;

/* out[i] = 2 * in[i] over the descriptor's range. */
static void scale_kernel(void* desc_ptr, nerve_device_t device, nerve_stream_t stream) {
  const scale_desc_t* desc = (const scale_desc_t*)desc_ptr;
  const int* in = (const int*)nerve_buffer_get_device_ptr(desc->in, device);
  int* out = (int*)nerve_buffer_get_device_ptr(desc->out, device);
  (void)stream;
  if (in == NULL || out == NULL) {
    nerve_task_fail(nerve_last_error());
    return;
  }
  for (size_t i = desc->first; i < desc->first + desc->length; ++i) out[i] = 2 * in[i];
}

/* data[i] += 1 over the whole buffer. */
static void increment_kernel(void* desc_ptr, nerve_device_t device, nerve_stream_t stream) {
  int* data = (int*)nerve_buffer_get_device_ptr((nerve_buffer_t*)desc_ptr, device);
  (void)stream;
  for (size_t i = 0; i < count; ++i) data[i] += 1;
}

static void failing_kernel(void* desc_ptr, nerve_device_t device, nerve_stream_t stream) {
  (void)desc_ptr;
  (void)device;
  (void)stream;
  nerve_task_fail("deliberate failure");
}

int main(void) {
  /* gpu.devices=none: the count below is the CPU workers alone, whatever OpenCL platforms exist. */
  const char* settings[] = {"scheduler.policy=eager", "gpu.devices=none"};
  nerve_context_config_t config = NERVE_CONTEXT_CONFIG_DEFAULT;
  config.use_environment = 0;
  config.thread_pool_size = 2;
  config.settings = settings;
  config.setting_count = 2;
  nerve_context_t* ctx = nerve_init_with_config(&config);
  if (ctx == NULL) {
    fprintf(stderr, "nerve_init_with_config: %s\n", nerve_last_error());
    return 1;
  }
  CHECK(nerve_context_get_device_count(ctx) == 1);
  CHECK(nerve_context_get_worker_count(ctx) == 2);

  nerve_buffer_t* in = nerve_buffer_alloc(ctx, count * sizeof(int), NERVE_DEVICE_CPU, MEM_FLAG_READ_WRITE);
  nerve_buffer_t* out = nerve_buffer_alloc_unified(ctx, count * sizeof(int), MEM_FLAG_WRITE);
  CHECK(in != NULL && out != NULL);
  CHECK(nerve_buffer_size(in) == count * sizeof(int));
  int* host = (int*)nerve_buffer_map(in, NERVE_MAP_WRITE);
  CHECK(host != NULL);
  for (size_t i = 0; i < count; ++i) host[i] = (int)i;
  CHECK(nerve_buffer_unmap(in) == NERVE_OK);

  /* Ten increments of `in` (a chain, inferred from the whole-buffer accesses)... */
  for (int k = 0; k < 10; ++k) {
    nerve_task_t* task = nerve_task_create(increment_kernel, in);
    CHECK(nerve_task_set_memory_deps(task, 1, &in) == NERVE_OK);
    CHECK(nerve_task_set_name(task, "increment") == NERVE_OK);
    CHECK(nerve_task_submit(ctx, task, NERVE_DEVICE_ANY) == NERVE_OK);
  }
  /* ...then a pool of independent slices reading `in` and writing `out`: it waits for the chain. */
  nerve_task_pool_t* pool = nerve_task_pool_create(ctx, 4);
  CHECK(pool != NULL);
  for (size_t slice = 0; slice < 4; ++slice) {
    scale_desc_t* desc = (scale_desc_t*)nerve_task_pool_alloc_desc(pool);
    desc->in = in;
    desc->out = out;
    desc->first = slice * (count / 4);
    desc->length = count / 4;
    nerve_task_t* task = nerve_task_create(scale_kernel, desc);
    CHECK(nerve_task_add_access(task, in, NERVE_ACCESS_READ, desc->first * sizeof(int),
                                desc->length * sizeof(int)) == NERVE_OK);
    CHECK(nerve_task_add_access(task, out, NERVE_ACCESS_WRITE, desc->first * sizeof(int),
                                desc->length * sizeof(int)) == NERVE_OK);
    CHECK(nerve_task_set_compute_intensive(task, true) == NERVE_OK);
    CHECK(nerve_task_pool_submit(pool, task) == NERVE_OK);
  }
  CHECK(nerve_task_pool_launch(pool) == NERVE_OK);
  CHECK(nerve_task_pool_wait_all(pool) == NERVE_OK);
  nerve_task_pool_destroy(pool);

  const int* result = (const int*)nerve_buffer_map(out, NERVE_MAP_READ);
  CHECK(result != NULL);
  if (result != NULL) {
    for (size_t i = 0; i < count; ++i) {
      if (result[i] != 2 * ((int)i + 10)) {
        fprintf(stderr, "out[%zu] = %d, expected %d\n", i, result[i], 2 * ((int)i + 10));
        ++failures;
        break;
      }
    }
    CHECK(nerve_buffer_unmap(out) == NERVE_OK);
  }

  /* Failure reporting. */
  nerve_task_t* failing = nerve_task_create(failing_kernel, NULL);
  CHECK(nerve_task_set_name(failing, "failing") == NERVE_OK);
  CHECK(nerve_task_submit(ctx, failing, NERVE_DEVICE_ANY) == NERVE_OK);
  CHECK(nerve_wait_all(ctx) == NERVE_ERROR_TASK_FAILED);
  CHECK(strstr(nerve_last_error(), "deliberate failure") != NULL);
  CHECK(nerve_last_status() == NERVE_ERROR_TASK_FAILED);
  CHECK(strcmp(nerve_status_string(nerve_last_status()), "task_failed") == 0);

  /* Misuse is reported, not undefined. */
  CHECK(nerve_buffer_free(in) == NERVE_OK);
  CHECK(nerve_buffer_free(in) == NERVE_ERROR_BUFFER_MISUSE);
  CHECK(nerve_buffer_map(in, NERVE_MAP_READ) == NULL && nerve_last_status() == NERVE_ERROR_BUFFER_MISUSE);
  CHECK(nerve_task_submit(ctx, nerve_task_create(increment_kernel, out), 5) == NERVE_ERROR_INVALID_ARGUMENT);
  CHECK(nerve_buffer_free(out) == NERVE_OK);

  CHECK(nerve_wait_all(ctx) == NERVE_OK);
  nerve_shutdown(ctx);
  if (failures != 0) {
    fprintf(stderr, "capi_smoke: %d check(s) failed\n", failures);
    return 1;
  }
  printf("capi_smoke: all checks passed\n");
  return 0;
}
