/* The C API from a C program linked statically (run-install-test.sh). */
#include <nerve/nerve.h>
#include <stdio.h>

int main(void) {
  nerve_context_t* context = nerve_init();
  if (context == NULL) {
    printf("nerve_init failed: %s\n", nerve_last_error());
    return 1;
  }
  printf("C consumer: %u workers\n", (unsigned)nerve_context_get_worker_count(context));
  nerve_shutdown(context);
  return 0;
}
