/* capi_header_c89.c — nerve.h compiles as strict C89 (-std=c89 -pedantic -Werror): a C program of any
 * standard can include it. Built, not run. */
#include "nerve/nerve.h"

int nerve_c89_header_compiles(void);
int nerve_c89_header_compiles(void) { return NERVE_OK; }
